"""Search stage 1, the channels: the vector channel (query embedding and matrix scan) on the
executor while the keyword channel (FTS5, with pseudo-relevance feedback, then coordination's
credit) runs here.

A failing vector channel degrades the answer to keyword-only and says why; it never fails it.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recalld.retrieval import coordination, fusion, prf
from recalld.retrieval.common_terms import common_checker
from recalld.retrieval.fts_query import build_match, or_terms
from recalld.retrieval.query_shape import QueryShape

if TYPE_CHECKING:
    from recalld.retrieval.search import SearchContext, SearchRequest

Hits = list[tuple[int, float]]


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

    allowed = None
    if run_vector and (req.sources or req.path_prefix or req.kinds):
        allowed = np.asarray(
            ctx.store.chunk_ids(req.sources, req.path_prefix, req.kinds), dtype=np.int64
        )

    vector_future: Future[Hits] | None = None
    vector_hits: Hits = []
    if run_vector:
        assert ctx.embedder is not None and ctx.vectors is not None
        embedder, vectors = ctx.embedder, ctx.vectors

        def vector_channel() -> Hits:
            qvec = embedder.embed([req.query], query=True)[0]
            return vectors.search(qvec, want, allowed)

        if ctx.executor is not None and run_keyword:
            vector_future = ctx.executor.submit(vector_channel)
        else:
            try:
                vector_hits = vector_channel()
            except Exception as exc:  # noqa: BLE001 - a failing provider degrades, never fails
                degraded = f"vector search failed ({exc}); keyword results only"
                run_keyword = True
                run_vector = False

    match = _keyword_match(req, ctx) if run_keyword else None
    keyword_hits = _keyword_channel(req, ctx, shape, match, want) if match else []
    # Coordination needs only the keyword hits: it runs here, while the vector channel (the
    # query embedding, the scan) is usually still busy on the executor.
    keyword_scores, coverage = coordination.credit(
        ctx.terms,
        or_terms(req.query),
        fusion.bm25_scores(keyword_hits),
        ctx.config.float("search.coordination"),
    )

    if vector_future is not None:
        try:
            vector_hits = vector_future.result()
        except Exception as exc:  # noqa: BLE001
            degraded = f"vector search failed ({exc}); keyword results only"
            run_vector = False  # the answer is keyword-only and says so in ``mode``
    return ChannelHits(
        vector_hits, keyword_hits, match, run_vector, degraded, keyword_scores, coverage
    )


def _keyword_match(req: SearchRequest, ctx: SearchContext) -> str | None:
    """The FTS5 expression of the query (None: nothing to match)."""
    partial = ctx.config.bool("search.partial_identifiers")
    common = common_checker(ctx.terms, ctx.config.float("search.max_term_df"))
    match = build_match(req.query, partial=partial, common=common)
    if match and not partial:
        match = "{text context} : (" + match + ")"  # the derived ident column stays out
    return match


def _keyword_channel(
    req: SearchRequest, ctx: SearchContext, shape: QueryShape | None, match: str, want: int
) -> Hits:
    """BM25 hits of ``match``; prose queries get pseudo-relevance feedback (``search.prf``)."""
    cfg = ctx.config

    def keyword_search(expr: str) -> Hits:
        return ctx.store.keyword_search(
            expr,
            want,
            req.sources,
            req.path_prefix,
            context_weight=cfg.float("search.context_weight"),
            ident_weight=cfg.float("search.ident_weight"),
            kinds=req.kinds,
        )

    hits = keyword_search(match)
    if shape is None or shape.kind in ("question", "statement"):
        hits = prf.feedback(
            ctx.terms,
            req.query,
            hits,
            lambda ids: [r.text for r in ctx.store.chunks(ids).values()],
            lambda extra: keyword_search(f"{match} OR " + " OR ".join(extra)),
            cfg.float("search.prf"),
        )
    return hits
