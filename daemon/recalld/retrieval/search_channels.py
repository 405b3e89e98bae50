"""Search stage 1, the channels: the vector channel (query embedding and matrix scan) on the
executor while the keyword channel (FTS5, with pseudo-relevance feedback, then coordination's
credit) runs here.

A failing vector channel degrades the answer to keyword-only and says why; it never fails it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import apsw
import numpy as np
import numpy.typing as npt

from recalld.embedding.query_vector import query_vector
from recalld.retrieval import channel_fill, coordination, fusion, keyword_scoring, prf
from recalld.retrieval.common_terms import common_checker
from recalld.retrieval.filters import require_facts
from recalld.retrieval.fts_query import match_terms, or_terms
from recalld.retrieval.keyword_postings import PostingsCache
from recalld.retrieval.keyword_scoring import Term, match_of
from recalld.retrieval.query_shape import QueryShape

if TYPE_CHECKING:
    from recalld.retrieval.search_request import SearchContext, SearchRequest

Hits = list[tuple[int, float]]
log = logging.getLogger(__name__)


@dataclass
class ChannelHits:
    """What the channels found: ranked (chunk id, raw score) lists and how they ran."""

    vector: Hits
    keyword: Hits
    match: str | None  # the FTS5 expression the keyword channel ran
    run_vector: bool  # False when the vector channel was not run or failed
    degraded: str | None
    keyword_scores: dict[int, float]  # mapped (best = 1), coordination credit included
    coverage: dict[int, float]  # per keyword hit, the share of the rare terms it holds
    filled: tuple[int, int] = (0, 0)  # hits at the end of each list scored by channel_fill


@dataclass(frozen=True)
class _VectorHits:
    query: npt.NDArray[np.float32] | None  # the query vector the hits were scored with
    hits: Hits


@dataclass(frozen=True)
class _KeywordHits:
    hits: Hits
    terms: list[Term]
    bm25: bool  # the hits are the bm25 of ``terms`` (feedback mixes in another search's)
    weights: tuple[float, float, float]
    postings: PostingsCache | None  # None: FTS5 scored them
    phrases: keyword_scoring.PhraseParts  # FTS5's parts read for them


_NO_KEYWORD = _KeywordHits([], [], True, (1.0, 1.0, 1.0), None, {})


def run_channels(
    req: SearchRequest, ctx: SearchContext, shape: QueryShape | None, want: int
) -> ChannelHits:
    """Both channels, in parallel when there is an executor."""
    degraded = ctx.degraded
    vector_ok = ctx.embedder is not None and ctx.vectors is not None and len(ctx.vectors) > 0
    run_vector = req.mode in ("hybrid", "vector") and vector_ok
    run_keyword = req.mode in ("hybrid", "keyword") or (req.mode == "vector" and not vector_ok)
    if req.mode != "keyword" and not vector_ok and degraded is None:
        degraded = "the index has no vectors yet; keyword search only"
    allowed = _allowed_ids(req, ctx, run_vector)

    vector_future: Future[_VectorHits] | None = None
    vector = _VectorHits(None, [])
    if run_vector:
        vector_channel = _vector_channel(req, ctx, want, allowed)
        if ctx.executor is not None and run_keyword:
            vector_future = ctx.executor.submit(vector_channel)
        else:
            try:
                vector = vector_channel()
            except Exception as exc:  # noqa: BLE001 - a failing provider degrades, never fails
                degraded = f"vector search failed ({exc}); keyword results only"
                run_keyword = True
                run_vector = False

    terms = _keyword_terms(req, ctx) if run_keyword else []
    keyword = _keyword_channel(req, ctx, shape, terms, want, allowed) if terms else _NO_KEYWORD
    fill = ctx.config.bool("search.fill_channels") and ctx.config.str("search.fusion") == "weighted"
    # Coordination needs only the keyword hits: it runs here, while the vector channel (the
    # query embedding, the scan) is usually still busy on the executor, unless the keyword
    # hits are to be filled with the vector channel's candidates first.
    credited = None if fill else _credit(req, ctx, keyword.hits)

    if vector_future is not None:
        try:
            vector = vector_future.result()
        except Exception as exc:  # noqa: BLE001
            degraded = f"vector search failed ({exc}); keyword results only"
            run_vector = False  # the answer is keyword-only and says so in ``mode``
    filled = _fill(req, ctx, vector, keyword) if fill and run_vector else None
    vector_hits = filled.vector if filled else vector.hits
    keyword_hits = filled.keyword if filled else keyword.hits
    keyword_scores, coverage = credited or _credit(req, ctx, keyword_hits)
    match = match_of(terms) if terms else None
    return ChannelHits(
        vector_hits,
        keyword_hits,
        match,
        run_vector,
        degraded,
        keyword_scores,
        coverage,
        filled.added if filled else (0, 0),
    )


def _credit(
    req: SearchRequest, ctx: SearchContext, keyword_hits: Hits
) -> tuple[dict[int, float], dict[int, float]]:
    """The keyword hits' mapped scores with coordination's credit, and their coverage."""
    return coordination.credit(
        ctx.terms,
        or_terms(req.query),
        fusion.bm25_scores(keyword_hits),
        ctx.config.float("search.coordination"),
        keyword_scoring.holder(ctx.store.conn, ctx.postings) if ctx.postings else None,
    )


def _fill(
    req: SearchRequest, ctx: SearchContext, vector: _VectorHits, keyword: _KeywordHits
) -> channel_fill.Filled | None:
    """Each channel's scores of the other's candidates (``search.fill_channels``)."""
    if not vector.hits or not keyword.hits or vector.query is None or ctx.vectors is None:
        return None
    vectors, qvec = ctx.vectors, vector.query

    def score_vector(ids: npt.NDArray[np.int64]) -> Hits:
        return vectors.search(qvec, len(ids), ids)

    def score_keyword(ids: npt.NDArray[np.int64]) -> Hits:
        if not keyword.bm25:
            return []  # feedback's mixed scores: no bm25 of other rows compares with them
        if keyword.postings is not None:
            try:
                hits = keyword_scoring.scores_of(
                    ctx.store.conn,
                    keyword.postings,
                    keyword.terms,
                    keyword.weights,
                    ids,
                    keyword.phrases,
                )
            except (apsw.Error, ValueError) as exc:  # as the channel: FTS5 still answers
                log.warning("held postings failed (%s); the fill asks FTS5", exc)
                hits = None
            if hits is not None:
                return hits
        return ctx.store.keyword_scores_of(
            match_of(keyword.terms),
            [int(i) for i in ids],
            context_weight=keyword.weights[1],
            ident_weight=keyword.weights[2],
        )

    return channel_fill.fill(vector.hits, keyword.hits, score_vector, score_keyword)


def _allowed_ids(
    req: SearchRequest, ctx: SearchContext, run_vector: bool
) -> npt.NDArray[np.int64] | None:
    """The chunk ids a filtered search may return, where a channel needs them listed."""
    if req.facts is not None:
        require_facts(ctx.store.conn)
    if req.filtered and (run_vector or (req.facts and ctx.postings)):
        return np.asarray(
            ctx.store.chunk_ids(req.sources, req.path_prefix, req.kinds, req.facts),
            dtype=np.int64,
        )
    return None


def _vector_channel(
    req: SearchRequest, ctx: SearchContext, want: int, allowed: npt.NDArray[np.int64] | None
) -> Callable[[], _VectorHits]:
    """The vector channel as a call: embed the query, then scan the matrix."""
    assert ctx.embedder is not None and ctx.vectors is not None
    embedder, vectors = ctx.embedder, ctx.vectors

    def vector_channel() -> _VectorHits:
        qvec = query_vector(embedder, req.query)  # the shared channel's too, made once
        return _VectorHits(qvec, vectors.search(qvec, want, allowed))

    return vector_channel


def _keyword_terms(req: SearchRequest, ctx: SearchContext) -> list[Term]:
    """The query's OR terms; without identifier variants they skip the derived ident column."""
    partial = ctx.config.bool("search.partial_identifiers")
    common = common_checker(ctx.terms, ctx.config.float("search.max_term_df"))
    return [(e, not partial) for e in match_terms(req.query, partial=partial, common=common)]


def _keyword_channel(
    req: SearchRequest,
    ctx: SearchContext,
    shape: QueryShape | None,
    terms: list[Term],
    want: int,
    allowed: npt.NDArray[np.int64] | None,
) -> _KeywordHits:
    """BM25 hits of ``terms``; prose queries get pseudo-relevance feedback (``search.prf``)."""
    cfg = ctx.config
    weights = (1.0, cfg.float("search.context_weight"), cfg.float("search.ident_weight"))
    # Held postings score single words without FTS5's per-row cost; a query of phrases only
    # is FTS5's, and so is a search filtered by source, prefix or kind alone (its rows joined
    # with ``chunks``). The stored-facts filters keep the held postings, masked by the ids
    # both channels may return: a filter that keeps 1 % then costs nothing extra.
    postings = ctx.postings if not req.filtered or (req.facts and allowed is not None) else None
    phrases: keyword_scoring.PhraseParts = {}  # the feedback search repeats the phrases
    searched: list[list[Term]] = []

    def keyword_search(these: list[Term]) -> Hits:
        searched.append(these)
        if postings is not None:
            try:
                hits = keyword_scoring.search(
                    ctx.store.conn, postings, these, want, weights, allowed, phrases, ctx.beside
                )
            except (apsw.Error, ValueError) as exc:  # FTS5's own query still answers
                postings.stats["failed"] += 1
                log.warning("held postings failed (%s); this search asks FTS5", exc)
                hits = None
            if hits is not None:
                return hits
        return ctx.store.keyword_search(
            match_of(these),
            want,
            req.sources,
            req.path_prefix,
            context_weight=weights[1],
            ident_weight=weights[2],
            kinds=req.kinds,
            facts=req.facts,
        )

    hits = keyword_search(terms)
    if shape is None or shape.kind in ("question", "statement"):
        hits = prf.feedback(
            ctx.terms,
            req.query,
            hits,
            lambda ids: [r.text for r in ctx.store.chunks(ids).values()],
            lambda extra: keyword_search(terms + [(e, False) for e in extra]),
            cfg.float("search.prf"),
        )
    return _KeywordHits(hits, terms, len(searched) == 1, weights, postings, phrases)
