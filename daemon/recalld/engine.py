"""The engine: one index, its writer, read-only readers, the vector matrix and the provider.

Used in-process by the CLI and wrapped by the daemon. All writes go through :meth:`Engine.sync`
and :meth:`Engine.reindex` (the daemon calls them from its single writer thread); searches and
gets use pooled read-only connections and never wait for a sync. A full rebuild happens in a
temporary database next to the live one and is swapped in with ``os.replace``; its stages are
:mod:`recalld.index.rebuild`'s, whose phases call :func:`recalld.index.index_files.test_phase`
(a no-op outside tests).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any

from recalld import __version__, paths
from recalld.config import Config
from recalld.embedding.base import Embedder, provider_key
from recalld.embedding.provider_guard import PROBE_DEADLINE_S, ProviderGuard
from recalld.embedding.registry import ProviderChoice, resolve_embedder
from recalld.errors import BadRequest, IndexError_, NotFound, RecalldError
from recalld.index import index_files, rebuild, tombstones
from recalld.index.rwlock import ReadWriteLock
from recalld.index.status_facts import mount_roots, status_facts
from recalld.index.store import FileChange, Identity, Store, prefix_bounds
from recalld.index.vector_files import VectorFiles
from recalld.index.vector_index import VectorIndex
from recalld.ingest.chunking import Chunk
from recalld.ingest.embed_ahead import EmbedAhead
from recalld.ingest.filters import PathFilter
from recalld.ingest.forgotten import forgotten_stone
from recalld.ingest.indexer import Indexer, Progress, SyncReport, identity_for
from recalld.ingest.path_rule import shown
from recalld.ingest.session_sync import SessionIndexer
from recalld.ingest.vector_backfill import BackgroundChunker, VectorBacklog
from recalld.retrieval import access, keyword_scoring
from recalld.retrieval.channel_overlap import InFlight
from recalld.retrieval.common_terms import tune_reader
from recalld.retrieval.keyword_postings import PostingsCache
from recalld.retrieval.keyword_preload import Preloader
from recalld.retrieval.search import SearchContext, parse_request, run_search
from recalld.retrieval.term_stats import TermStats

log = logging.getLogger(__name__)

ProgressHook = Callable[[Progress], None]

MAX_SKIPPED_SHOWN = 100  # files listed by name in status["skipped_files"]


SwapLock = ReadWriteLock  # many searches at once, or one index swap


class Engine:
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
        self.config = config
        self.index_path = index_path or paths.index_path(config.base_dir)
        self.writable = writable
        # Hears of every write (default: the writer's engine; a search helper is fed the
        # writer's changes, recalld.serve.search_helper): it may hold postings and counts.
        self.follows_writes = writable if follows_writes is None else follows_writes
        self._choice = choice
        self._choice_lock = threading.Lock()
        self.swap = SwapLock()
        # Idle pooled readers, the most recently used last: taken last-in first-out, so one
        # connection does the work of a lone client, its page cache and its map of the index
        # warm. First-in first-out had every search on the next connection: each one filled its
        # own page cache and mapped the same pages again (RSS counts a page once per mapping).
        self._readers: list[Store] = []
        self._all_readers: list[Store] = []
        self._readers_lock = threading.Lock()
        self._vectors: VectorIndex | None = None
        self._vectors_lock = threading.Lock()
        self.vectors_load_s: float | None = None
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recalld-channel")
        self.writer: Store | None = None
        self.progress = Progress()
        self.job: Progress | None = None  # the daemon's job spanning several syncs, if any
        self.state = "idle"
        self.last_sync: float | None = None
        self.last_report: SyncReport | None = None
        self.last_error: str | None = None
        self.needs_reindex: str | None = None
        self.on_progress: ProgressHook | None = None
        self.last_session_sizes: dict[str, int] = {}
        self._counts: dict[str, int] | None = None
        self._counts_lock = threading.Lock()
        self._counts_generation = 0  # bumped by every write: a count begun before is not kept
        self._guard: ProviderGuard | None = None
        self.skipped: dict[str, str] = {}  # files the last syncs could not index, with why
        # Set by the daemon: big notes chunked off the writer, files written keyword-first and
        # their vectors embedded ahead of the writer on a thread of their own (embed_ahead).
        self.background: BackgroundChunker[list[Chunk]] | None = None
        self.keyword_first = False
        self._ahead: EmbedAhead | None = None
        self.vector_backlog = VectorBacklog()  # chunks still waiting for a vector
        self.term_stats = TermStats()  # document frequencies of query terms, until a write
        self.in_flight = InFlight()  # a lone search overlaps its channels (channel_overlap)
        self.overlap_channels = True  # off in the search helper: it only serves a busy daemon
        # Postings of queried words (recalld.retrieval.keyword_postings): only an engine that
        # hears of every write keeps them fresh.
        budget = self.config.int("search.keyword_cache_mb") * 1024 * 1024
        self.postings = PostingsCache(budget) if self.follows_writes and budget > 0 else None
        # Told of every committed change and of every switch to another index or provider
        # (the daemon's search helper follows them).
        self.change_listener: Callable[[FileChange], None] | None = None
        self.epoch_listener: Callable[[], None] | None = None
        # The index's most common words read ahead, when the daemon is idle (keyword_preload).
        self.preloader = Preloader(self.postings, self.scan_reader) if self.postings else None
        if writable:
            index_files.remove_stale_rebuilds(self.index_path)
            self.writer = Store(self.index_path)
            self.writer.ensure_vectors_epoch()
            self._check_identity()
            self.vector_backlog.refresh(self.writer)
        else:
            with self.reader() as store:
                self._check_identity_readonly(store)

    # provider ---------------------------------------------------------------------------------

    @property
    def choice(self) -> ProviderChoice:
        """The active embedding provider (resolved once; no flip-flopping at run time)."""
        with self._choice_lock:
            if self._choice is None:
                choice = resolve_embedder(self.config)
                warm = getattr(choice.embedder, "warm", None)
                if warm is not None:
                    try:
                        warm()
                    except RecalldError as exc:
                        choice = ProviderChoice(
                            None, f"the embedding model failed to load ({exc}); keyword-only"
                        )
                if choice.embedder is not None and choice.embedder.kind != "local":
                    choice = self._settle_dims(choice)
                self._choice = choice
            return self._choice

    def _settle_dims(self, choice: ProviderChoice) -> ProviderChoice:
        """Learn a remote model's vector size without letting a provider that is down stop the
        daemon: from the index when it was built with this model, else one bounded probe."""
        emb = choice.embedder
        assert emb is not None
        if getattr(emb, "_dims", 1):
            return choice  # configured, or a model of known size: nothing to ask
        stored = self._stored_identity()
        base_url = str(getattr(emb, "base_url", ""))
        if stored is not None and stored.provider_key == provider_key(
            emb.kind, base_url, emb.model, stored.dims
        ):
            emb.dims = stored.dims  # the index's vector space; answers are checked against it
            return choice
        probe = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recalld-dims")
        try:
            probe.submit(lambda: emb.dims).result(timeout=PROBE_DEADLINE_S)
        except (RecalldError, FutureTimeout) as exc:
            why = str(exc) or f"no answer within {PROBE_DEADLINE_S:g} s"
            log.warning("%s did not tell its vector size: %s", emb.label, why)
            return ProviderChoice(
                None,
                f"{emb.label} did not answer to tell its vector size ({why}); search is "
                "keyword-only until recalld restarts (or set embedding.dims)",
            )
        finally:
            probe.shutdown(wait=False)
        return choice

    def _stored_identity(self) -> Identity | None:
        if self.writer is not None:
            return self.writer.identity()
        try:
            with self.reader() as store:
                return store.identity()
        except RecalldError:
            return None

    @property
    def embedder(self) -> Embedder | None:
        """The embedder, or None when search is keyword-only (remote ones behind a breaker)."""
        emb = self.choice.embedder
        if emb is None or emb.kind == "local":
            return emb
        with self._choice_lock:
            if self._guard is None or self._guard.inner is not emb:
                deadline = 2 * self.config.float("embedding.timeout_s")
                self._guard = ProviderGuard(emb, index_deadline_s=deadline)
            return self._guard

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
            with self._choice_lock:
                guard, self._choice, self._guard = self._guard, None, None
            if guard is not None:
                guard.close()
            with self._vectors_lock:
                self._vectors = None  # reloaded for the new provider's vector size
        self.needs_reindex = None  # an edit undone before its rebuild ran needs none
        self._check_identity()
        return self.needs_reindex

    def _check_identity(self) -> None:
        assert self.writer is not None
        stored = self.writer.identity()
        wanted = identity_for(self.config, self.embedder)
        if stored is None:
            self.writer.set_identity(wanted)
            return
        if stored.chunking != wanted.chunking:
            self.needs_reindex = "the chunking settings changed"
        elif wanted.provider_key and stored.provider_key and not stored.same_space(wanted):
            self.needs_reindex = f"the provider changed from {stored.label} to {wanted.label}"
        elif wanted.provider_key and not stored.provider_key:
            # A keyword-only index gains vectors: same chunks, so a backfill is enough.
            self.writer.set_identity(wanted)

    def _check_identity_readonly(self, store: Store) -> None:
        stored = store.identity()
        if stored is None or not stored.provider_key:
            return
        wanted = identity_for(self.config, self.embedder)
        if wanted.provider_key and not stored.same_space(wanted):
            self.needs_reindex = f"the index was built with {stored.label}, not {wanted.label}"

    def degraded(self, *, provider: bool = True) -> str | None:
        """Why vector search is off, or None (``provider=False``: leave out a provider outage)."""
        if self.embedder is None:
            return self.choice.reason
        if self.needs_reindex:
            return f"{self.needs_reindex}; keyword-only until `recalld reindex` completes"
        if provider and self._guard is not None:
            return self._guard.unavailable_reason()
        return None

    def root_problems(self, store: Store) -> dict[Path, str]:
        """Memory roots that cannot be read now (missing, unmounted, unreadable), with why."""
        return _root_problems(self.config.memory_roots(), set(mount_roots(store)))

    def _remember_mounts(self, problems: Mapping[Path, str]) -> None:
        """Record which roots are mount points, so that an unmounted one is recognised later."""
        assert self.writer is not None
        known = set(mount_roots(self.writer))
        now = set(known)
        for root in self.config.memory_roots():
            if root in problems:
                continue
            if os.path.ismount(root):
                now.add(str(root))
            else:
                now.discard(str(root))
        if now != known:
            self.writer.set_meta("mount_roots", json.dumps(sorted(now)))

    # readers ----------------------------------------------------------------------------------

    @contextmanager
    def reader(self) -> Iterator[Store]:
        """A pooled read-only connection (held under the swap lock's shared side)."""
        with self.swap.shared():
            with self._readers_lock:
                store = self._readers.pop() if self._readers else None
            if store is None:
                store = Store(self.index_path, readonly=True)
                tune_reader(store, self.config)
                with self._readers_lock:
                    self._all_readers.append(store)
            try:
                yield store
            finally:
                with self._readers_lock:
                    self._readers.append(store)

    @contextmanager
    def scan_reader(self) -> Iterator[Store]:
        """A read-only connection of its own for one bulk read (closed after, not pooled),
        under the swap lock's shared side."""
        with self.swap.shared(), self._own_connection() as store:
            yield store

    @contextmanager
    def _own_connection(self) -> Iterator[Store]:
        """A read-only connection for one bulk read, closed after; the caller holds the swap
        lock (a reader, or :meth:`scan_reader`).

        Start-up's loads, counting rows and the keyword read-ahead read much of the file once.
        Through a pooled reader's map of the index those pages would stay in the daemon's RSS
        for its lifetime (and the kernel maps the cached pages around each one touched): 68 MB
        of a 72 MB index, per such reader. Plain reads leave them to the page cache, shared and
        reclaimable.
        """
        store = Store(self.index_path, readonly=True)
        try:
            yield store
        finally:
            store.close()

    def _close_readers(self) -> None:
        with self._readers_lock:
            for store in self._all_readers:
                store.close()
            self._all_readers.clear()
            self._readers.clear()

    def vectors(self) -> VectorIndex | None:
        """The in-memory vector matrix, loaded on first use (the caller holds the swap lock:
        a reader, or :meth:`scan_reader`)."""
        emb = self.embedder
        if emb is None or self.needs_reindex:
            return None
        with self._vectors_lock:
            if self._vectors is None:
                started = time.perf_counter()
                with self._own_connection() as store:
                    self._vectors = VectorIndex.load(
                        store, emb.dims, folder=self.index_path.parent, files=self._vector_files()
                    )
                self.vectors_load_s = round(time.perf_counter() - started, 3)
                log.info(
                    "loaded %d vectors in %.2f s (from the %s, rows in a %s)",
                    len(self._vectors),
                    self.vectors_load_s,
                    self._vectors.loaded_from,
                    self._vectors.storage,
                )
            return self._vectors

    def vector_count(self) -> int:
        """Vectors in the loaded matrix (0 before it is loaded)."""
        with self._vectors_lock:
            return len(self._vectors) if self._vectors is not None else 0

    def _vector_files(self) -> VectorFiles | None:
        """The saved matrix beside the index (the writer's engine only: it sees every change)."""
        return VectorFiles(self.index_path) if self.writable else None

    def warm(self) -> None:
        """Load the embedding model, the vector matrix and the keyword channel's row lengths now
        rather than on the first search.

        Side by side: the model load is CPU, the matrix load mostly I/O and copies (1M vectors:
        seconds each), the lengths one aggregate query (1M rows: ~1 s); the first search needs
        all three.
        """
        failed: list[BaseException] = []

        def load(what: Callable[[], object]) -> None:
            try:
                with self.swap.shared():
                    what()
            except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
                failed.append(exc)

        def row_lengths() -> None:
            if self.postings is not None:  # the keyword channel's (1M rows: ~1 s)
                with self._own_connection() as store:
                    self.postings.warm(store.conn)

        loaders = [
            threading.Thread(target=load, args=(what,), name=name, daemon=True)
            for what, name in (
                (self.vectors, "recalld-vectors-load"),
                (row_lengths, "recalld-lengths"),
            )
        ]
        for loader in loaders:
            loader.start()
        try:
            if self.embedder is not None:
                self.embedder.embed(["warm up"], query=True)
        finally:
            for loader in loaders:
                loader.join()
        if failed:
            raise failed[0]

    def apply_change(self, change: FileChange) -> None:
        """Mirror a committed change in what this engine holds (vectors, postings, counts)."""
        self._invalidate_counts()
        if self.postings is not None:
            self.postings.changed(change.removed + change.inserted)
        with self._vectors_lock:
            if self._vectors is not None:
                self._vectors.apply(change.removed, change.added, change.generation)
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
                request = _absolute_prefix(request, self.config.memory_roots())
            wants_vectors = request.mode != "keyword"
            embedder = self.embedder if wants_vectors else None
            # A provider that is down is skipped at once (keyword-only, `degraded` says why);
            # when its cooldown is over this search probes it (a failure degrades it then).
            probing = self._guard is None or self._guard.available()
            if not probing:
                embedder = None
            vectors = self.vectors() if embedder is not None else None
            ctx = SearchContext(
                store=store,
                config=self.config,
                embedder=embedder,
                vectors=vectors,
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

    _reranker: Any = None
    _reranker_loaded = False

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
        raw = params.get("path")
        if not isinstance(raw, str):
            raise BadRequest("get needs a 'path' string")
        access.check_path_text(raw)  # length, NUL: before anything parses or stats it
        from_line = params.get("from_line", params.get("from", 1))
        lines = params.get("lines")
        if from_line == 1 and not access.exists(raw):
            raw, from_line, lines = _split_citation(raw, lines)
        from recalld.ingest.filters import make_filter

        decoded = params.get("decoded", False)
        if not isinstance(decoded, bool):
            raise BadRequest(f"decoded must be true or false, got {decoded!r}")
        memory_filter = make_filter(self.config.list("memory.extensions"))
        for _ in range(2):  # a path swapped for a link between check and open is checked again
            with suppress(access.PathChanged):
                return self._get_once(raw, from_line, lines, memory_filter, decoded)
        return self._get_once(raw, from_line, lines, memory_filter, decoded)

    def _get_once(
        self, raw: str, from_line: Any, lines: Any, memory_filter: PathFilter, decoded: bool
    ) -> dict[str, Any]:
        with self.reader() as store:
            target = access.resolve(
                raw,
                self.config.memory_roots(),
                self.config.session_globs(),
                memory_filter,
                lambda p: row.source if (row := store.file(p)) is not None else None,
            )
            row = store.file(str(target.path))
            if forgotten_stone(store, self.config, raw, target.path) is not None:
                raise NotFound(f"{target.path} is forgotten (`recalld forget --list`)")
        if row is None and not access.exists(target.path):
            raise NotFound(f"{target.path} is not indexed and does not exist")
        redact = None
        if target.source == "sessions":  # indexed or not yet: transcripts are served redacted
            from recalld.ingest.sessions.decoded import decode_line
            from recalld.ingest.sessions.redaction import redact_line

            redact = decode_line if decoded else redact_line
        return access.read_lines(target.path, from_line, lines, redact=redact)

    # writes -----------------------------------------------------------------------------------

    def _indexer(self, store: Store, on_change: Callable[[FileChange], None] | None) -> Indexer:
        from recalld.tokens import default_tokenizer

        indexer = Indexer(
            store,
            self.config,
            self.embedder,
            default_tokenizer().count,
            on_change=on_change,
            on_progress=self._progress,
        )
        indexer.background, indexer.ahead = self.background, self._embed_ahead(indexer.embedder)
        indexer.backlog = self.vector_backlog if store is self.writer else None
        indexer.job = self.job
        return indexer

    def _embed_ahead(self, embedder: Embedder | None) -> EmbedAhead | None:
        """The thread that embeds the due chunks for this embedder (the daemon's writer only;
        a new provider gets a new one, and the old one's unwritten vectors are dropped)."""
        wanted = embedder if self.keyword_first else None
        if self._ahead is not None and self._ahead.embedder is not wanted:
            self._ahead.close()
            self._ahead = None
        if self._ahead is None and wanted is not None:
            self._ahead = EmbedAhead(wanted)
        return self._ahead

    def _progress(self, progress: Progress) -> None:
        self.progress = progress
        if self.state == "syncing" and self.writer is not None:  # files land keyword-first
            self.vector_backlog.refresh_now_and_then(self.writer)
        if self.on_progress is not None:
            self.on_progress(progress)

    def _session_indexer(
        self, store: Store, indexer: Indexer, on_change: Callable[[FileChange], None] | None
    ) -> SessionIndexer:
        from recalld.tokens import default_tokenizer

        return SessionIndexer(
            store,
            self.config,
            partial(indexer.vectors_for, embed=not indexer.keyword_first),
            default_tokenizer().count,
            self.embedder,
            on_change=on_change,
        )

    def sync(self, paths_: Iterable[Path] | None = None) -> SyncReport:
        """Bring the index up to date (all files and transcripts, or the given dirty files)."""
        if self.writer is None:
            raise IndexError_("this engine is read-only; run `recalld sync` to update the index")
        if self.needs_reindex:
            return self.reindex()
        self.state = "syncing"
        dirty = None if paths_ is None else list(paths_)
        try:
            index_files.check_free_space(self.index_path)
            indexer = self._indexer(self.writer, self.apply_change)
            problems = self.root_problems(self.writer)
            indexer.unavailable_roots = problems  # their indexed files are kept, not removed
            report = indexer.sync(dirty)
            # Also with no globs left: transcripts of globs removed from the config then go.
            if dirty is None and (self.config.session_globs() or _has_sessions(self.writer)):
                session_indexer = self._session_indexer(self.writer, indexer, self.apply_change)
                sessions = session_indexer.sync()
                report.skipped += [
                    {"path": p, "reason": r} for p, r in session_indexer.skipped.items()
                ]
                report.sessions = sessions.as_dict()
                self.last_session_sizes = sessions.indexed_sizes
            if dirty is None:
                self._remember_mounts(problems)
            filled = indexer.backfill_vectors(report)  # keyword first: vectors after the writes
            report.embed_error = indexer.embed_error  # a provider that is down: retried later
            backlog = self.vector_backlog
            if dirty == [] and report.vectors_pending and backlog.pending > filled:
                # The daemon's next back-fill step: nothing else written, so no recount.
                backlog.filled(filled, more=True)
            else:
                backlog.refresh(self.writer, more=report.vectors_pending)
            self._note_skipped(report, dirty)
            self._after_write(report)
            return report
        except Exception as exc:
            self.last_error = index_files.describe_write_error(exc, self.index_path)
            raise
        finally:
            self.state = "idle"

    def _note_skipped(self, report: SyncReport, dirty: list[Path] | None) -> None:
        """Keep the list of files that could not be indexed (a full sync renews it)."""
        if dirty is None:
            self.skipped = {}
        else:
            for path in dirty:
                self.skipped.pop(shown(path), None)  # the name as reported
        for item in report.skipped:
            self.skipped[item["path"]] = item["reason"]

    def index_now(self, paths_: Iterable[Path]) -> SyncReport:
        """Index these notes at once, whole and keyword-searchable when it returns (a note that
        recalld just wrote: chunked here, not in the background; the content hash decides)."""
        if self.writer is None:
            raise IndexError_("this engine is read-only")
        indexer = self._indexer(self.writer, self.apply_change)
        indexer.background, indexer.trust_stat, indexer.job = None, False, None
        report = indexer.sync(list(paths_))
        self.last_sync = time.time()
        return report

    def sync_sessions(self, paths_: Iterable[Path] | None = None) -> dict[str, Any]:
        """Index new transcript lines (the given files, or every file the globs match)."""
        if self.writer is None:
            raise IndexError_("this engine is read-only")
        if self.needs_reindex:
            return self.reindex().as_dict()
        indexer = self._indexer(self.writer, self.apply_change)
        session_indexer = self._session_indexer(self.writer, indexer, self.apply_change)
        report = session_indexer.sync(paths_)
        step = SyncReport()
        indexer.backfill_vectors(step)
        self.vector_backlog.refresh(self.writer, more=step.vectors_pending)
        self.skipped.update(session_indexer.skipped)
        self.last_session_sizes = report.indexed_sizes
        self.last_sync = time.time()
        out = report.as_dict()
        out["vectors_pending"] = step.vectors_pending
        out["embed_error"] = indexer.embed_error
        out["indexed_sizes"] = report.indexed_sizes
        return out

    def start_over(self, move_aside: Callable[[Path], Path]) -> Path:
        """Replace a damaged index with an empty one (``move_aside`` keeps the old file); the
        caller then syncs from the files. Searches wait for the swap, then see the new index."""
        if self.writer is None:
            raise IndexError_("this engine is read-only")
        self._new_epoch()
        with self.swap.exclusive():
            self._close_readers()
            with contextlib.suppress(Exception):  # a damaged file may fail even to close
                self.writer.close()
            moved = move_aside(self.index_path)
            self.writer = Store(self.index_path)
            self.writer.set_identity(identity_for(self.config, self.embedder))
            with self._vectors_lock:
                self._vectors = None
            self.needs_reindex = None
            self.vector_backlog.refresh(self.writer)
            self._forget_postings()
        self._invalidate_counts()
        self._new_epoch()
        return moved

    def _after_write(self, report: SyncReport) -> None:
        self._invalidate_counts()
        self.last_report = report
        self.last_sync = time.time()
        self.last_error = report.embed_error

    def reindex(self) -> SyncReport:
        """Full rebuild in a temporary database, then an atomic swap; the old index serves until.

        The stages are :mod:`recalld.index.rebuild`'s: start a new database with the embedding
        cache, fill it (:meth:`_fill_rebuild`), load its vectors, seal it, swap it in
        (:meth:`_swap_in`).
        """
        if self.writer is None:
            raise IndexError_("this engine is read-only")
        self.state = "reindexing"
        tmp = rebuild.temp_path(self.index_path)
        rebuild.discard(tmp)
        new: Store | None = None
        try:
            new = rebuild.start(self.index_path, tmp)
            wanted = identity_for(self.config, self.embedder)
            new.set_identity(wanted)
            index_files.test_phase("rebuild-started")
            report = self._fill_rebuild(new)
            index_files.test_phase("rebuild-indexed")
            vectors = (
                VectorIndex.load(
                    new, wanted.dims, folder=self.index_path.parent, files=self._vector_files()
                )
                if wanted.provider_key
                else None
            )
            rebuild.seal(new)
            new = None
            self._swap_in(self.writer, tmp, vectors)
            self.vector_backlog.refresh(self.writer)
            self._note_skipped(report, None)
            self._after_write(report)
            return report
        except Exception as exc:
            self.last_error = (
                f"reindex failed, the old index stays live: "
                f"{index_files.describe_write_error(exc, self.index_path)}"
            )
            raise
        finally:
            if new is not None:
                new.close()
            rebuild.discard(tmp)
            self.state = "idle"

    def _fill_rebuild(self, new: Store) -> SyncReport:
        """A rebuild's fill: every memory file and transcript synced into the new database.

        ``needs_reindex`` is cleared while it runs and put back when it fails.
        """
        saved, self.needs_reindex = self.needs_reindex, None
        try:
            indexer = self._indexer(new, None)
            indexer.job = None  # a rebuild counts every file afresh
            # Not keyword-first: the old index answers until the swap, so the new one is
            # swapped in with every vector it can get (status says if any are missing).
            indexer.ahead = None
            report = indexer.sync()
            if self.config.session_globs():
                session_indexer = self._session_indexer(new, indexer, None)
                sessions = session_indexer.sync()
                report.skipped += [
                    {"path": p, "reason": r} for p, r in session_indexer.skipped.items()
                ]
                report.sessions = sessions.as_dict()
                self.last_session_sizes = sessions.indexed_sizes
            indexer.backfill_vectors(report)
            report.embed_error = indexer.embed_error
        except BaseException:
            self.needs_reindex = saved
            raise
        return report

    def _swap_in(self, live: Store, tmp: Path, vectors: VectorIndex | None) -> None:
        """A rebuild's swap, under the exclusive swap lock: readers and the live writer closed,
        the new file renamed over the live one, the writer and the vectors renewed.

        When the rename fails, the writer reopens the old file (it stays live) and the error
        is raised.
        """
        self._new_epoch()
        with self.swap.exclusive():
            index_files.test_phase("swap-locked")
            self._close_readers()
            rebuild.close_live(live, self.index_path)
            try:
                rebuild.replace(tmp, self.index_path)
            except OSError:
                self.writer = Store(self.index_path)  # the old index stays live
                raise
            index_files.test_phase("swap-replaced")
            self.writer = Store(self.index_path)
            self._forget_postings()
            with self._vectors_lock:
                self._vectors = vectors
        self._new_epoch()

    # status -----------------------------------------------------------------------------------

    def counts(self, store: Store) -> dict[str, int]:
        """Row counts, cached until the next write (counting FTS and vec0 rows scans them).

        ``store``: the caller's reader; the swap lock it holds keeps the file being counted.
        """
        with self._counts_lock:
            if self._counts is not None:
                return dict(self._counts)
            generation = self._counts_generation
        # Counting FTS5 and vec0 rows reads most of the file: not through ``store``'s map.
        with self._own_connection() as counter:
            counts = counter.counts()  # outside the lock; a write meanwhile makes it stale:
        with self._counts_lock:
            if generation == self._counts_generation:  # ... then it is returned, not kept
                self._counts = counts
        return dict(counts)

    def _held_counts(self, store: Store) -> Callable[[str], int | None] | None:
        """Document frequencies read off the held postings (recalld.retrieval.keyword_scoring)."""
        return keyword_scoring.held_count(store.conn, self.postings) if self.postings else None

    def _forget_postings(self) -> None:
        """Another index file is live: the held postings are of the old one."""
        if self.postings is not None:
            self.postings.reset()

    def _invalidate_counts(self) -> None:
        self.term_stats.invalidate()
        with self._counts_lock:
            self._counts = None
            self._counts_generation += 1

    def index_info(self) -> dict[str, Any]:
        """The ``index`` block of search results."""
        return {
            "state": self.state,
            "pending": max(self.progress.files_total - self.progress.files_done, 0)
            if self.state != "idle"
            else 0,
            "last_sync": self.last_sync,
        }

    def status(self) -> dict[str, Any]:
        """The ``status`` method."""
        roots = self.config.memory_roots()  # resolved once: a path walk per root
        with self.reader() as store:
            counts = self.counts(store)
            facts = status_facts(store)
            # A daemon knows its last sync; a CLI's engine reads it (a scan of ``files``).
            last_sync = self.last_sync or store.last_indexed()
            forgotten = len(tombstones.all_of(store.conn))
            missing_roots = [
                {"path": str(root), "reason": why, "files_kept": _files_under(store, root)}
                for root, why in _root_problems(roots, facts.mount_roots).items()
            ]
        skipped = sorted(self.skipped.items())
        from recalld.ingest.sessions.redaction import counts as redaction_counts

        return {
            "version": __version__,
            "state": self.state,
            "provider": self.embedder.label if self.embedder else "none",
            "provider_reason": self.choice.reason,
            "degraded": self.degraded(),
            "identity": _identity_dict(facts.identity),
            "counts": counts,
            "progress": {**self.progress.as_dict(), **self.vector_backlog.as_dict()},
            "vectors": self.vector_backlog.as_dict(),
            "last_sync": last_sync,
            "transcripts": dict(facts.transcripts),
            "last_report": self.last_report.as_dict() if self.last_report else None,
            "last_error": self.last_error,
            "index_path": str(self.index_path),
            "memory_roots": [str(r) for r in roots],
            "session_globs": self.config.session_globs(),
            "config_path": str(self.config.source) if self.config.source else None,
            "provider_health": self._guard.state() if self._guard else {"state": "ok"},
            "missing_roots": missing_roots,
            "skipped_files": [{"path": p, "reason": r} for p, r in skipped[:MAX_SKIPPED_SHOWN]],
            "skipped_total": len(skipped),
            "redactions": redaction_counts(),  # since this process started: indexed, served
            "forgotten": forgotten,  # tombstones (`recalld forget --list`)
            "vector_matrix": self._matrix_status(),
            "keyword_postings": self._postings_status(),
        }

    def _postings_status(self) -> dict[str, int | bool] | None:
        """The keyword channel's held postings: words, bytes, failures, reading ahead."""
        if self.postings is None or self.preloader is None:
            return None
        return {**self.postings.as_dict(), **self.preloader.as_dict()}

    def _matrix_status(self) -> dict[str, Any] | None:
        """The in-memory vector matrix: rows, where they live, how long the load took."""
        vectors = self._vectors
        if vectors is None:
            return None
        return {
            "rows": len(vectors),
            "storage": vectors.storage,
            "loaded_from": vectors.loaded_from,
            "load_s": self.vectors_load_s,
        }

    def close(self) -> None:
        """Close every connection."""
        self._executor.shutdown(wait=False)
        if self._ahead is not None:
            self._ahead.close()
        if self.preloader is not None:
            self.preloader.stop()  # it reads through the pooled readers closed below
        if self._guard is not None:
            self._guard.close()
        with self._vectors_lock:
            if self._vectors is not None:
                self._vectors.close(save=True)  # the next start maps it instead of reading vec0
                self._vectors = None
        self._close_readers()
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _identity_dict(identity: Identity | None) -> dict[str, Any] | None:
    if identity is None:
        return None
    return {
        "provider": identity.label,
        "provider_key": identity.provider_key,
        "model": identity.model,
        "dims": identity.dims,
        "chunking": identity.chunking,
    }


def _absolute_prefix(request: Any, roots: list[Path]) -> Any:
    """A relative ``path_prefix`` is taken relative to the first memory root."""
    from dataclasses import replace

    prefix = request.path_prefix
    if prefix and not os.path.isabs(os.path.expanduser(prefix)) and roots:
        prefix = str(roots[0] / prefix) + (os.sep if prefix.endswith(("/", os.sep)) else "")
    elif prefix:
        prefix = os.path.expanduser(prefix)
    return replace(request, path_prefix=prefix)


def _split_citation(raw: str, lines: Any) -> tuple[str, int, Any]:
    """Any citation form (``PATH#L3-L9``, ``PATH:3-9``...) → (PATH, FROM, count).

    An explicit ``lines`` wins over the citation's range."""
    from recalld_client.citation import parse_citation

    try:
        cited = parse_citation(raw)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if cited is None:
        return raw, 1, lines
    return cited.path, cited.first, lines if lines is not None else cited.lines


def _root_problems(roots: Iterable[Path], mounts: Collection[str]) -> dict[Path, str]:
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


def _files_under(store: Store, root: Path) -> int:
    """Indexed files under a folder."""
    lo, hi = prefix_bounds(str(root) + os.sep)
    row = store.conn.execute(
        "SELECT count(*) FROM files WHERE path >= ? AND path < ?", (lo, hi)
    ).fetchone()
    return int(row[0]) if row else 0
