"""An index's searches and gets: the ``search`` and ``get`` methods over one index's readers.

The :class:`Searcher` holds what only searches use (the thread pool that runs both channels side
by side, the reranker once loaded) and reads everything else off the index it searches, a
:class:`SearchedIndex` (the engine is one), at each call: a config edited meanwhile, the held
postings, the vector matrix and the provider all take effect from the next search.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from recalld.config import Config
from recalld.embedding.active import ActiveProvider
from recalld.index.readers import ReaderPool, load_side_by_side
from recalld.index.store import Store
from recalld.index.vector_holder import VectorHolder
from recalld.index.vector_index import VectorIndex
from recalld.ingest.vector_backfill import VectorBacklog
from recalld.retrieval import get_lines, keyword_scoring, status_answer
from recalld.retrieval.answer_budget import refit
from recalld.retrieval.channel_overlap import InFlight
from recalld.retrieval.keyword_postings import PostingsCache
from recalld.retrieval.search import run_search
from recalld.retrieval.search_request import (
    SearchContext,
    absolute_prefix,
    full_session,
    parse_request,
)
from recalld.retrieval.term_stats import TermStats


class SearchedIndex(Protocol):
    """What a :class:`Searcher` reads off the index it searches (the engine's parts)."""

    config: Config
    provider: ActiveProvider
    readers: ReaderPool
    matrix: VectorHolder
    postings: PostingsCache | None
    term_stats: TermStats
    in_flight: InFlight
    overlap_channels: bool
    follows_writes: bool
    needs_reindex: str | None
    last_error: str | None
    vector_backlog: VectorBacklog

    def index_info(self) -> dict[str, Any]: ...


class Searcher:
    """The ``search`` and ``get`` methods of one index."""

    def __init__(self, index: SearchedIndex) -> None:
        self.index = index
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recalld-channel")
        # A lone keyword search reads FTS5's phrases here while it sums the words.
        self._phrases = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recalld-phrases")
        self._reranker: Any = None
        self._reranker_loaded = False

    def search(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The ``search`` method."""
        ix = self.index
        request = parse_request(params, ix.config)
        with ix.in_flight.search() as alone, ix.readers.reader() as store:
            if request.path_prefix:
                request = absolute_prefix(request, ix.config.memory_roots())
            request = full_session(request, store.conn)
            wants_vectors = request.mode != "keyword"
            # A provider that is down is skipped at once (keyword-only, `degraded` says why);
            # when its cooldown is over this search probes it (a failure degrades it then).
            probing = ix.provider.available()
            embedder = ix.provider.embedder if wants_vectors and probing else None
            ctx = SearchContext(
                store=store,
                config=ix.config,
                embedder=embedder,
                vectors=self.vectors() if embedder is not None else None,
                degraded=status_answer.degraded(ix.needs_reindex, ix.provider, outage=not probing)
                if wants_vectors
                else None,
                # Side by side only when alone: a busy daemon runs more searches instead.
                executor=self._executor if alone and ix.overlap_channels else None,
                # A keyword search's phrases on the free core beside its word sums; a hybrid
                # one's vector channel has it (measured at 1M: no gain there).
                beside=self._phrases.submit
                if alone and ix.overlap_channels and embedder is None
                else None,
                postings=ix.postings,
                reranker=self.reranker(),
                index_info=ix.index_info,
                # Only an engine that hears of every write keeps counts; another process's
                # engine (a one-shot CLI search) counts afresh rather than keep stale ones.
                counts=ix.term_stats.on(store.conn, self.held_counts(store))
                if ix.follows_writes
                else None,
            )
            if not ix.vector_backlog.known:  # read-only engines count once
                ix.vector_backlog.refresh(store)
            result = run_search(request, ctx)
        # Keyword first: chunks still waiting for a vector are found by keyword only until then
        # (0 for a keyword-only search: it misses nothing).
        result["vectors_pending"] = ix.vector_backlog.pending if wants_vectors else 0
        return refit(result)  # the budget holds what the caller receives, this count included

    def get(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The ``get`` method: lines of an indexed file."""
        return get_lines.get(params, self.index.config, self.index.readers.reader)

    def vectors(self) -> VectorIndex | None:
        """The in-memory vector matrix, loaded on first use (the caller holds the swap lock)."""
        emb = self.index.provider.embedder
        if emb is None or self.index.needs_reindex:
            return None
        return self.index.matrix.get(emb.dims)

    def held_counts(self, store: Store) -> Callable[[str], int | None] | None:
        """Document frequencies read off the held postings (recalld.retrieval.keyword_scoring)."""
        postings = self.index.postings
        return keyword_scoring.held_count(store.conn, postings) if postings else None

    def reranker(self) -> Any:
        """The configured reranker, or None (off by default)."""
        if not self._reranker_loaded:
            self._reranker_loaded = True
            if self.index.config.str("rerank.provider") not in ("", "none"):
                try:
                    from recalld.retrieval.rerank import resolve_reranker

                    self._reranker = resolve_reranker(self.index.config)
                except Exception as exc:  # noqa: BLE001 - search works without a reranker
                    self.index.last_error = f"reranker unavailable: {exc}"
        return self._reranker

    def drop_reranker(self) -> None:
        """The reranker's settings changed: it is loaded again by the next search."""
        self._reranker, self._reranker_loaded = None, False

    def warm(self) -> None:
        """Load the model, the vector matrix and the keyword row lengths now, side by side,
        rather than on the first search (1M vectors: seconds each)."""
        postings = self.index.postings

        def row_lengths() -> None:
            if postings is not None:  # the keyword channel's (1M rows: ~1 s)
                with self.index.readers.own_connection() as store:
                    postings.warm(store.conn)

        foreground = self.index.provider.warm_up()
        load_side_by_side(
            self.index.readers.swap,
            [(self.vectors, "recalld-vectors-load"), (row_lengths, "recalld-lengths")],
            foreground,
        )

    def close(self) -> None:
        """Stop the channels' threads (a search in flight finishes)."""
        self._executor.shutdown(wait=False)
        self._phrases.shutdown(wait=False)
