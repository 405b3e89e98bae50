"""What a memory sync reports: its progress while it runs, and what it did."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld.index.store import FileRow, NewChunk
from recalld.ingest.chunk_pool import Raw
from recalld.ingest.note_rows import NoteRows
from recalld.ingest.path_rule import shown


@dataclass
class Progress:
    """Progress of one job, shown by ``status``, ``watch``, the CLI's bar and the daemon's log.

    A job may span several syncs: the daemon keeps one Progress while watcher batches follow one
    another (a copy of 2,000 notes arrives as dozens of batches, and a moved-in folder is walked
    once and then announced again file by file). Files are counted once per job: ``files_total``
    only grows, ``files_done`` never goes back, and a file met again adds to neither.
    """

    phase: str = "idle"
    files_total: int = 0
    files_done: int = 0
    files_changed: int = 0
    files_removed: int = 0
    chunks_done: int = 0
    chunks_embedded: int = 0
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None  # set by end(): rates and elapsed stop there, not at "now"
    syncs: int = 0  # syncs run for this job so far
    _seen: set[str] = field(default_factory=set, repr=False)
    _todo: set[str] = field(default_factory=set, repr=False)
    _changed: set[str] = field(default_factory=set, repr=False)
    # Held while a sync adds its files, and by a status read that counts waiting files against
    # ``counted`` and then adds them to ``files_total``: without it a file could be counted as
    # waiting and, a moment later, in the total too (a total over the real number of files).
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, keys: Iterable[str]) -> None:
        """Files (and removals) a sync is about to handle; those met before in this job are
        not counted again."""
        with self.lock:
            for key in keys:
                if key not in self._seen:
                    self._seen.add(key)
                    self._todo.add(key)
                    self.files_total += 1

    def finish(self, key: str) -> None:
        """One file handled (changed, unchanged, skipped or removed)."""
        if key in self._todo:
            self._todo.discard(key)
            self.files_done += 1

    def mark_changed(self, key: str) -> None:
        """``key`` was read and re-indexed; a file written twice during one job (a copy seen
        half-done, then whole) is one changed file, not two."""
        if key not in self._changed:
            self._changed.add(key)
            self.files_changed += 1

    def end(self) -> None:
        """The job is over: its rates stay those of the job (an idle daemon's status showed
        them falling for hours, as if measured since start-up)."""
        if self.ended is None:
            self.ended = time.monotonic()

    def release(self) -> None:
        """Forget the file names once the job is over (a full sync may list 100,000)."""
        self._seen, self._todo, self._changed = set(), set(), set()

    def counted(self, key: str) -> bool:
        """Whether ``key`` is already part of this job's total."""
        return key in self._seen

    def as_dict(self, waiting: int = 0) -> dict[str, Any]:
        """Wire form with rate and ETA; ``waiting`` files not yet handed to a sync (the
        watcher's dirty paths, queued batches) count in the total."""
        until = self.ended if self.ended is not None else time.monotonic()
        elapsed = max(until - self.started, 1e-6)
        rate = self.files_done / elapsed
        total = self.files_total + max(waiting, 0)
        left = max(total - self.files_done, 0)
        return {
            "phase": self.phase,
            "files_total": total,
            "files_done": self.files_done,
            "files_waiting": max(waiting, 0),
            "files_changed": self.files_changed,
            "files_removed": self.files_removed,
            "chunks_done": self.chunks_done,
            "chunks_embedded": self.chunks_embedded,
            "files_per_s": round(rate, 2),
            "chunks_per_s": round(self.chunks_done / elapsed, 2),
            "elapsed_s": round(elapsed, 3),
            "eta_s": round(left / rate, 1) if rate > 0 and left else 0.0,
            "syncs": self.syncs,
        }


@dataclass
class Prepared:
    """A changed file, read and chunked, waiting for its vectors."""

    row: FileRow
    chunks: list[NewChunk]


@dataclass
class SyncReport:
    """What a sync did."""

    files_seen: int = 0  # listed and admitted
    files_checked: int = 0  # each once: the outcomes below (changed .. deferred) add up to it
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
    # Files not read for want of a resource (no file descriptor left): a retry reads them.
    files_to_retry: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Wire form."""
        return dict(self.__dict__)


MAX_REPORTED_SKIPS = 100  # skipped files listed by name in a sync report
# The indexer's logger by name: skips logged from the stages split off it keep their source.
_indexer_log = logging.getLogger("recalld.ingest.indexer")


def skip_file(report: SyncReport, path: Path | str, reason: str) -> None:
    """Log a file the sync leaves out and count it (the first ones listed by name)."""
    name = shown(path)
    _indexer_log.warning("skipping %s: %s", name, reason)
    report.files_skipped += 1
    if len(report.skipped) < MAX_REPORTED_SKIPS:
        report.skipped.append({"path": name, "reason": reason})


def changed_file(report: SyncReport, progress: Progress, note: Raw, rows: NoteRows) -> Prepared:
    """A changed note's file row and chunks, counted; its front matter's problem reported."""
    if rows.front_matter_error:
        _indexer_log.warning(
            "%s: %s; indexed as plain text", shown(note.path), rows.front_matter_error
        )
        reason = f"{rows.front_matter_error}: names not read"
        report.skipped.append({"path": shown(note.path), "reason": reason})
    st = note.st
    row = FileRow(str(note.path), "memory", st.st_size, st.st_mtime_ns, note.digest, rows.lines)
    report.files_changed += 1
    progress.mark_changed(row.path)
    return Prepared(row, rows.chunks)
