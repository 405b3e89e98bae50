"""A note's bytes into the rows the index keeps: decoded, redacted, chunked, with its facts.

Pure functions of the note (no store, no report, no log): the indexer calls them on its own
thread, and :mod:`recalld.ingest.chunk_pool`'s worker processes call the same ones, so a note
chunked on another core gives the same rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from recalld.index.ident_tokens import ident_text
from recalld.index.rows import NewChunk
from recalld.ingest.chunking import Chunk, chunk_markdown
from recalld.ingest.front_matter import FrontMatter, card_context, read_front_matter
from recalld.ingest.note_facts import date_of_note, tags_of_chunk
from recalld.ingest.sessions.redaction import redact_lines


@dataclass(frozen=True)
class ChunkSettings:
    """The indexer's chunking settings (what a worker process needs to chunk as it does)."""

    max_tokens: int
    target_tokens: int
    chat_overlap: float | None
    chat_chars: int
    additive: bool
    front_matter: bool


@dataclass(frozen=True)
class NoteText:
    """A note's text as indexed: ``valid`` False when undecodable bytes were replaced;
    ``redacted`` is the text before redaction when a secret was hidden (for the tally)."""

    text: str
    valid: bool
    redacted: str | None = None


@dataclass(frozen=True)
class NoteRows:
    """A note's chunk rows, its line count, and why its front matter was not read (if so)."""

    chunks: list[NewChunk]
    lines: int
    front_matter_error: str | None


def text_hash(text: str) -> str:
    """Hash of a chunk's text (the embedding cache key)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def note_text(data: bytes) -> NoteText:
    """Decode (undecodable bytes replaced), drop a BOM, redact secrets (line numbers kept).

    The redaction is not tallied here (``where`` "log"): the caller tallies ``redacted``, so a
    note redacted in a worker process still counts in this process's ``status``.
    """
    valid = True
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        valid, text = False, data.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    out = redact_lines(text, "log")[0]
    return NoteText(out, valid, text if out is not text and out != text else None)


def pieces_of(text: str, count_tokens: Callable[[str], int], s: ChunkSettings) -> list[Chunk]:
    """The note's chunks with these settings."""
    return chunk_markdown(
        text,
        count_tokens,
        max_tokens=s.max_tokens,
        target_tokens=s.target_tokens,
        chat_overlap=s.chat_overlap,
        chat_chars=s.chat_chars,
        additive=s.additive,
    )


def _title(pieces: Sequence[Chunk], path: Path) -> str:
    """The document's title: its first top-level heading, else the file name without suffix."""
    for piece in pieces:
        if piece.heading:
            return str(piece.heading).split(" > ")[0]
    return name_title(path)


def name_title(path: Path) -> str:
    """A note's title from its file name: the name without suffix, ``_`` and ``-`` as spaces."""
    return path.stem.replace("_", " ").replace("-", " ")


def line_count(text: str) -> int:
    """Lines of a note's text (a last line without a line break counts)."""
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def _context(title: str, heading: str) -> str:
    """Title plus heading path, without repeating the title."""
    if not heading:
        return title
    return heading if heading.split(" > ")[0] == title else f"{title} > {heading}"


def _contexts(pieces: Sequence[Chunk], title: str, fm: FrontMatter | None) -> list[str]:
    """Each chunk's context; the first chunk (the note's card) also holds its front matter."""
    out = [_context(title, c.heading) for c in pieces]
    if out and fm is not None and not fm.empty:
        out[0] = card_context(out[0], fm)
    return out


def note_rows(
    path: Path,
    text: str,
    pieces: Sequence[Chunk],
    mtime_ns: int,
    front_matter: bool,
    idents: bool = False,
) -> NoteRows:
    """The rows of a chunked note: contexts, hashes, its date and tags (the search filters');
    with ``idents`` their FTS5 ident tokens too (else the store derives them as it writes)."""
    fm = read_front_matter(text) if front_matter else None
    error = fm.error if fm is not None and fm.error else None
    title = (fm.title if fm else "") or _title(pieces, path)
    file_tags = (fm if front_matter else read_front_matter(text)) or FrontMatter()
    date = date_of_note(str(path), text, mtime_ns)
    chunks = [
        NewChunk(c.start_line, c.end_line, c.text, text_hash(c.text), context, date=date,
                 tags=tags_of_chunk(file_tags.tags, c.text),
                 ident=ident_text(c.text) if idents else None)
        for c, context in zip(pieces, _contexts(pieces, title, fm), strict=True)
    ]  # fmt: skip
    return NoteRows(chunks, line_count(text), error)
