"""One transcript delta into chunks: the state a sync resumes from, and the state it saves.

A transcript is indexed a delta at a time (:func:`recalld.ingest.sessions.read_delta`). The
parser and chunker resume from the JSON state saved with the file's tail, the delta's messages
become chunks, and the new state is what the next delta resumes from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from recalld.index.store import NewChunk
from recalld.ingest.sessions import Delta, SessionChunk, SessionChunker, TailState, TranscriptParser
from recalld.ingest.sessions.chunking import carried, to_carry
from recalld.ingest.sessions.session_facts import Ident, LineTimes, scan_ident

_COLUMNS = ("offset", "line_count", "messages", "last_line_hash", "inode", "size")


@dataclass
class Saved:
    """A transcript's state as the last delta left it (empty for a file never indexed)."""

    row: dict[str, Any] | None  # the session_state row
    extra: dict[str, Any]  # its JSON state: parser, chunker, carry, times, ident
    tail: TailState | None
    skipped: int
    long_lines: int

    @classmethod
    def load(cls, row: dict[str, Any] | None) -> Saved:
        """The state stored for a transcript (``row``: its session_state, or None)."""
        extra: dict[str, Any] = row["state"] if row else {}
        # The tail fields newer than the session_state columns ride in the JSON state.
        tail = TailState.from_dict({**row, **extra.get("tail", {})}) if row else None
        skipped = int(row["skipped"]) if row else 0
        return cls(row, extra, tail, skipped, int(extra.get("long_lines", 0)))

    def advance(self, step: Step) -> None:
        """Resume the next delta from what ``step`` saved (the skip counts run on)."""
        self.tail, self.extra, self.row = step.tail, step.state["state"], step.state


@dataclass
class Step:
    """One delta's chunks and the state row written with them."""

    chunks: list[NewChunk]
    tail: TailState
    state: dict[str, Any]
    ident: Ident
    messages: int
    dropped: int  # lines the parser left out (invalid, unknown, huge)


def chunk_delta(
    delta: Delta, saved: Saved, parser: TranscriptParser, chunker: SessionChunker, *, fresh: bool
) -> Step:
    """The delta's messages as chunks (the open last one rewritten) and the state to save."""
    messages = parser.feed(delta.lines)
    # The search filters' facts: each chunk's last message time, the project, session.
    times = LineTimes(None if fresh else saved.extra.get("times"))
    times.add(messages)
    known = ("", "") if fresh else tuple(saved.extra.get("ident") or ("", ""))
    ident = scan_ident(delta.lines, (str(known[0]), str(known[1])))
    final = chunker.feed(messages)
    pending = chunker.pending()
    # Final message chunks on the open chunk's first line are rewritten with it
    # (keep_from drops the messages from that line on): the state carries them till then.
    carry = [] if fresh else carried(saved.extra)
    written = carry + final + pending
    open_start = pending[0].start_line if pending else None
    chunks = [new_chunk(c, times.date_of(c.start_line, c.end_line, c.text)) for c in written]
    stats = parser.stats
    dropped = stats.skipped_invalid + stats.skipped_unknown + stats.skipped_huge
    saved.skipped += dropped + delta.skipped_lines
    saved.long_lines += delta.skipped_lines
    new_tail = replace(delta.state, messages=delta.state.messages + len(messages))
    state = state_row(new_tail, parser.fmt or "unknown", saved.skipped)
    state["state"] = {
        "format": parser.fmt,
        "chunker": chunker.save(),
        "open_start": open_start,
        "calls": parser.calls,
        "carry": to_carry(carry + final, open_start),
        "tail": tail_extra(new_tail),
        "long_lines": saved.long_lines,
        "times": times.saved(open_start or new_tail.line_count + 1),
        "ident": list(ident),
    }
    return Step(chunks, new_tail, state, ident, len(messages), dropped)


def state_row(tail: TailState, fmt: str, skipped: int) -> dict[str, Any]:
    """The session_state columns for ``tail`` (its newer fields go in the JSON state)."""
    row: dict[str, Any] = {k: getattr(tail, k) for k in _COLUMNS}
    row.update(format=fmt, skipped=skipped)
    return row


def tail_extra(tail: TailState) -> dict[str, Any]:
    """The TailState fields that have no column of their own."""
    return {k: v for k, v in tail.to_dict().items() if k not in _COLUMNS}


def new_chunk(c: SessionChunk, date: float | None = None) -> NewChunk:
    """The store row of a transcript chunk (``date``: its last message's time)."""
    return NewChunk(
        c.start_line, c.end_line, c.text, _hash(c.text), kind=c.kind, tool=c.tool, embed=c.embed,
        date=date,
    )  # fmt: skip


def _hash(text: str) -> str:
    from recalld.ingest.indexer import text_hash

    return text_hash(text)
