"""Private keys: PEM blocks at any JSON escape depth, and base64 that decodes to one.

A tool that prints a credentials file puts the key inside a JSON string (``"private_key":
"-----BEGIN PRIVATE KEY-----\\nMIIE..."``); the transcript line holds that output inside another
JSON string, so in the raw JSONL line each newline is ``\\\\n``, and one level deeper
``\\\\\\\\n``. The body scan takes a newline escape with any number of backslashes in front (and
the escaped ``/`` or ``\\u00XX`` some encoders write), so the block is replaced whole at every
depth, from ``BEGIN`` to ``END``; a block whose ``BEGIN`` was cut off (the tail of a log, a
window of a file) from its body to ``END``.

``kubectl get secret -o json`` shows the key base64-encoded (``"tls.key": "LS0tLS1CRUdJTi..."``,
the encoding of ``-----BEGIN``); such a run is decoded and replaced whole when it holds a key.
"""

from __future__ import annotations

import base64
import binascii
import re

__all__ = ["redact_encoded_keys", "redact_pem"]

TOKEN = "[REDACTED:private_key]"

_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,30}PRIVATE KEY(?: BLOCK)?-----")
_END = re.compile(r"-----END[A-Z0-9 ]{0,30}PRIVATE KEY(?: BLOCK)?-----")
# Base64, header lines ("Proc-Type: 4,ENCRYPTED"), whitespace, and escapes at any depth: the
# newline escapes, an escaped "/" and \u00XX (some encoders write "+" or "=" so). Bounded, so a
# truncated block (no END) costs at most this much.
_BODY = re.compile(r"(?:[A-Za-z0-9+/=:,.\- \t\r\n]|\\++(?:[nrt/]|u00[0-9a-fA-F]{2})){0,20000}+")


def redact_pem(text: str, keep_lines: bool = False) -> str:
    """``text`` with every private key block replaced by one token (idempotent).

    ``keep_lines``: the token is followed by as many newlines as the block held, so the lines
    after it keep their numbers (memory notes, whose chunks and ``get`` ranges are by line).
    """
    out: list[str] = []
    pos = 0
    while (begin := _BEGIN.search(text, pos)) is not None:
        body = _BODY.match(text, begin.end())
        stop = body.end() if body is not None else begin.end()
        end = _END.search(text, begin.end(), stop)
        cut = end.end() if end is not None else stop
        gone = text[begin.start() : cut]
        out += [text[pos : begin.start()], TOKEN]
        if keep_lines:
            out.append("\n" * gone.count("\n"))
        pos = cut
    text = "".join(out) + text[pos:] if out else text
    return _redact_headless(text, keep_lines) if "-----END" in text else text


# A line break, real or escaped at any depth, and what a line of a key's body looks like.
_LINE_BREAK = re.compile(r"\r?\n|\\++[rn]")
_BODY_LINE = re.compile(
    r"[ \t]*+(?:[A-Za-z0-9+/=]*+|(?:Proc-Type|DEK-Info):[^\\\n]{0,200}+)[ \t]*+"
)


def _body_start(text: str, stop: int, floor: int) -> int:
    """Where the body lines that end at ``stop`` begin (no earlier than ``floor``)."""
    starts = [floor] + [m.end() for m in _LINE_BREAK.finditer(text, floor, stop)]
    ends = [m.start() for m in _LINE_BREAK.finditer(text, floor, stop)] + [stop]
    start = stop
    for a, b in zip(reversed(starts), reversed(ends), strict=True):
        if _BODY_LINE.fullmatch(text, a, b) is None:
            break
        start = a
    return start


def _redact_headless(text: str, keep_lines: bool) -> str:
    """A block whose BEGIN line was cut off (a log tail, a window of a file): from the END line
    back over the body characters before it, at most as far as a body may be long."""
    out: list[str] = []
    pos = 0
    for end in _END.finditer(text):
        start = _body_start(text, end.start(), max(pos, end.start() - 20_000))
        gone = text[start : end.end()]
        out += [text[pos:start], TOKEN, "\n" * gone.count("\n") if keep_lines else ""]
        pos = end.end()
    return "".join(out) + text[pos:] if out else text


# Where the base64 of a key file starts: "-----BEGIN" (kubectl's "tls.key", any PEM file), or a
# JSON object holding a key ('{\n  "type"' and '{"type"': gcloud's "privateKeyData" is a whole
# service-account file). A file's encoding starts at its first byte, so one alignment suffices.
_NEEDLES = ("LS0tLS1CRUdJT", "ewogICJ0eXBlIj", "eyJ0eXBlIj")
_B64_RUN = re.compile(r"[A-Za-z0-9+/]{40,}+={0,2}")
_B64_CHAR = re.compile(r"[A-Za-z0-9+/]")
_MAX_RUN = 200_000  # a 16384-bit key is ~13 kB of base64; a longer run is not a key file


def _decodes_to_key(run: str) -> bool:
    body = run.rstrip("=")
    try:
        decoded = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b"PRIVATE KEY-----" in decoded or b'"private_key"' in decoded


def _runs(text: str) -> list[tuple[int, int]]:
    """Spans of base64 runs that start with a needle and decode to a key, in order."""
    spans: list[tuple[int, int]] = []
    for needle in _NEEDLES:
        i = text.find(needle)
        while i >= 0:
            if i and _B64_CHAR.match(text[i - 1]):  # inside a longer run: not where one starts
                i = text.find(needle, i + 1)
                continue
            run = _B64_RUN.match(text, i)
            if run is None:
                i = text.find(needle, i + 1)
                continue
            if len(run.group(0)) <= _MAX_RUN and _decodes_to_key(run.group(0)):
                spans.append(run.span())
            i = text.find(needle, run.end())  # each run is decoded once
    return sorted(spans)


def redact_encoded_keys(text: str) -> str:
    """``text`` with every base64 run that decodes to a private key (or to a JSON file holding
    one) replaced by one token; only runs that start like one are decoded."""
    out: list[str] = []
    pos = 0
    for start, end in _runs(text):
        if start >= pos:
            out += [text[pos:start], TOKEN]
            pos = end
    return "".join(out) + text[pos:] if out else text
