"""An engine's writes: syncs of the memory folders and transcripts, and notes indexed at once.

All of them run on the writer's connection (the daemon calls them from its single writer
thread): the notes keyword-first, then the vectors they are due (``vector_backfill``), each
committed change told to ``on_change`` (the engine mirrors it in what it holds). What they leave
behind is kept in the engine's :class:`~recalld.ingest.sync_state.SyncState`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.errors import IndexError_
from recalld.index import index_files
from recalld.index.readers import ReaderPool
from recalld.index.status_facts import mount_roots
from recalld.index.store import FileChange, Store
from recalld.ingest import identity_check
from recalld.ingest.embed_ahead import EmbedAhead
from recalld.ingest.indexer import Indexer, SyncReport
from recalld.ingest.session_sync import SessionIndexer
from recalld.ingest.sync_report import Progress
from recalld.ingest.sync_state import SyncState

ChangeHook = Callable[[FileChange], None]


class IndexWrites:
    """The syncs of one engine's writer."""

    def __init__(
        self,
        state: SyncState,
        index_path: Path,
        config: Callable[[], Config],
        embedder: Callable[[], Embedder | None],
        on_change: ChangeHook,
        on_written: Callable[[], None],
    ) -> None:
        self.s = state
        self.index_path = index_path
        self.config = config  # the engine's current config (edits apply from the next sync)
        self.embedder = embedder
        self.on_change = on_change
        self.on_written = on_written  # counts and term statistics are stale now
        self._ahead: EmbedAhead | None = None
        self.rebuild: Callable[[], SyncReport] | None = None  # set by the engine

    def open(self, writable: bool, readers: ReaderPool) -> None:
        """At the engine's start: open the writer (a writable engine, rebuilds a crash left
        behind removed first) and compare the index with the settings (``needs_reindex``)."""
        if not writable:
            with readers.reader() as store:
                self.s.needs_reindex = identity_check.check_readonly(
                    store, self.config(), self.embedder()
                )
            return
        index_files.remove_stale_rebuilds(self.index_path)
        self.s.writer = Store(self.index_path)
        self.s.writer.ensure_vectors_epoch()
        self.check_identity()
        self.s.vector_backlog.refresh(self.s.writer)

    def check_identity(self) -> str | None:
        """Compare the index with the current settings (the writer's); why a rebuild is due."""
        reason = identity_check.check_writable(self.writer, self.config(), self.embedder())
        self.s.needs_reindex = reason
        return reason

    @property
    def writer(self) -> Store:
        if self.s.writer is None:
            raise IndexError_("this engine is read-only; run `recalld sync` to update the index")
        return self.s.writer

    def sync(self, paths_: Iterable[Path] | None = None) -> SyncReport:
        """Bring the index up to date (all files and transcripts, or the given dirty files)."""
        writer = self.writer
        if self.s.needs_reindex and self.rebuild is not None:
            return self.rebuild()
        self.s.state = "syncing"
        dirty = None if paths_ is None else list(paths_)
        try:
            if dirty is None:  # also while the daemon runs: a rebuilder alive at start may die
                index_files.remove_stale_rebuilds(self.index_path)
            index_files.check_free_space(self.index_path)
            indexer = self.indexer(writer, self.on_change)
            problems = self.root_problems(writer)
            indexer.unavailable_roots = problems  # their indexed files are kept, not removed
            report = indexer.sync(dirty)
            if dirty is None:
                self._sync_all_sessions(writer, indexer, report)
                self._remember_mounts(problems)
            filled = indexer.backfill_vectors(report)  # keyword first: vectors after the writes
            report.embed_error = indexer.embed_error  # a provider that is down: retried later
            backlog = self.s.vector_backlog
            if dirty == [] and report.vectors_pending and backlog.pending > filled:
                # The daemon's next back-fill step: nothing else written, so no recount.
                backlog.filled(filled, more=True)
            else:
                backlog.refresh(writer, more=report.vectors_pending)
            self.s.note_skipped(report, dirty)
            self.on_written()
            self.s.after_write(report)
            return report
        except Exception as exc:
            self.s.last_error = index_files.describe_write_error(exc, self.index_path)
            raise
        finally:
            self.s.state = "idle"

    def _sync_all_sessions(self, store: Store, indexer: Indexer, report: SyncReport) -> None:
        """Every transcript the globs match (also with no globs left: the indexed ones go)."""
        if not (self.config().session_globs() or _has_sessions(store)):
            return
        session_indexer = self.session_indexer(store, indexer, self.on_change)
        sessions = session_indexer.sync()
        report.skipped += [{"path": p, "reason": r} for p, r in session_indexer.skipped.items()]
        report.sessions = sessions.as_dict()
        self.s.last_session_sizes = sessions.indexed_sizes

    def index_now(self, paths_: Iterable[Path]) -> SyncReport:
        """Index these notes at once, whole and keyword-searchable when it returns (a note that
        recalld just wrote: chunked here, not in the background; the content hash decides)."""
        indexer = self.indexer(self.writer, self.on_change)
        indexer.background, indexer.trust_stat, indexer.job = None, False, None
        report = indexer.sync(list(paths_))
        self.s.last_sync = time.time()
        return report

    def sync_sessions(self, paths_: Iterable[Path] | None = None) -> dict[str, Any]:
        """Index new transcript lines (the given files, or every file the globs match)."""
        writer = self.writer
        if self.s.needs_reindex and self.rebuild is not None:
            return self.rebuild().as_dict()
        indexer = self.indexer(writer, self.on_change)
        session_indexer = self.session_indexer(writer, indexer, self.on_change)
        report = session_indexer.sync(paths_)
        step = SyncReport()
        indexer.backfill_vectors(step)
        self.s.vector_backlog.refresh(writer, more=step.vectors_pending)
        self.s.skipped.update(session_indexer.skipped)
        self.s.last_session_sizes = report.indexed_sizes
        self.s.last_sync = time.time()
        out = report.as_dict()
        out["vectors_pending"] = step.vectors_pending
        out["embed_error"] = indexer.embed_error
        out["indexed_sizes"] = report.indexed_sizes
        return out

    def indexer(self, store: Store, on_change: ChangeHook | None) -> Indexer:
        """An indexer of ``store`` with this engine's settings, provider and helpers."""
        from recalld.tokens import default_tokenizer

        indexer = Indexer(
            store,
            self.config(),
            self.embedder(),
            default_tokenizer().count,
            on_change=on_change,
            on_progress=self._progress,
        )
        indexer.background = self.s.background
        self.s.search_first.configure(self.config())  # an edit applies from the next step
        indexer.ahead = self._embed_ahead(indexer.embedder)
        indexer.backlog = self.s.vector_backlog if store is self.s.writer else None
        # A big first sync of the live index has a quick pass (a rebuild's new file, which
        # nobody searches until it is swapped in, has not): recalld.ingest.first_pass.
        indexer.quick_first_pass = self.s.background is not None and store is self.s.writer
        indexer.job = self.s.job
        return indexer

    def session_indexer(
        self, store: Store, indexer: Indexer, on_change: ChangeHook | None
    ) -> SessionIndexer:
        """The transcripts' indexer, writing through ``indexer``'s vectors."""
        from recalld.tokens import default_tokenizer

        return SessionIndexer(
            store,
            self.config(),
            partial(indexer.vectors_for, embed=not indexer.keyword_first),
            default_tokenizer().count,
            self.embedder(),
            on_change=on_change,
        )

    def root_problems(self, store: Store) -> dict[Path, str]:
        """Memory roots that cannot be read now (missing, unmounted, unreadable), with why."""
        return root_problems(self.config().memory_roots(), set(mount_roots(store)))

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.close()

    def _embed_ahead(self, embedder: Embedder | None) -> EmbedAhead | None:
        """The thread that embeds the due chunks for this embedder (the daemon's writer only;
        a new provider gets a new one, and the old one's unwritten vectors are dropped)."""
        wanted = embedder if self.s.keyword_first else None
        if self._ahead is not None and self._ahead.embedder is not wanted:
            self._ahead.close()
            self._ahead = None
        if self._ahead is None and wanted is not None:
            self._ahead = EmbedAhead(wanted, self.s.search_first)
        return self._ahead

    def _progress(self, progress: Progress) -> None:
        self.s.progress = progress
        if self.s.state == "syncing" and self.s.writer is not None:  # files land keyword-first
            self.s.vector_backlog.refresh_now_and_then(self.s.writer)
        if self.s.on_progress is not None:
            self.s.on_progress(progress)

    def _remember_mounts(self, problems: Mapping[Path, str]) -> None:
        """Record which roots are mount points, so that an unmounted one is recognised later."""
        writer = self.writer
        known = set(mount_roots(writer))
        now = set(known)
        for root in self.config().memory_roots():
            if root in problems:
                continue
            if os.path.ismount(root):
                now.add(str(root))
            else:
                now.discard(str(root))
        if now != known:
            writer.set_meta("mount_roots", json.dumps(sorted(now)))


def root_problems(roots: Iterable[Path], mounts: Collection[str]) -> dict[Path, str]:
    """Those of ``roots`` that cannot be read now, with why (``mounts``: were mount points)."""
    out: dict[Path, str] = {}
    for root in roots:
        problem = index_files.root_problem(root, str(root) in mounts)
        if problem:
            out[root] = problem
    return out


def _has_sessions(store: Store) -> bool:
    """Whether any transcript is indexed."""
    row = store.conn.execute("SELECT 1 FROM files WHERE source = 'sessions' LIMIT 1").fetchone()
    return row is not None
