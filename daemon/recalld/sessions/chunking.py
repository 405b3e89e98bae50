"""Chunking of transcript messages for embedding and keyword search.

A chunk is a run of whole messages rendered one per line as ``role: text`` (``name: text`` when
the message has a speaker name), preceded by a ``[YYYY-MM-DD]`` line at its start and wherever
the date changes. ``count_tokens(chunk.text) + 2 <= max_tokens`` always holds (the 2 are the
model's [CLS] and [SEP]). A message too long for one chunk is split at its text lines, then
words, then characters; every part keeps the message's JSONL line.

Boundaries depend only on what came before them: a chunk is closed as soon as it reaches
``target_tokens``, or when the next message would push it over ``max_tokens``. So appending
messages never changes an earlier chunk, only the last, still open one, and delta sync
re-embeds just the tail. :class:`SessionChunker` does this incrementally and can save and
restore its open chunk between runs.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from recalld.sessions.formats import Message

__all__ = ["SessionChunk", "SessionChunker", "chunk_messages"]

CountTokens = Callable[[str], int]
_SPECIALS = 2  # [CLS] and [SEP]
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_ROW = re.compile(r"\[\d{4}-\d{2}-\d{2}\]")
_LINES = re.compile(r"[^\n]*\n|[^\n]+")
_WORDS = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True, slots=True)
class SessionChunk:
    """A chunk of a transcript: JSONL lines ``start_line..end_line`` (inclusive) and its text."""

    start_line: int
    end_line: int
    text: str


@dataclass(slots=True)
class _Open:
    """The chunk being filled: rendered lines with the JSONL line each came from."""

    rows: list[tuple[int, str]] = field(default_factory=list)
    tokens: int = 0  # sum of the rows' counts; checked against the exact count on close
    date: str = ""


class SessionChunker:
    """Incremental :func:`chunk_messages`: feed messages as they arrive.

    :meth:`feed` returns the chunks that became final; :meth:`pending` is the open last chunk
    (index it too; it is replaced when it grows). :meth:`save` / :meth:`restore` carry the open
    chunk across runs (JSON-able), so a restart need not re-read the transcript.
    """

    def __init__(
        self,
        count_tokens: CountTokens,
        *,
        max_tokens: int = 256,
        target_tokens: int = 160,
        dates: bool = True,
    ) -> None:
        if max_tokens < 16 + _SPECIALS:
            raise ValueError("max_tokens is too small to hold a message line")
        self.count = count_tokens
        self.limit = max_tokens - _SPECIALS
        self.target = min(target_tokens, self.limit)
        self.dates = dates
        self._open = _Open()
        self._date_cost: dict[str, int] = {}

    # --- public API ---

    def feed(self, messages: Iterable[Message]) -> list[SessionChunk]:
        """Add messages; returns the chunks they completed, in order."""
        done: list[SessionChunk] = []
        for message in messages:
            for line, text, date, cost in self._units(message):
                self._add(line, text, date, cost, done)
        return done

    def pending(self) -> list[SessionChunk]:
        """The open last chunk ([] when there is none; two in the rare case :meth:`_fit` splits)."""
        return self._fit(self._open.rows) if self._open.rows else []

    def save(self) -> dict[str, Any]:
        """The open chunk as a JSON-able dict, for :meth:`restore`."""
        o = self._open
        return {"rows": [list(r) for r in o.rows], "tokens": o.tokens, "date": o.date}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`save` output (made with the same settings and counter)."""
        rows = [(int(line), str(text)) for line, text in state.get("rows", [])]
        self._open = _Open(rows, int(state.get("tokens", 0)), str(state.get("date", "")))

    # --- internals ---

    def _date_line(self, date: str) -> tuple[str, int]:
        line = f"[{date}]"
        if date not in self._date_cost:
            self._date_cost[date] = self.count(line)
        return line, self._date_cost[date]

    def _units(self, message: Message) -> list[tuple[int, str, str, int]]:
        """``(line, rendered text, date, tokens)`` for a message, split when too long."""
        date = ""
        if self.dates and _DATE.match(message.timestamp):
            date = message.timestamp[:10]
        prefix = f"{message.name or message.role}: "
        text = f"{prefix}{message.text}"
        room = self.limit - (self._date_line(date)[1] if date else 0)
        cost = self.count(text)
        if cost <= room:
            return [(message.line, text, date, cost)]
        units: list[tuple[int, str, str, int]] = []
        budget = max(1, room - self.count(prefix))
        queue = deque(_split(message.text, budget, self.count))
        while queue:
            part = queue.popleft()
            cost = self.count(prefix + part)
            if cost > room and len(part) > 1:  # prefix and part did not add up exactly
                budget = max(1, budget - (cost - room))
                queue.extendleft(reversed(_split(part, budget, self.count)))
                continue
            units.append((message.line, prefix + part, date, cost))
        return units

    def _add(self, line: int, text: str, date: str, cost: int, done: list[SessionChunk]) -> None:
        o = self._open
        extra = self._date_line(date)[1] if date and date != o.date else 0
        if o.rows and o.tokens + extra + cost > self.limit:
            self._close(done)
            o = self._open
            extra = self._date_line(date)[1] if date else 0
        if extra:
            o.rows.append((line, self._date_line(date)[0]))
            o.date = date
        o.rows.append((line, text))
        o.tokens += extra + cost
        if o.tokens >= self.target:
            self._close(done)

    def _close(self, done: list[SessionChunk]) -> None:
        rows, self._open = self._open.rows, _Open()
        if rows:
            done.extend(self._fit(rows))

    def _fit(self, rows: list[tuple[int, str]]) -> list[SessionChunk]:
        """The chunk of ``rows``, split in two if the exact count disagrees with the sum."""
        chunk = self._render(rows)
        if len(rows) == 1 or self.count(chunk.text) <= self.limit:
            return [chunk]  # one row always fits: _units made sure of it
        half = len(rows) // 2
        if half + 1 < len(rows) and _DATE_ROW.fullmatch(rows[half - 1][1]):
            half += 1  # keep a date line with the message it introduces
        return self._fit(rows[:half]) + self._fit(rows[half:])

    @staticmethod
    def _render(rows: list[tuple[int, str]]) -> SessionChunk:
        lines = [line for line, _ in rows]
        return SessionChunk(min(lines), max(lines), "\n".join(text for _, text in rows))


def _split(text: str, budget: int, count: CountTokens) -> list[str]:
    """Parts of ``text`` with ``count(part) <= budget``: at line ends, then words, then chars."""
    if count(text) <= budget:
        return [text.strip()] if text.strip() else []
    for pattern in (_LINES, _WORDS):
        pieces = pattern.findall(text)
        if len(pieces) > 1:
            return _pack(pieces, budget, count)
    return _split_chars(text, budget, count)


def _pack(pieces: list[str], budget: int, count: CountTokens) -> list[str]:
    """Greedy runs of ``pieces`` whose counts sum to at most ``budget``."""
    parts: list[str] = []

    def emit(group: list[str]) -> None:
        joined = "".join(group)
        # A sum of piece counts can undercount the joined text (a tokenizer that merges
        # across the boundary): then halve the run.
        if len(group) > 1 and count(joined) > budget:
            half = len(group) // 2
            emit(group[:half])
            emit(group[half:])
        elif joined.strip():
            parts.append(joined.strip())

    group: list[str] = []
    total = 0
    for piece in pieces:
        n = count(piece)
        if n > budget:
            if group:
                emit(group)
            group, total = [], 0
            parts.extend(_split(piece, budget, count))
            continue
        if group and total + n > budget:
            emit(group)
            group, total = [], 0
        group.append(piece)
        total += n
    if group:
        emit(group)
    return parts


def _split_chars(text: str, budget: int, count: CountTokens) -> list[str]:
    """Parts of a single huge "word" that each fit, in order: content-defined segments packed
    greedily, each segment and each part counted once (linear; a binary search over the rest
    of the text for every part was quadratic: 40 s for a 107 KB base64 blob)."""
    from itertools import pairwise

    from recalld.line_pieces import char_runs, segment_cuts

    cuts = [0, *segment_cuts(text, 0, len(text)), len(text)]
    packed: list[str] = []
    start = total = 0
    for a, b in pairwise(cuts):
        n = count(text[a:b])
        if total and total + n > budget:
            packed.append(text[start:a])
            start, total = a, 0
        total += n
    packed.append(text[start:])
    parts: list[str] = []
    for part in packed:  # a cut inside a word can change its count: check, split if needed
        if count(part) <= budget:
            parts.append(part)
        else:
            runs = char_runs(part, 0, len(part), lambda s: count(s) <= budget)
            parts.extend(part[x:y] for x, y in runs)
    return [p for p in parts if p]


def chunk_messages(
    messages: list[Message],
    count_tokens: CountTokens,
    *,
    max_tokens: int = 256,
    target_tokens: int = 160,
    dates: bool = True,
) -> list[SessionChunk]:
    """Chunks of ``messages`` (see the module docstring); the last one may still grow."""
    chunker = SessionChunker(
        count_tokens, max_tokens=max_tokens, target_tokens=target_tokens, dates=dates
    )
    return chunker.feed(messages) + chunker.pending()
