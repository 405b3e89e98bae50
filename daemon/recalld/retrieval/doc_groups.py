"""One slot per short note (``search.group_short_docs``): a short document is shown once.

Several chunks of one abstract or small note can fill the top of the list (about a fifth of the
top-10 slots on the abstracts sets), which gives the reader half the documents it paid for. A
document is *short* when its file is at most ``SHORT_BYTES`` and it is a note: not a transcript
(its chunks are messages and tool calls) and not chat-shaped (a conversation's turns, see
:func:`~recalld.ingest.conversation_windows.speaker_turns`). The decision is read from the
document, never from a per-set switch. A short document's best candidate keeps its place; its
other candidates leave the list and become that candidate's ``also`` places, so every matching
range is still cited. Long documents, chats and transcripts keep chunk-level results: their
chunks are different passages (windows already group a chat's turns).
"""

from __future__ import annotations

from collections.abc import Sequence

from recalld.index.store import ChunkRow, Store
from recalld.ingest.conversation_windows import speaker_turns
from recalld.retrieval.diversity import Candidate

__all__ = ["SHORT_BYTES", "group", "is_short_note"]

#: Largest file (bytes) still grouped: an abstract or a small note, a few chunks at most.
SHORT_BYTES = 4000


def group(cands: Sequence[Candidate], store: Store) -> list[Candidate]:
    """``cands`` (best first) with each short note's later candidates moved into the ``also``
    of its first one; everything else keeps its order."""
    counts: dict[str, int] = {}
    for c in cands:
        counts[c.path] = counts.get(c.path, 0) + 1
    # Only a file with two candidates or more can be grouped: read nothing for the others.
    short = {path: is_short_note(store, path) for path, n in counts.items() if n > 1}
    first: dict[str, Candidate] = {}
    out: list[Candidate] = []
    for c in cands:
        lead = first.get(c.path)
        if lead is not None:
            lead.also.append(c.chunk_id)
            lead.also.extend(c.also)
            continue
        if short.get(c.path):
            first[c.path] = c
        out.append(c)
    return out


def is_short_note(store: Store, path: str) -> bool:
    """Whether the indexed file at ``path`` is a short note (see the module's rule)."""
    row = store.file(path)
    if row is None or row.size > SHORT_BYTES:
        return False
    chunks = store.file_chunks(path)
    if not chunks or any(c.kind != "note" for c in chunks):
        return False  # a transcript: messages and tool calls, not a note
    return speaker_turns(_lines(chunks)) is None


def _lines(chunks: Sequence[ChunkRow]) -> list[str]:
    """The document's lines as its chunks hold them (overlapping chunks give a line once)."""
    by_line: dict[int, str] = {}
    loose: list[str] = []
    for c in chunks:
        lines = c.text.split("\n")
        if len(lines) == c.end_line - c.start_line + 1:
            for i, line in enumerate(lines):
                by_line.setdefault(c.start_line + i, line)
        else:
            loose.extend(lines)  # a chunk whose text is not its lines verbatim
    return [by_line[n] for n in sorted(by_line)] + loose
