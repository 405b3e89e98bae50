"""The hybrid search pipeline: validate, run both channels in parallel, fuse, floor, rerank, shape.

This module holds the request and the order of the stages; each stage has its own module.

Knows no sockets: it takes a read-only :class:`~recalld.index.store.Store`, the in-memory
:class:`~recalld.index.vector_index.VectorIndex` and the active embedder, and returns the wire dict
of DESIGN.md's ``search``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.errors import BadRequest
from recalld.index.store import Store
from recalld.index.vector_index import VectorIndex
from recalld.retrieval import path_query
from recalld.retrieval.answer_budget import MIN_BUDGET_TOKENS, fit_to_budget
from recalld.retrieval.keyword_postings import PostingsCache
from recalld.retrieval.query_shape import QueryShape, analyze
from recalld.retrieval.search_channels import run_channels
from recalld.retrieval.search_ranking import Ranking, rank
from recalld.retrieval.search_results import results_of, shortlist, under_floor
from recalld.retrieval.search_results import (
    snippet as snippet,  # where callers have imported it from
)
from recalld.retrieval.term_stats import TermCounts

MODES = ("hybrid", "keyword", "vector")
SOURCES = ("memory", "sessions")
KINDS = ("note", "message", "tool_call", "tool_output")
MAX_QUERY_BYTES = 100_000


@dataclass(frozen=True)
class SearchRequest:
    """A validated search request."""

    query: str
    max_results: int
    min_score: float
    sources: tuple[str, ...] | None
    path_prefix: str | None
    mode: str
    max_tokens: int = 0  # 0: no budget
    explain: bool = False
    kinds: tuple[str, ...] | None = None


def parse_request(params: Mapping[str, Any], config: Config) -> SearchRequest:
    """Validate wire parameters (BadRequest with a clear message on anything wrong)."""
    query = params.get("query")
    if not isinstance(query, str):
        raise BadRequest("search needs a 'query' string")
    if len(query.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
        raise BadRequest(
            f"query is {len(query)} characters; the limit is {MAX_QUERY_BYTES} bytes: "
            "search for a shorter passage"
        )
    query = query.replace("\x00", " ").strip()
    if not query:
        raise BadRequest("the query is empty: give a few words or an identifier to search for")
    query = query[: config.int("search.max_query_chars")]

    max_results = _int_param(
        params, "max_results", config.int("search.max_results"), lambda n: 1 <= n <= 1000,
        "an integer from 1 to 1000",
    )  # fmt: skip

    min_score = params.get("min_score")
    if min_score is None:
        min_score = config.float("search.min_score")
    if (
        not isinstance(min_score, int | float)
        or isinstance(min_score, bool)
        or not (0.0 <= float(min_score) <= 1.0)
    ):
        raise BadRequest(f"min_score must be a number from 0 to 1, got {min_score!r}")

    sources = _choices(params, "sources", SOURCES)

    path_prefix = params.get("path_prefix")
    if path_prefix is not None and not isinstance(path_prefix, str):
        raise BadRequest(f"path_prefix must be a string, got {path_prefix!r}")
    if path_prefix is not None and "\x00" in path_prefix:
        raise BadRequest("path_prefix contains a NUL byte")

    kinds = _choices(params, "kinds", KINDS)

    mode = params.get("mode") or "hybrid"
    if mode not in MODES:
        raise BadRequest(f"mode must be one of {MODES}, got {mode!r}")

    max_tokens = _int_param(
        params, "max_tokens", config.int("search.max_tokens"),
        lambda n: n == 0 or MIN_BUDGET_TOKENS <= n <= 1_000_000,
        f"0 (no budget) or an integer from {MIN_BUDGET_TOKENS} to 1000000",
    )  # fmt: skip
    explain = params.get("explain", False)
    if not isinstance(explain, bool):
        raise BadRequest(f"explain must be true or false, got {explain!r}")
    return SearchRequest(
        query,
        max_results,
        float(min_score),
        sources,
        path_prefix or None,
        mode,
        max_tokens,
        explain,
        kinds,
    )


def _choices(
    params: Mapping[str, Any], name: str, allowed: tuple[str, ...]
) -> tuple[str, ...] | None:
    """A filter parameter: one value or a list of ``allowed`` ones (None or empty: no filter)."""
    value = params.get(name)
    if isinstance(value, str):
        value = [value]
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(v in allowed for v in value):
        raise BadRequest(f"{name} must be a list of {allowed}, got {value!r}")
    return tuple(dict.fromkeys(value)) or None


def _int_param(
    params: Mapping[str, Any], name: str, default: int, ok: Callable[[int], bool], expect: str
) -> int:
    """An integer parameter (``default`` when absent); BadRequest naming what was expected."""
    value = params.get(name)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
        raise BadRequest(f"{name} must be {expect}, got {value!r}")
    return value


@dataclass
class SearchContext:
    """What a search needs besides the request."""

    store: Store
    config: Config
    embedder: Embedder | None
    vectors: VectorIndex | None
    degraded: str | None  # why vector search is off, if it is
    executor: Executor | None = None
    reranker: Any = None  # recalld.retrieval.rerank.Reranker, optional
    index_info: Callable[[], dict[str, Any]] | None = None
    counts: TermCounts | None = None  # term frequencies, shared by an engine's searches
    postings: PostingsCache | None = None  # held postings (the writer's engine only)

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = TermCounts(self.store.conn)  # counted every time: no cache

    @property
    def terms(self) -> TermCounts:
        """The term counts of this search (``recalld.retrieval.term_stats``)."""
        assert self.counts is not None
        return self.counts


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
    answer: dict[str, Any] = {
        "results": results_of(req, cfg, ranking, cands, channels),
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
    return {
        "shape": shape.kind if shape else "off",
        "literals": list(shape.literals) if shape else [],
        "fusion": ranking.method,
        "weights": {"vector": round(vw, 4), "keyword": round(tw, 4)},
        "match": match,
        "candidates": {"vector": ranking.candidates[0], "keyword": ranking.candidates[1]},
        "keyword_only": len(ranking.no_vector),  # candidates without a vector by policy
    }
