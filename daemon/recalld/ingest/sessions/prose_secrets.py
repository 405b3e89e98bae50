"""Secrets written in prose: a random-looking token next to words that say it is one.

``"the key id is AKIA... with secret wJalr..."`` has no ``key=value`` shape for the assignment
rules to see. Two context rules find such tokens near a *cue* (the words secret, password,
passwd, token, api key, credential, or an AWS access key id, already redacted by then):

- a 40-character base64 token (the shape of an AWS secret access key);
- a high-entropy token of at least 24 characters that mixes letter case and digits.

Both stay clear of what code and prose are full of: paths, identifiers, hashes, UUIDs, numbers.
A third rule reads a password said in a sentence (``the wifi password is "MarmotteBleue42"``,
``changed the db password to S3cure!pass``): the word after "password ... is / was / to" when it
is quoted, or holds a digit, a symbol or a capital past its first letter (a word of prose does
not: "the password is required").
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter

__all__ = ["find"]

# On the ASCII-folded copy (lower case, one byte per character). "redacted:aws_access_key_id"
# is an AWS key id that an earlier rule already replaced.
# "tokens", "tokenizer", "max_tokens" (usage counts in every Claude Code line) are not cues.
_CUE = re.compile(
    rb"secret|passw(?:or)?d|token(?!s|i[sz])|api[ _\-]?key|credential"
    rb"|redacted:aws_access_key_id|akia[0-9a-z]{16}"
)
# Ids that APIs put in every answer (request, message, tool call ids): not secrets.
_ID_PREFIX = re.compile(r"(?:req|msg|toolu|srvtoolu|call|resp|run|chatcmpl|file|batch|evt)_")
CUE_NEEDLES = (b"secret", b"passw", b"token", b"api", b"credential", b"redacted:aws", b"akia")
_AWS_CUE = (b"redacted:aws", b"akia")
# How far a cue may be before a token (100 characters: "AKIA... with secret wJalr...") or after it.
BEFORE, AFTER = 100, 40
# Token characters (on the folded copy) become "a", the rest " ": a run of 24+ token characters is
# then found by a plain substring search, some 50 times faster than a regex scan of the text.
_TOKEN_CHARS = b"abcdefghijklmnopqrstuvwxyz0123456789+/=_-"
_RUNS = bytes(ord("a") if i in _TOKEN_CHARS else ord(" ") for i in range(256))
MIN_LEN, MAX_LEN = 24, 256
_AWS_SECRET = re.compile(r"[A-Za-z0-9+/]{40}")
_HEX = re.compile(r"[0-9a-fA-F\-]+")
MIN_ENTROPY = 4.0  # bits per character: 94% of random 24-character tokens, 98% at 32 and up


def entropy(token: str) -> float:
    """Shannon entropy of ``token`` in bits per character."""
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in Counter(token).values())


_UPPER, _LOWER, _DIGIT = re.compile("[A-Z]"), re.compile("[a-z]"), re.compile("[0-9]")

# A password said in a sentence, on the folded copy: the cue, a few words of what it is for,
# the verb, an opening quote (``\"`` in a raw JSON line); the word after it is looked at.
_SPOKEN = re.compile(
    rb"(?:passw(?:or)?d|passphrase|passcode)(?: for [a-z0-9 '._\-]{1,40}?)?"
    rb" (?:is|was|to) +(\\?[\"'`])?"
)
_SPOKEN_END = re.compile(r"[\s\"'`\\]")
_TRAILING = ".,;:!?)]}"
_CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")  # PASSWORD_ENV: a name, not the password
SPOKEN_LEN = (6, 64)


def _spoken(text: str, folded: bytes) -> list[tuple[int, int, str]]:
    """Passwords said in a sentence (the third rule of the module's docstring)."""
    if b"pass" not in folded:
        return []
    found: list[tuple[int, int, str]] = []
    for m in _SPOKEN.finditer(folded):
        start = m.end()
        stop = _SPOKEN_END.search(text, start)
        end = len(text) if stop is None else stop.start()
        while end > start and text[end - 1] in _TRAILING:
            end -= 1
        word = text[start:end]
        if not SPOKEN_LEN[0] <= len(word) <= SPOKEN_LEN[1] or "REDACTED" in word:
            continue
        if _CONSTANT.fullmatch(word):
            continue
        quoted = m.group(1) is not None
        odd = any(not c.isalpha() for c in word) or any(c.isupper() for c in word[1:])
        if quoted or odd:
            found.append((start, end, "password"))
    return found


def _classes(token: str) -> tuple[bool, bool, bool]:
    return (
        _UPPER.search(token) is not None,
        _LOWER.search(token) is not None,
        _DIGIT.search(token) is not None,
    )


def _pathlike(token: str) -> bool:
    """A path or URL part: several ``/`` segments, or a segment that is a plain word."""
    parts = [p for p in re.split(r"[/\-_]", token) if p]
    if token.count("/") >= 4 or len(parts) >= 5:
        return True
    return token.count("/") >= 1 and any(p.isalpha() and p.islower() and len(p) >= 3 for p in parts)


def _kind(token: str, aws: bool) -> str | None:
    """The kind of secret ``token`` looks like, or None."""
    if "REDACTED" in token or _HEX.fullmatch(token) or _ID_PREFIX.match(token):
        return None  # a redaction, a hash or UUID, an API's request or message id
    upper, lower, digit = _classes(token)
    if not (upper and lower):
        return None
    aws_shape = _AWS_SECRET.fullmatch(token) is not None and (digit or "/" in token or "+" in token)
    if aws and aws_shape:
        return "aws_secret_key"  # next to its key id: even if its "/" parts look like a path
    if _pathlike(token):
        return None
    if aws_shape:
        return "secret"
    if digit and len(token) >= 24 and entropy(token) >= MIN_ENTROPY:
        return "high_entropy"
    return None


def _cue_marks(folded: bytes) -> tuple[list[int], list[bool]]:
    """Start of every cue in ``folded``, sorted, and whether it is an AWS key id. Found by
    substring search per needle (a regex alternation scans the text a character at a time)."""
    marks: list[tuple[int, bool]] = []
    for needle in CUE_NEEDLES:
        i = folded.find(needle)
        while i >= 0:
            m = _CUE.match(folded, i)
            if m is not None:
                marks.append((i, m.group(0).startswith(_AWS_CUE)))
            i = folded.find(needle, i + 1)
    marks.sort()
    return [i for i, _ in marks], [aws for _, aws in marks]


def _near(starts: list[int], aws: list[bool], start: int, end: int) -> bool | None:
    """None when no cue starts in the ``BEFORE`` characters before the token or the ``AFTER``
    after it; else whether one of those cues is an AWS key id."""
    found = None
    for lo, hi in ((start - BEFORE, start), (end, end + AFTER)):
        i = bisect.bisect_left(starts, lo)
        while i < len(starts) and starts[i] < hi:
            found = bool(found) or aws[i]
            i += 1
    return found


def _escape_letters(text: str, start: int) -> int:
    """How many characters at ``start`` belong to a JSON escape whose backslash is just before
    (the ``n`` of ``\\nwJalr...``, the ``u00e9`` of ``\\u00e9...``): 0 after ``\\\\``."""
    slashes = 0
    while start - slashes > 0 and text[start - slashes - 1] == "\\":
        slashes += 1
    if slashes % 2 == 0:
        return 0
    return 5 if text[start] == "u" else 1


def find(text: str, folded: bytes, escaped: bool = False) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` of every secret-looking token next to a cue, in order.

    ``escaped``: ``text`` is a raw JSON line, where the letters of an escape are not part of the
    token that follows them (a span then never starts inside an escape).
    """
    runs = folded.translate(_RUNS)
    found: list[tuple[int, int, str]] = []
    marks: tuple[list[int], list[bool]] | None = None
    seed = b"a" * MIN_LEN
    pos = 0
    while (start := runs.find(seed, pos)) >= 0:
        end = runs.find(b" ", start)
        end = len(runs) if end < 0 else end
        pos = end
        if escaped:
            start += _escape_letters(text, start)
        if not MIN_LEN <= end - start <= MAX_LEN:
            continue
        marks = marks or _cue_marks(folded)
        aws = _near(*marks, start, end)
        if aws is None:
            continue  # most long words
        kind = _kind(text[start:end], aws)
        if kind is not None:
            found.append((start, end, kind))
    spoken = _spoken(text, folded)
    return sorted(found + spoken) if spoken else found
