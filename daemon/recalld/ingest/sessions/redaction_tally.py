"""How many secrets redaction has hidden since the process started, each secret counted once.

Counting the ``[REDACTED:kind]`` tokens each call produced counted one secret many times: a tool
call's text names its command twice (the title and the arguments), a transcript read again (a
restart's catch-up, a reindex) is redacted again, and ``get --decoded`` went through the indexing
path and was counted as indexed. Here each hidden value is recovered from the text before and
after (the literal text between the tokens anchors it) and remembered by a hash of (kind, value):
a secret already counted is not counted again, per place (``indexed``: text on its way into the
index; ``served``: lines ``get`` returns). Past :data:`MAX_REMEMBERED` distinct secrets new ones
are still counted, without that memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from recalld.ingest.sessions.json_escapes import unescape

TOKEN = re.compile(r"\[REDACTED:([a-z_]+)\]")
MAX_REMEMBERED = 200_000  # 16-byte digests: a few MB at most

_lock = threading.Lock()
_tally: dict[str, Counter[str]] = {"indexed": Counter(), "served": Counter()}
_seen: dict[str, set[bytes]] = {"indexed": set(), "served": set()}
_place = threading.local()  # where a call on this thread counts (served_here)


@contextlib.contextmanager
def served_here() -> Iterator[None]:
    """Redactions made inside count as ``served`` whatever function made them (``get
    --decoded`` parses a line with the indexing parser)."""
    before = getattr(_place, "where", None)
    _place.where = "served"
    try:
        yield
    finally:
        _place.where = before


def count(where: str, before: str, after: str) -> int:
    """Count the secrets ``after`` hides that ``before`` showed; returns how many it hides
    (``where`` "log": returned, tallied by nobody)."""
    if after is before or after == before:
        return 0
    made = Counter(TOKEN.findall(after))
    made.subtract(Counter(TOKEN.findall(before)))
    replaced = sum(v for v in made.values() if v > 0)  # what the caller is told: tokens made
    where = getattr(_place, "where", None) or where
    if where not in _tally:
        return replaced
    found = hidden(before, after)
    with _lock:
        seen, tally = _seen[where], _tally[where]
        for i, (kind, value) in enumerate(found):
            # Tokens side by side: their values cannot be told apart, so the text they came
            # from (and their place in it) stands for each: served again, counted once.
            value = _plain(value) if value is not None else f"{i}\0{before}"
            digest = hashlib.blake2b(f"{kind}\0{value}".encode(), digest_size=16).digest()
            if digest in seen:
                continue
            if len(seen) < MAX_REMEMBERED:
                seen.add(digest)
            tally[kind] += 1
    return replaced


def _plain(value: str) -> str:
    """``value`` with its JSON escapes undone (a key escaped twice in a tool's JSON output is
    the key written plainly in a note)."""
    for _ in range(3):
        if "\\" not in value:
            break
        value = unescape(value)
    return value


def hidden(before: str, after: str) -> list[tuple[str, str | None]]:
    """(kind, value) of each token of ``after`` that stands for text of ``before``.

    ``after`` is ``before`` with spans replaced by tokens: the literal pieces between tokens are
    found in ``before`` in order, and what lies between them is the value. Where that does not
    hold (the redactor returned a decoded copy) the whole of ``before`` stands for the values;
    two tokens side by side cannot be told apart (value None: counted, not remembered).
    """
    pieces = TOKEN.split(after)  # literal, kind, literal, kind, ..., literal
    literals, kinds = pieces[0::2], pieces[1::2]
    if not before.startswith(literals[0]):
        return [(kind, before) for kind in kinds]
    out: list[tuple[str, str | None]] = []
    pos = len(literals[0])
    last = len(kinds) - 1
    for i, (kind, literal) in enumerate(zip(kinds, literals[1:], strict=True)):
        if not literal and i < last:
            out.append((kind, None))
            continue
        end = before.find(literal, pos) if literal else len(before)
        if end < 0:
            return [*out, (kind, before)]
        value = before[pos:end]
        if value != f"[REDACTED:{kind}]":  # a token already there: counted when it was made
            out.append((kind, value))
        pos = end + len(literal)
    return out


def reset() -> None:
    """Start counting afresh (a test that counts exactly; the daemon never calls it)."""
    with _lock:
        for where in _tally:
            _tally[where].clear()
            _seen[where].clear()


def counts() -> dict[str, Any]:
    """Distinct secrets redacted since the process started: total and by kind, per place."""
    with _lock:
        return {
            where: {"total": sum(tally.values()), "by_kind": dict(sorted(tally.items()))}
            for where, tally in _tally.items()
        }
