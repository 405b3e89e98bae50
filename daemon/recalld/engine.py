"""The engine: one index wired to its provider, readers, vector matrix and writes.

Used in-process by the CLI and wrapped by the daemon. It holds no work of its own: each part
lives in the stage that owns it and the engine only wires them together:

- the provider: :class:`~recalld.embedding.active.ActiveProvider` (resolved once, remote ones
  behind a breaker);
- the index: pooled readers and the swap lock (:mod:`recalld.index.readers`), the in-memory
  vector matrix (:mod:`recalld.index.vector_holder`), cached row counts (``row_counts``);
- the writes: syncs and notes indexed at once (:mod:`recalld.ingest.index_writes`), rebuilds
  and fresh starts (:mod:`recalld.ingest.rebuilds`), what they leave behind
  (:class:`~recalld.ingest.sync_state.SyncState`, which the engine is built on);
- the answers: search (:mod:`recalld.retrieval.search`), get (``retrieval.get_lines``).

All writes go through :meth:`Engine.sync`, :meth:`Engine.index_now` and :meth:`Engine.reindex`
(the daemon calls them from its single writer thread); searches and gets use pooled read-only
connections and never wait for a sync.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.config import Config
from recalld.embedding.active import ActiveProvider
from recalld.embedding.base import Embedder
from recalld.embedding.registry import ProviderChoice
from recalld.errors import RecalldError
from recalld.index import index_files
from recalld.index.readers import ReaderPool, load_side_by_side
from recalld.index.row_counts import RowCounts
from recalld.index.store import FileChange, Store
from recalld.index.vector_holder import VectorHolder
from recalld.index.vector_index import VectorIndex
from recalld.ingest import identity_check
from recalld.ingest.index_writes import IndexWrites
from recalld.ingest.indexer import SyncReport
from recalld.ingest.rebuilds import Rebuilds
from recalld.ingest.sync_state import SyncState
from recalld.retrieval import access, get_lines, keyword_scoring, status_answer
from recalld.retrieval.channel_overlap import InFlight
from recalld.retrieval.common_terms import tune_reader
from recalld.retrieval.keyword_postings import PostingsCache
from recalld.retrieval.keyword_preload import Preloader
from recalld.retrieval.search import run_search
from recalld.retrieval.search_request import SearchContext, absolute_prefix, parse_request
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
        self.provider = ActiveProvider(config, self._stored_space, choice)
        self.readers = ReaderPool(self.index_path, lambda store: tune_reader(store, self.config))
        self.swap = self.readers.swap
        self.matrix = VectorHolder(self.index_path, self.readers.own_connection, writable)
        self.row_counts = RowCounts(self.readers.own_connection)
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recalld-channel")
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
        self.preloader = Preloader(self.postings, self.scan_reader) if self.postings else None
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
        self._reranker: Any = None
        self._reranker_loaded = False
        if writable:
            index_files.remove_stale_rebuilds(self.index_path)
            self.writer = Store(self.index_path)
            self.writer.ensure_vectors_epoch()
            self.needs_reindex = identity_check.check_writable(self.writer, config, self.embedder)
            self.vector_backlog.refresh(self.writer)
        else:
            with self.reader() as store:
                self.needs_reindex = identity_check.check_readonly(store, config, self.embedder)

    # provider -------------------------------------------------------------------------------

    @property
    def choice(self) -> ProviderChoice:
        """The active embedding provider (resolved once; no flip-flopping at run time)."""
        return self.provider.choice

    @property
    def embedder(self) -> Embedder | None:
        """The embedder, or None when search is keyword-only (remote ones behind a breaker)."""
        return self.provider.embedder

    def _stored_space(self) -> tuple[str, int] | None:
        try:
            if self.writer is not None:
                identity = self.writer.identity()
            else:
                with self.reader() as store:
                    identity = store.identity()
        except RecalldError:
            return None
        return None if identity is None else (identity.provider_key, identity.dims)

    def reconfigure(self, config: Config, *, reranker: bool) -> None:
        """Use an edited config from the next request on (``reranker``: its settings changed)."""
        self.config = config
        if reranker:
            self._reranker, self._reranker_loaded = None, False
        self._new_epoch()

    def check_config(self, *, provider_changed: bool) -> str | None:
        """After a config edit, on the writer thread: resolve the embedder again when its
        settings changed and compare the index with the new settings; why a rebuild is due."""
        if provider_changed:
            self._new_epoch()
            self.provider.reset(self.config)
            self.matrix.replace(None)  # reloaded for the new provider's vector size
        assert self.writer is not None
        self.needs_reindex = identity_check.check_writable(self.writer, self.config, self.embedder)
        return self.needs_reindex

    def degraded(self, *, provider: bool = True) -> str | None:
        """Why vector search is off, or None (``provider=False``: leave out a provider outage)."""
        if provider or self.embedder is None or self.needs_reindex:
            return status_answer.degraded(self, self.provider)
        return None

    def root_problems(self, store: Store) -> dict[Path, str]:
        """Memory roots that cannot be read now (missing, unmounted, unreadable), with why."""
        return self.writes.root_problems(store)

    # index ------------------------------------------------------------------------------------

    def reader(self) -> AbstractContextManager[Store]:
        """A pooled read-only connection (held under the swap lock's shared side)."""
        return self.readers.reader()

    def scan_reader(self) -> AbstractContextManager[Store]:
        """A read-only connection of its own for one bulk read, under the swap lock."""
        return self.readers.scan_reader()

    def vectors(self) -> VectorIndex | None:
        """The in-memory vector matrix, loaded on first use (the caller holds the swap lock)."""
        emb = self.embedder
        if emb is None or self.needs_reindex:
            return None
        return self.matrix.get(emb.dims)

    def vector_count(self) -> int:
        """Vectors in the loaded matrix (0 before it is loaded)."""
        return self.matrix.count()

    @property
    def vectors_load_s(self) -> float | None:
        return self.matrix.load_s

    def warm(self) -> None:
        """Load the model, the vector matrix and the keyword row lengths now, side by side,
        rather than on the first search (1M vectors: seconds each)."""

        def row_lengths() -> None:
            if self.postings is not None:  # the keyword channel's (1M rows: ~1 s)
                with self.readers.own_connection() as store:
                    self.postings.warm(store.conn)

        emb = self.embedder
        load_side_by_side(
            self.swap,
            [(self.vectors, "recalld-vectors-load"), (row_lengths, "recalld-lengths")],
            (lambda: emb.embed(["warm up"], query=True)) if emb is not None else None,
        )

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

    # search / get -----------------------------------------------------------------------------

    def search(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The ``search`` method."""
        request = parse_request(params, self.config)
        with self.in_flight.search() as alone, self.reader() as store:
            if request.path_prefix:
                request = absolute_prefix(request, self.config.memory_roots())
            wants_vectors = request.mode != "keyword"
            # A provider that is down is skipped at once (keyword-only, `degraded` says why);
            # when its cooldown is over this search probes it (a failure degrades it then).
            probing = self.provider.available()
            embedder = self.embedder if wants_vectors and probing else None
            ctx = SearchContext(
                store=store,
                config=self.config,
                embedder=embedder,
                vectors=self.vectors() if embedder is not None else None,
                degraded=self.degraded(provider=not probing) if wants_vectors else None,
                # Side by side only when alone: a busy daemon runs more searches instead.
                executor=self._executor if alone and self.overlap_channels else None,
                postings=self.postings,
                reranker=self.reranker(),
                index_info=self.index_info,
                # Only an engine that hears of every write keeps counts; another process's
                # engine (a one-shot CLI search) counts afresh rather than keep stale ones.
                counts=self.term_stats.on(store.conn, self._held_counts(store))
                if self.follows_writes
                else None,
            )
            if not self.vector_backlog.known:  # read-only engines count once
                self.vector_backlog.refresh(store)
            result = run_search(request, ctx)
        # Keyword first: chunks still waiting for a vector are found by keyword only until then
        # (0 for a keyword-only search: it misses nothing).
        result["vectors_pending"] = self.vector_backlog.pending if wants_vectors else 0
        return result

    def reranker(self) -> Any:
        """The configured reranker, or None (off by default)."""
        if not self._reranker_loaded:
            self._reranker_loaded = True
            if self.config.str("rerank.provider") not in ("", "none"):
                try:
                    from recalld.retrieval.rerank import resolve_reranker

                    self._reranker = resolve_reranker(self.config)
                except Exception as exc:  # noqa: BLE001 - search works without a reranker
                    self.last_error = f"reranker unavailable: {exc}"
        return self._reranker

    def roots(self) -> list[Path]:
        """Folders ``get`` may read from."""
        return access.allowed_roots(self.config.memory_roots(), self.config.session_globs())

    def get(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The ``get`` method: lines of an indexed file."""
        return get_lines.get(params, self.config, self.reader)

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

    def counts(self, store: Store) -> dict[str, int]:
        """Row counts, cached until the next write (``store``: the caller's reader)."""
        return self.row_counts.get()

    def _held_counts(self, store: Store) -> Callable[[str], int | None] | None:
        """Document frequencies read off the held postings (recalld.retrieval.keyword_scoring)."""
        return keyword_scoring.held_count(store.conn, self.postings) if self.postings else None

    def _forget_postings(self) -> None:
        """Another index file is live: the held postings are of the old one."""
        if self.postings is not None:
            self.postings.reset()

    def _invalidate_counts(self) -> None:
        self.term_stats.invalidate()
        self.row_counts.invalidate()

    def status(self) -> dict[str, Any]:
        """The ``status`` method."""
        postings = (
            {**self.postings.as_dict(), **self.preloader.as_dict()}
            if self.postings is not None and self.preloader is not None
            else None
        )
        with self.reader() as store:
            return status_answer.status(
                self, store, self.counts(store), self.config, self.provider, self.index_path,
                {"vector_matrix": self.matrix.status(), "keyword_postings": postings},
            )  # fmt: skip

    def close(self) -> None:
        """Close every connection; the vector matrix is saved for the next start."""
        self._executor.shutdown(wait=False)
        self.writes.close()
        if self.preloader is not None:
            self.preloader.stop()  # it reads through the pooled readers closed below
        self.provider.close()
        self.matrix.close()
        self.readers.close()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
