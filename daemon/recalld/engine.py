"""The engine: one index wired to its provider, readers, vector matrix, searches and writes.

Used in-process by the CLI and wrapped by the daemon. It holds no work of its own: each part
lives in the stage that owns it and the engine only wires them together:

- the provider: :class:`~recalld.embedding.active.ActiveProvider` (resolved once, remote ones
  behind a breaker);
- the index: pooled readers and the swap lock (:mod:`recalld.index.readers`), the in-memory
  vector matrix (:mod:`recalld.index.vector_holder`), cached row counts (``row_counts``);
- the writes: syncs and notes indexed at once (:mod:`recalld.ingest.index_writes`), rebuilds
  and fresh starts (:mod:`recalld.ingest.rebuilds`), what they leave behind
  (:class:`~recalld.ingest.sync_state.SyncState`, which the engine is built on);
- the answers: ``search`` and ``get`` (``engine.searcher``, :mod:`recalld.retrieval.searcher`),
  ``status`` (:mod:`recalld.retrieval.status_answer`).

All writes go through :meth:`Engine.sync`, :meth:`Engine.index_now` and :meth:`Engine.reindex`
(the daemon calls them from its single writer thread); searches and gets use pooled read-only
connections and never wait for a sync.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.config import Config
from recalld.embedding.active import ActiveProvider
from recalld.embedding.base import Embedder
from recalld.embedding.registry import ProviderChoice
from recalld.index.readers import ReaderPool
from recalld.index.row_counts import RowCounts
from recalld.index.store import FileChange, Store
from recalld.index.vector_holder import VectorHolder
from recalld.ingest.index_writes import IndexWrites
from recalld.ingest.indexer import SyncReport
from recalld.ingest.rebuilds import Rebuilds
from recalld.ingest.sync_state import SyncState
from recalld.retrieval import status_answer
from recalld.retrieval.channel_overlap import InFlight
from recalld.retrieval.common_terms import tune_reader
from recalld.retrieval.keyword_postings import PostingsCache
from recalld.retrieval.keyword_preload import Preloader
from recalld.retrieval.searcher import Searcher
from recalld.retrieval.term_stats import TermStats


class Engine(SyncState):
    """The search engine over one index file."""

    def __init__(
        self,
        config: Config,
        *,
        writable: bool = True,
        choice: ProviderChoice | None = None,
        index_path: Path | None = None,
        follows_writes: bool | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.index_path = index_path or paths.index_path(config.base_dir)
        self.writable = writable
        # Hears of every write (default: the writer's engine; a search helper is fed the
        # writer's changes, recalld.serve.search_helper): it may hold postings and counts.
        self.follows_writes = writable if follows_writes is None else follows_writes
        self.readers = ReaderPool(self.index_path, lambda store: tune_reader(store, self.config))
        self.swap = self.readers.swap
        self.provider = ActiveProvider(
            config, lambda: self.readers.stored_space(self.writer), choice
        )
        self.matrix = VectorHolder(self.index_path, self.readers.own_connection, writable)
        self.row_counts = RowCounts(self.readers.own_connection)
        self.term_stats = TermStats()  # document frequencies of query terms, until a write
        # A lone search overlaps its channels (channel_overlap); background embedding waits
        # while any is in flight (search_first).
        self.in_flight = InFlight(self.search_first)
        self.overlap_channels = True  # off in the search helper: it only serves a busy daemon
        # Postings of queried words (recalld.retrieval.keyword_postings): only an engine that
        # hears of every write keeps them fresh.
        budget = config.int("search.keyword_cache_mb") * 1024 * 1024
        self.postings = PostingsCache(budget) if self.follows_writes and budget > 0 else None
        # Told of every committed change and of every switch to another index or provider
        # (the daemon's search helper follows them).
        self.change_listener: Callable[[FileChange], None] | None = None
        self.epoch_listener: Callable[[], None] | None = None
        # The index's most common words read ahead, when the daemon is idle (keyword_preload).
        self.preloader = (
            Preloader(self.postings, self.readers.scan_reader) if self.postings else None
        )
        self.searcher = Searcher(self)
        # Late-bound hooks (a test may replace a method after construction).
        self.writes = IndexWrites(
            self, self.index_path, lambda: self.config, lambda: self.embedder,
            lambda change: self.apply_change(change), lambda: self._invalidate_counts(),
        )  # fmt: skip
        self.rebuilds = Rebuilds(
            self.writes, self.readers, self.matrix,
            lambda: self._new_epoch(), lambda: self._forget_postings(),
        )  # fmt: skip
        self.writes.rebuild = self.rebuilds.reindex
        self.writes.open(writable, self.readers)

    # provider -------------------------------------------------------------------------------

    @property
    def choice(self) -> ProviderChoice:
        """The active embedding provider (resolved once; no flip-flopping at run time)."""
        return self.provider.choice

    @property
    def embedder(self) -> Embedder | None:
        """The embedder, or None when search is keyword-only (remote ones behind a breaker)."""
        return self.provider.embedder

    def reconfigure(self, config: Config, *, reranker: bool) -> None:
        """Use an edited config from the next request on (``reranker``: its settings changed)."""
        self.config = config
        if reranker:
            self.searcher.drop_reranker()
        self._new_epoch()

    def check_config(self, *, provider_changed: bool) -> str | None:
        """After a config edit, on the writer thread: resolve the embedder again when its
        settings changed and compare the index with the new settings; why a rebuild is due."""
        if provider_changed:
            self._new_epoch()
            self.provider.reset(self.config)
            self.matrix.replace(None)  # reloaded for the new provider's vector size
        return self.writes.check_identity()

    def degraded(self) -> str | None:
        """Why vector search is off, or None."""
        return status_answer.degraded(self.needs_reindex, self.provider)

    # index ------------------------------------------------------------------------------------

    def reader(self) -> AbstractContextManager[Store]:
        """A pooled read-only connection (held under the swap lock's shared side)."""
        return self.readers.reader()

    def warm(self) -> None:
        """Load the model, the vector matrix and the keyword row lengths now, side by side."""
        self.searcher.warm()

    def apply_change(self, change: FileChange) -> None:
        """Mirror a committed change in what this engine holds (vectors, postings, counts)."""
        self._invalidate_counts()
        if self.postings is not None:
            self.postings.changed(change.removed + change.inserted)
        self.matrix.apply(change.removed, change.added, change.generation)
        listener = self.change_listener
        if listener is not None:
            listener(change)

    def _new_epoch(self) -> None:
        """Another index file, provider or config is about to be (or was just) put in place."""
        listener = self.epoch_listener
        if listener is not None:
            listener()

    def _forget_postings(self) -> None:
        """Another index file is live: the held postings are of the old one."""
        if self.postings is not None:
            self.postings.reset()

    def _invalidate_counts(self) -> None:
        self.term_stats.invalidate()
        self.row_counts.invalidate()

    # writes -------------------------------------------------------------------------------------

    def sync(self, paths_: Iterable[Path] | None = None) -> SyncReport:
        """Bring the index up to date (all files and transcripts, or the given dirty files)."""
        return self.writes.sync(paths_)

    def index_now(self, paths_: Iterable[Path]) -> SyncReport:
        """Index these notes at once, keyword-searchable when it returns."""
        return self.writes.index_now(paths_)

    def sync_sessions(self, paths_: Iterable[Path] | None = None) -> dict[str, Any]:
        """Index new transcript lines (the given files, or every file the globs match)."""
        return self.writes.sync_sessions(paths_)

    def reindex(self) -> SyncReport:
        """Full rebuild in a temporary database, then an atomic swap."""
        return self.rebuilds.reindex()

    def start_over(self, move_aside: Callable[[Path], Path]) -> Path:
        """Replace a damaged index with an empty one; the caller then syncs from the files."""
        return self.rebuilds.start_over(move_aside)

    # status -----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The ``status`` method."""
        postings = (
            {**self.postings.as_dict(), **self.preloader.as_dict()}
            if self.postings is not None and self.preloader is not None
            else None
        )
        with self.reader() as store:
            return status_answer.status(
                self, store, self.row_counts.get(), self.config, self.provider, self.index_path,
                {"vector_matrix": self.matrix.status(), "keyword_postings": postings},
            )  # fmt: skip

    def close(self) -> None:
        """Close every connection; the vector matrix is saved for the next start."""
        self.searcher.close()
        self.writes.close()
        if self.preloader is not None:
            self.preloader.stop()  # it reads through the pooled readers closed below
        self.provider.close()
        self.matrix.close()
        self.readers.close()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
