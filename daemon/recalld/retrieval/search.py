"""The hybrid search pipeline: validate, run both channels in parallel, fuse, floor, rerank, shape.

This module holds the request and the order of the stages; each stage has its own module.

Knows no sockets: it takes a read-only :class:`~recalld.index.store.Store`, the in-memory
:class:`~recalld.index.vector_index.VectorIndex` and the active embedder, and returns the wire dict
of DESIGN.md's ``search``.
"""

from __future__ import annotations

import time
from typing import Any

from recalld.retrieval import path_query
from recalld.retrieval.answer_budget import fit_to_budget
from recalld.retrieval.hit_freshness import add_freshness
from recalld.retrieval.query_shape import QueryShape, analyze
from recalld.retrieval.search_channels import run_channels
from recalld.retrieval.search_ranking import Ranking, rank
from recalld.retrieval.search_request import SearchContext, SearchRequest
from recalld.retrieval.search_results import results_of, shortlist, under_floor
from recalld.retrieval.search_results import (
    snippet as snippet,  # where callers have imported it from
)


def run_search(req: SearchRequest, ctx: SearchContext) -> dict[str, Any]:
    """Run one search; returns the wire result of DESIGN.md. The stages: channels
    (search_channels), one ranking (search_ranking), the answer's shape (search_results), then
    the token budget (answer_budget)."""
    started = time.perf_counter()
    cfg = ctx.config
    want = req.max_results * cfg.int("search.candidate_multiplier")
    shape = analyze(req.query) if cfg.bool("search.query_shape") else None
    hits = run_channels(req, ctx, shape, want)
    ranking = rank(hits, req.mode, ctx.store, shape, cfg, req.explain)
    filters = path_query.Filters(req.sources, req.path_prefix, req.kinds)
    ranking = path_query.put_first(ranking, ctx.store, req.query, filters)
    cands, channels, rerank_note = shortlist(req, ctx, ranking)
    degraded = hits.degraded
    if rerank_note:
        degraded = f"{degraded}; {rerank_note}" if degraded else rerank_note
    results = results_of(req, cfg, ranking, cands, channels)
    add_freshness(results, ctx.store.conn)
    answer: dict[str, Any] = {
        "results": results,
        "mode": ranking.mode,
        "degraded": degraded,
        "provider": ctx.embedder.label if ctx.embedder is not None else "none",
        "index": ctx.index_info()
        if ctx.index_info
        else {"state": "idle", "pending": 0, "last_sync": None},
    }
    if floor := under_floor(req, ranking, len(answer["results"])):
        answer["under_floor"] = floor
    if req.explain:
        answer["explain"] = _explain(shape, ranking, hits.match)
    if req.max_tokens:
        answer["budget"] = fit_to_budget(answer, req.max_tokens)
    answer["took_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return answer


def _explain(shape: QueryShape | None, ranking: Ranking, match: str | None) -> dict[str, Any]:
    """The answer-wide part of --explain: the query's shape, the fusion and its inputs."""
    vw, tw = ranking.weights
    sv, sk = ranking.shape_weights
    return {
        "shape": shape.kind if shape else "off",
        "literals": list(shape.literals) if shape else [],
        "prose_words": shape.prose if shape else 0,  # from search.long_query_words: long prose
        "fusion": ranking.method,
        "weights": {"vector": round(vw, 4), "keyword": round(tw, 4)},  # as applied
        # The shape's weights, before a channel whose best hit stands clear is raised.
        "shape_weights": {"vector": round(sv, 4), "keyword": round(sk, 4)},
        "match": match,
        "candidates": {"vector": ranking.candidates[0], "keyword": ranking.candidates[1]},
        "keyword_only": len(ranking.no_vector),  # candidates without a vector by policy
    }
