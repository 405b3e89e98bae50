"""Whole-index replacements: a full rebuild swapped in atomically, and a damaged index started over.

A rebuild fills a temporary database next to the live one while the old index keeps answering,
loads its vectors, seals it, and swaps it in under the exclusive side of the swap lock (the
stages are :mod:`recalld.index.rebuild`'s; their phases call
:func:`recalld.index.index_files.test_phase`, a no-op outside tests). Either way the engine is
told of the new epoch before and after (its search helper retires) and forgets what it held of
the old file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from recalld.errors import Unavailable
from recalld.index import index_files, rebuild
from recalld.index.readers import ReaderPool
from recalld.index.store import Store
from recalld.index.vector_holder import VectorHolder
from recalld.index.vector_index import VectorIndex
from recalld.ingest.identity_check import identity_for
from recalld.ingest.index_writes import IndexWrites
from recalld.ingest.indexer import SyncReport


class Rebuilds:
    """Full rebuilds and fresh starts of one engine's index."""

    def __init__(
        self,
        writes: IndexWrites,
        readers: ReaderPool,
        vectors: VectorHolder,
        new_epoch: Callable[[], None],
        forget_held: Callable[[], None],
    ) -> None:
        self.writes = writes
        self.s = writes.s
        self.readers = readers
        self.vectors = vectors
        self.new_epoch = new_epoch  # before and after a swap: the search helper retires
        self.forget_held = forget_held  # postings of the old file

    def reindex(self) -> SyncReport:
        """Full rebuild in a temporary database, then an atomic swap; the old index serves until."""
        live = self.writes.writer
        index_path = self.writes.index_path
        self.s.state = "reindexing"
        tmp = rebuild.temp_path(index_path)
        rebuild.discard(tmp)
        new: Store | None = None
        try:
            new = rebuild.start(index_path, tmp)
            wanted = identity_for(self.writes.config(), self.writes.embedder())
            new.set_identity(wanted)
            index_files.test_phase("rebuild-started")
            report = self._fill(new)
            index_files.test_phase("rebuild-indexed")
            vectors = (
                VectorIndex.load(
                    new, wanted.dims, folder=index_path.parent, files=self.vectors.files()
                )
                if wanted.provider_key
                else None
            )
            rebuild.seal(new)
            new = None
            self._swap_in(live, tmp, vectors)
            assert self.s.writer is not None
            self.s.vector_backlog.refresh(self.s.writer)
            self.s.note_skipped(report, None)
            self.writes.on_written()
            self.s.after_write(report)
            return report
        except Exception as exc:
            self.s.last_error = (
                f"reindex failed, the old index stays live: "
                f"{index_files.describe_write_error(exc, index_path)}"
            )
            raise
        finally:
            if new is not None:
                new.close()
            rebuild.discard(tmp)
            self.s.state = "idle"

    def _fill(self, new: Store) -> SyncReport:
        """Every memory file and transcript synced into the new database.

        ``needs_reindex`` is cleared while it runs and put back when it fails.
        """
        saved, self.s.needs_reindex = self.s.needs_reindex, None
        try:
            indexer = self.writes.indexer(new, None)
            indexer.job = None  # a rebuild counts every file afresh
            # Not keyword-first: the old index answers until the swap, so the new one is
            # swapped in with every vector it can get (status says if any are missing).
            indexer.ahead = None
            report = indexer.sync()
            if indexer.cut_short:  # never swap in an index with part of the files
                raise Unavailable("the daemon is stopping; the rebuild is not finished")
            if self.writes.config().session_globs():
                session_indexer = self.writes.session_indexer(new, indexer, None)
                sessions = session_indexer.sync()
                report.skipped += [
                    {"path": p, "reason": r} for p, r in session_indexer.skipped.items()
                ]
                report.sessions = sessions.as_dict()
                self.s.last_session_sizes = sessions.indexed_sizes
            indexer.backfill_vectors(report)
            report.embed_error = indexer.embed_error
        except BaseException:
            self.s.needs_reindex = saved
            raise
        return report

    def _swap_in(self, live: Store, tmp: Path, vectors: VectorIndex | None) -> None:
        """Under the exclusive swap lock: readers and the live writer closed, the new file
        renamed over the live one, the writer and the vectors renewed.

        When the rename fails, the writer reopens the old file (it stays live) and the error
        is raised.
        """
        index_path = self.writes.index_path
        self.new_epoch()
        with self.readers.swap.exclusive():
            index_files.test_phase("swap-locked")
            self.readers.close()
            rebuild.close_live(live, index_path)
            try:
                rebuild.replace(tmp, index_path)
            except OSError:
                self.s.writer = Store(index_path)  # the old index stays live
                raise
            index_files.test_phase("swap-replaced")
            self.s.writer = Store(index_path)
            self.forget_held()
            self.vectors.replace(vectors)
        self.new_epoch()

    def start_over(self, move_aside: Callable[[Path], Path]) -> Path:
        """Replace a damaged index with an empty one (``move_aside`` keeps the old file); the
        caller then syncs from the files. Searches wait for the swap, then see the new index."""
        writer = self.writes.writer
        index_path = self.writes.index_path
        self.new_epoch()
        with self.readers.swap.exclusive():
            self.readers.close()
            with contextlib.suppress(Exception):  # a damaged file may fail even to close
                writer.close()
            moved = move_aside(index_path)
            self.s.writer = Store(index_path)
            self.s.writer.set_identity(identity_for(self.writes.config(), self.writes.embedder()))
            self.vectors.replace(None)
            self.s.needs_reindex = None
            self.s.vector_backlog.refresh(self.s.writer)
            self.forget_held()
        self.writes.on_written()
        self.new_epoch()
        return moved
