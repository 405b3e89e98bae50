"""What an engine's writes leave behind: the writer, the job in progress, the last results.

Kept as one dataclass that the engine is built on, so that the writes
(:mod:`recalld.ingest.index_writes`) and the answers (``status``, a search's ``index`` block)
read and set the same fields without either holding the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld.embedding.search_first import SearchFirst
from recalld.index.store import Store
from recalld.ingest import skipped_files
from recalld.ingest.chunking import Chunk
from recalld.ingest.path_rule import shown
from recalld.ingest.sync_report import Progress, SyncReport
from recalld.ingest.vector_backfill import BackgroundChunker, VectorBacklog

ProgressHook = Callable[[Progress], None]


@dataclass(eq=False)
class SyncState:
    """The writer's connection and the state of its syncs."""

    writer: Store | None = None
    state: str = "idle"  # idle | syncing | reindexing
    progress: Progress = field(default_factory=Progress)
    job: Progress | None = None  # the daemon's job spanning several syncs, if any
    last_sync: float | None = None
    last_report: SyncReport | None = None
    last_error: str | None = None
    needs_reindex: str | None = None  # why the index must be rebuilt, if it must
    on_progress: ProgressHook | None = None
    last_session_sizes: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # files not indexed, with why
    # Set by the daemon: big notes chunked off the writer, files written keyword-first and
    # their vectors embedded ahead of the writer on a thread of their own (embed_ahead).
    background: BackgroundChunker[list[Chunk]] | None = None
    keyword_first: bool = False
    vector_backlog: VectorBacklog = field(default_factory=VectorBacklog)
    # Searches enter it, background embedding waits on it (recalld.embedding.search_first).
    search_first: SearchFirst = field(default_factory=SearchFirst)

    def note_skipped(self, report: SyncReport, dirty: list[Path] | None) -> None:
        """Keep the list of files that could not be indexed (a full sync renews it)."""
        if dirty is None:
            self.skipped = {}
        else:
            for path in dirty:
                self.skipped.pop(shown(path), None)  # the name as reported
        for item in report.skipped:
            self.skipped[item["path"]] = item["reason"]
        if self.writer is not None:
            skipped_files.save(self.writer, self.skipped)

    def after_write(self, report: SyncReport) -> None:
        """A sync or rebuild finished: its report, time and any provider error are kept."""
        self.last_report = report
        self.last_sync = time.time()
        self.last_error = report.embed_error

    def index_info(self) -> dict[str, Any]:
        """The ``index`` block of search results."""
        pending = max(self.progress.files_total - self.progress.files_done, 0)
        return {
            "state": self.state,
            "pending": pending if self.state != "idle" else 0,
            "last_sync": self.last_sync,
        }
