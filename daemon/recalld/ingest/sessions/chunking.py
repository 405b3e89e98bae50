"""Chunking of transcript messages for embedding and keyword search.

A chunk is a run of whole messages rendered one per line as ``role: text`` (``name: text`` when
the message has a speaker name), preceded by a ``[YYYY-MM-DD]`` line at its start and wherever
the date changes. ``count_tokens(chunk.text) + 2 <= max_tokens`` holds for every embedded chunk
(the 2 are the model's [CLS] and [SEP]). A message too long for one chunk is split at its text
lines, then words, then characters; every part keeps the message's JSONL line.

Chunks do not mix kinds (:data:`CHUNK_KINDS`): user and assistant messages run together as
above (``message``, the tool events between them do not break the run); a tool call
(``tool_call``) or a tool result (``tool_output``) is a chunk of its own, final at once, split
into parts when long, each part on the tool's JSONL line. Only ``message`` chunks stay open.
A chunk is embedded only when its kind is in ``embed_kinds``; of a tool call or output only
the first ``tool_head_chars`` characters are (the head says what the tool did), the rest goes to
the keyword channel alone in parts of about ``keyword_part_chars`` characters (cut without the
tokenizer: a 2 MB log must not cost a tokenizer pass per part).

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

from recalld.ingest.sessions.formats import Message

__all__ = [
    "CHUNK_KINDS", "SessionChunk", "SessionChunker", "carried", "checked_kinds", "chunk_kind",
    "chunk_messages", "to_carry",
]  # fmt: skip

#: Kinds of transcript chunks (memory notes are ``note``).
CHUNK_KINDS = ("message", "tool_call", "tool_output")
_TOOL_KINDS = {"tool_call": "tool_call", "tool_result": "tool_output"}
#: Size of a keyword-only part of a long tool call or output.
KEYWORD_PART_CHARS = 1200


def chunk_kind(message_kind: str) -> str:
    """The chunk kind of a :class:`Message` kind (text, thinking and meta are messages)."""
    return _TOOL_KINDS.get(message_kind, "message")


CountTokens = Callable[[str], int]
_SPECIALS = 2  # [CLS] and [SEP]
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_ROW = re.compile(r"\[\d{4}-\d{2}-\d{2}\]")
_LINES = re.compile(r"[^\n]*\n|[^\n]+")
_WORDS = re.compile(r"\S+\s*|\s+")
_LAST_BREAK = re.compile(r"[^\w.\-/](?=[\w.\-/]*\Z)")  # the last char no identifier holds


@dataclass(frozen=True, slots=True)
class SessionChunk:
    """A chunk of a transcript: JSONL lines ``start_line..end_line`` (inclusive) and its text."""

    start_line: int
    end_line: int
    text: str
    kind: str = "message"
    tool: str = ""
    embed: bool = True


@dataclass(slots=True)
class _Open:
    """The chunk being filled: rendered lines with the JSONL line each came from."""

    rows: list[tuple[int, str]] = field(default_factory=list)
    tokens: int = 0  # sum of the rows' counts; checked against the exact count on close
    date: str = ""
    carried: int = 0  # leading rows repeated from the previous chunk (conversation windows)


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
        embed_kinds: Iterable[str] = CHUNK_KINDS,
        tool_head_chars: int = 300,
        keyword_part_chars: int = KEYWORD_PART_CHARS,
        overlap: float = 0.0,
    ) -> None:
        if max_tokens < 16 + _SPECIALS:
            raise ValueError("max_tokens is too small to hold a message line")
        self.count = count_tokens
        self.limit = max_tokens - _SPECIALS
        self.target = min(target_tokens, self.limit)
        self.dates = dates
        self.embed_kinds = frozenset(embed_kinds)
        self.tool_head_chars = max(tool_head_chars, 0)
        self.part_chars = max(keyword_part_chars, 200)
        # Conversation windows: a closed chunk's last messages, up to this many tokens, open
        # the next one, so that a question and the reply after it share a chunk.
        self.carry_tokens = int(max(overlap, 0.0) * self.target)
        self._open = _Open()
        self._date_cost: dict[str, int] = {}

    # --- public API ---

    def feed(self, messages: Iterable[Message]) -> list[SessionChunk]:
        """Add messages; returns the chunks they completed, in order."""
        done: list[SessionChunk] = []
        for message in messages:
            kind = chunk_kind(message.kind)
            if kind != "message":  # a chunk of its own; the conversation's chunk stays open
                done.extend(self._tool_chunks(message, kind))
                continue
            for line, text, date, cost in self._units(message):
                self._add(line, text, date, cost, done)
        return done

    def pending(self) -> list[SessionChunk]:
        """The open last chunk ([] when there is none; two in the rare case :meth:`_fit` splits)."""
        o = self._open
        return self._fit(o.rows) if len(o.rows) > o.carried else []

    def save(self) -> dict[str, Any]:
        """The open chunk as a JSON-able dict, for :meth:`restore`."""
        o = self._open
        rows = [list(r) for r in o.rows]
        return {"rows": rows, "tokens": o.tokens, "date": o.date, "carried": o.carried}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`save` output (made with the same settings and counter)."""
        rows = [(int(line), str(text)) for line, text in state.get("rows", [])]
        self._open = _Open(
            rows,
            int(state.get("tokens", 0)),
            str(state.get("date", "")),
            int(state.get("carried", 0)),
        )

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
        room = self.limit - (self._date_line(date)[1] if date else 0)
        prefix = f"{message.name or message.role}: "
        return [(message.line, t, date, n) for t, n in self._parts(prefix, message.text, room)]

    def _parts(self, prefix: str, body: str, room: int) -> list[tuple[str, int]]:
        """``prefix + part`` texts of at most ``room`` tokens covering ``body``, with counts."""
        text = f"{prefix}{body}"
        cost = self.count(text)
        if cost <= room:
            return [(text, cost)]
        units: list[tuple[str, int]] = []
        budget = max(1, room - self.count(prefix))
        queue = deque(_split(body, budget, self.count))
        while queue:
            part = queue.popleft()
            cost = self.count(prefix + part)
            if cost > room and len(part) > 1:  # prefix and part did not add up exactly
                budget = max(1, budget - (cost - room))
                queue.extendleft(reversed(_split(part, budget, self.count)))
                continue
            units.append((prefix + part, cost))
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
        o, self._open = self._open, _Open()
        if len(o.rows) > o.carried:  # rows carried over alone are in the last chunk already
            done.extend(self._fit(o.rows))
            if self.carry_tokens:
                self._open = self._carry(o.rows)

    def _carry(self, rows: list[tuple[int, str]]) -> _Open:
        """The last whole messages of ``rows`` (under ``carry_tokens``, never all) as a new open
        chunk, behind the date line in effect for them."""
        start, used = len(rows), 0
        while start > 1:
            line = rows[start - 1][0]
            k = start - 1
            while k > 0 and rows[k - 1][0] == line:
                k -= 1  # the parts and the date line of one message go together
            cost = sum(self.count(text) for _, text in rows[k:start])
            if k == 0 or used + cost > self.carry_tokens:
                break
            start, used = k, used + cost
        tail = rows[start:]
        if start == len(rows):
            return _Open()
        dated = [t[1:-1] for _, t in rows if _DATE_ROW.fullmatch(t)]
        date = dated[-1] if dated else ""  # in effect at the end
        if not _DATE_ROW.fullmatch(tail[0][1]):
            before = [t for _, t in rows[:start] if _DATE_ROW.fullmatch(t)]
            if before:
                tail = [(tail[0][0], before[-1]), *tail]
        return _Open(tail, sum(self.count(t) for _, t in tail), date, len(tail))

    def _fit(self, rows: list[tuple[int, str]]) -> list[SessionChunk]:
        """The chunk of ``rows``, split in two if the exact count disagrees with the sum."""
        chunk = self._render(rows)
        if len(rows) == 1 or self.count(chunk.text) <= self.limit:
            return [chunk]  # one row always fits: _units made sure of it
        half = len(rows) // 2
        if half + 1 < len(rows) and _DATE_ROW.fullmatch(rows[half - 1][1]):
            half += 1  # keep a date line with the message it introduces
        return self._fit(rows[:half]) + self._fit(rows[half:])

    def _render(self, rows: list[tuple[int, str]]) -> SessionChunk:
        lines = [line for line, _ in rows]
        text = "\n".join(text for _, text in rows)
        return SessionChunk(min(lines), max(lines), text, embed="message" in self.embed_kinds)

    def _tool_chunks(self, message: Message, kind: str) -> list[SessionChunk]:
        """A tool call or output as chunks of its own: the embedded head, then keyword parts."""
        prefix = "tool: " if kind == "tool_output" else ""  # a call's text starts "tool: Name"
        embed = kind in self.embed_kinds and self.tool_head_chars > 0
        head, rest = _cut(message.text, self.tool_head_chars) if embed else ("", message.text)
        line, tool = message.line, message.tool
        out = [
            SessionChunk(line, line, part, kind, tool, True)
            for part, _ in (self._parts(prefix, head.strip(), self.limit) if head.strip() else [])
        ]
        while rest:
            part, rest = _cut(rest, self.part_chars)
            if part.strip():
                out.append(SessionChunk(line, line, prefix + part.strip(), kind, tool, False))
        return out


def _cut(text: str, size: int) -> tuple[str, str]:
    """``text`` cut after about ``size`` characters, at a line end or a space when one is near."""
    if len(text) <= size:
        return text, ""
    end = text.rfind("\n", size // 2, size)
    if end == -1:
        end = text.rfind(" ", size // 2, size)
    if end == -1:  # minified JSON, a base64 blob: at least do not cut an identifier in two
        match = _LAST_BREAK.search(text, size // 2, size)
        end = match.start() if match else -1
    end = size if end == -1 else end + 1
    return text[:end], text[end:]


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

    from recalld.ingest.line_pieces import char_runs, segment_cuts

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
    **options: Any,
) -> list[SessionChunk]:
    """Chunks of ``messages`` (see the module docstring); the last one may still grow.

    ``options``: the :class:`SessionChunker` keywords ``embed_kinds``, ``tool_head_chars``,
    ``keyword_part_chars``.
    """
    chunker = SessionChunker(
        count_tokens, max_tokens=max_tokens, target_tokens=target_tokens, dates=dates, **options
    )
    chunks = chunker.feed(messages) + chunker.pending()
    return sorted(chunks, key=lambda c: c.start_line)  # stable: the feed order within a line


def checked_kinds(kinds: Iterable[str]) -> list[str]:
    """``sessions.embed_kinds``, checked (ConfigError naming the unknown kind)."""
    from recalld.errors import ConfigError

    kinds = list(kinds)
    if bad := [k for k in kinds if k not in CHUNK_KINDS]:
        raise ConfigError(
            f"sessions.embed_kinds: unknown kind {bad[0]!r}; known: {', '.join(CHUNK_KINDS)}"
        )
    return kinds


def to_carry(chunks: Iterable[SessionChunk], open_start: int | None) -> list[list[Any]]:
    """Final message chunks on or after the open chunk's first line, JSON-able.

    Delta sync rewrites message chunks from that line on, so these are written again with it.
    """
    if open_start is None:
        return []
    return [
        [c.start_line, c.end_line, c.text, c.kind, c.tool, c.embed]
        for c in chunks
        if c.start_line >= open_start and c.kind == "message"
    ]


def carried(state: dict[str, Any]) -> list[SessionChunk]:
    """:func:`to_carry` output (kept under ``"carry"`` in ``state``) back as chunks."""
    return [
        SessionChunk(int(a), int(b), str(t), str(k), str(tool), bool(e))
        for a, b, t, k, tool, e in state.get("carry") or []
    ]
