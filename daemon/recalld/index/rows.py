"""The index's row types: a file, a chunk, one write, as the store reads and writes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: a chunking worker process needs these rows, not numpy
    import numpy as np
    import numpy.typing as npt


@dataclass(frozen=True)
class Identity:
    """What the vectors and chunks in an index were built with. Never mix two of these."""

    provider_key: str  # "" when the index has no vectors (keyword-only)
    label: str
    model: str
    dims: int
    chunking: str  # JSON of the chunking settings

    def same_space(self, other: Identity) -> bool:
        """Whether vectors of ``other`` can live in this index."""
        return (self.provider_key, self.model, self.dims) == (
            other.provider_key,
            other.model,
            other.dims,
        )


@dataclass(frozen=True)
class FileRow:
    """One indexed file."""

    path: str
    source: str
    size: int
    mtime_ns: int
    hash: str
    lines: int

    @property
    def provisional(self) -> bool:
        """Whether the file is held as one keyword row until it is chunked (a big first
        sync's quick pass, recalld.ingest.first_pass): no content hash, a modification time
        no file has, so the next sync reads it again whatever its stat says."""
        return (self.source, self.hash, self.mtime_ns) == PROVISIONAL


#: A provisional file row's source, content hash and modification time (FileRow.provisional).
PROVISIONAL = ("memory", "", -1)


@dataclass(frozen=True)
class NewChunk:
    """A chunk about to be written."""

    start_line: int
    end_line: int
    text: str
    hash: str
    context: str = ""  # document title / heading path, indexed as a second FTS column
    kind: str = "note"  # note | message | tool_call | tool_output
    tool: str = ""  # tool chunks: the tool's name
    embed: bool = True  # False: keyword channel only, by policy (never backfilled)
    date: float | None = None  # content date, seconds since the epoch (chunk_facts)
    tags: tuple[str, ...] = ()  # lower-case, for the search filters (chunk_facts)
    # ident_text(text) when a chunking worker derived it already; None: the store derives it
    ident: str | None = None


@dataclass(frozen=True)
class ChunkRow:
    """A stored chunk."""

    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    context: str = ""  # document title > heading path
    kind: str = "note"
    tool: str = ""
    embed: bool = True


@dataclass(frozen=True)
class FileChange:
    """What one write did to the chunk ids (for the in-memory vector index)."""

    removed: list[int]
    added: list[tuple[int, npt.NDArray[np.float32]]]
    generation: int | None = None  # the vectors' generation after this write (None: unknown)
    inserted: list[int] = field(default_factory=list)  # every chunk id written, vector or not
    kept: int = 0  # chunks left as they were (unchanged), of those that take a vector
