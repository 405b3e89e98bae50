"""What a memory sync reports: its progress while it runs, and what it did."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from recalld.store import FileRow, NewChunk


@dataclass
class Progress:
    """Progress of one sync, shown by ``status``, ``watch`` and the CLI's bar."""

    phase: str = "idle"
    files_total: int = 0
    files_done: int = 0
    files_changed: int = 0
    files_removed: int = 0
    chunks_done: int = 0
    chunks_embedded: int = 0
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        """Wire form with rate and ETA."""
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.files_done / elapsed
        left = max(self.files_total - self.files_done, 0)
        return {
            "phase": self.phase,
            "files_total": self.files_total,
            "files_done": self.files_done,
            "files_changed": self.files_changed,
            "files_removed": self.files_removed,
            "chunks_done": self.chunks_done,
            "chunks_embedded": self.chunks_embedded,
            "files_per_s": round(rate, 2),
            "chunks_per_s": round(self.chunks_done / elapsed, 2),
            "elapsed_s": round(elapsed, 3),
            "eta_s": round(left / rate, 1) if rate > 0 and left else 0.0,
        }


@dataclass
class Prepared:
    """A changed file, read and chunked, waiting for its vectors."""

    row: FileRow
    chunks: list[NewChunk]


@dataclass
class SyncReport:
    """What a sync did."""

    files_seen: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    files_skipped: int = 0
    files_kept: int = 0  # gone from a listing but kept: root missing/unmounted, folder unreadable
    chunks_written: int = 0
    chunks_embedded: int = 0
    embed_error: str | None = None
    seconds: float = 0.0
    sessions: dict[str, Any] | None = None
    skipped: list[dict[str, str]] = field(default_factory=list)  # {path, reason}, capped
    files_deferred: int = 0  # big notes handed to the background chunker
    vectors_pending: bool = False  # chunks still wait for vectors (the next step back-fills)

    def as_dict(self) -> dict[str, Any]:
        """Wire form."""
        return dict(self.__dict__)
