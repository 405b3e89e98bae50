"""Secrets written in prose: a random-looking token next to words that say it is one.

``"the key id is AKIA... with secret wJalr..."`` has no ``key=value`` shape for the assignment
rules to see. Two context rules find such tokens near a *cue* (the words secret, password,
passwd, token, api key, credential, or an AWS access key id, already redacted by then):

- a 40-character base64 token (the shape of an AWS secret access key);
- a high-entropy token of at least 24 characters that mixes letter case and digits.

Both stay clear of what code and prose are full of: paths, identifiers, hashes, UUIDs, numbers.
"""

from __future__ import annotations

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
MIN_ENTROPY = 4.0  # bits per character; random base64 of 24+ characters has about 4.3-5.5


def entropy(token: str) -> float:
    """Shannon entropy of ``token`` in bits per character."""
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in Counter(token).values())


def _classes(token: str) -> tuple[bool, bool, bool]:
    return (
        any(c.isupper() for c in token),
        any(c.islower() for c in token),
        any(c.isdigit() for c in token),
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
    if _pathlike(token):
        return None
    upper, lower, digit = _classes(token)
    if not (upper and lower):
        return None
    if _AWS_SECRET.fullmatch(token) and (digit or "/" in token or "+" in token):
        return "aws_secret_key" if aws else "secret"
    if digit and len(token) >= 24 and entropy(token) >= MIN_ENTROPY:
        return "high_entropy"
    return None


def _cues(folded: bytes, lo: int, hi: int) -> list[bytes]:
    return [m.group(0) for m in _CUE.finditer(folded, lo, hi)]


def find(text: str, folded: bytes) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` of every secret-looking token next to a cue, in order."""
    runs = folded.translate(_RUNS)
    found: list[tuple[int, int, str]] = []
    seed = b"a" * MIN_LEN
    pos = 0
    while (start := runs.find(seed, pos)) >= 0:
        end = runs.find(b" ", start)
        end = len(runs) if end < 0 else end
        pos = end
        if end - start > MAX_LEN:
            continue
        if _kind(text[start:end], aws=False) is None:
            continue  # most long words: no cue search needed
        cues = _cues(folded, max(start - BEFORE, 0), start) + _cues(folded, end, end + AFTER)
        if cues:
            aws = any(c.startswith(_AWS_CUE) for c in cues)
            found.append((start, end, _kind(text[start:end], aws) or "secret"))
    return found
