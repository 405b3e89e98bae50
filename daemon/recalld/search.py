"""The hybrid search pipeline: validate, run both channels in parallel, fuse, floor, rerank, shape.

Knows no sockets: it takes a read-only :class:`~recalld.store.Store`, the in-memory
:class:`~recalld.vector_index.VectorIndex` and the active embedder, and returns the wire dict of
DESIGN.md's ``search``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from recalld import fusion
from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.errors import BadRequest
from recalld.fts_query import build_match, query_terms
from recalld.store import ChunkRow, Store
from recalld.vector_index import VectorIndex

MODES = ("hybrid", "keyword", "vector")
SOURCES = ("memory", "sessions")
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

    max_results = params.get("max_results")
    if max_results is None:
        max_results = config.int("search.max_results")
    if (
        not isinstance(max_results, int)
        or isinstance(max_results, bool)
        or not (1 <= max_results <= 1000)
    ):
        raise BadRequest(f"max_results must be an integer from 1 to 1000, got {max_results!r}")

    min_score = params.get("min_score")
    if min_score is None:
        min_score = config.float("search.min_score")
    if (
        not isinstance(min_score, int | float)
        or isinstance(min_score, bool)
        or not (0.0 <= float(min_score) <= 1.0)
    ):
        raise BadRequest(f"min_score must be a number from 0 to 1, got {min_score!r}")

    sources = params.get("sources")
    if isinstance(sources, str):
        sources = [sources]
    if sources is not None:
        if not isinstance(sources, list | tuple) or not all(s in SOURCES for s in sources):
            raise BadRequest(f"sources must be a list of {SOURCES}, got {sources!r}")
        sources = tuple(sources) or None

    path_prefix = params.get("path_prefix")
    if path_prefix is not None and not isinstance(path_prefix, str):
        raise BadRequest(f"path_prefix must be a string, got {path_prefix!r}")
    if path_prefix is not None and "\x00" in path_prefix:
        raise BadRequest("path_prefix contains a NUL byte")

    mode = params.get("mode") or "hybrid"
    if mode not in MODES:
        raise BadRequest(f"mode must be one of {MODES}, got {mode!r}")
    return SearchRequest(query, max_results, float(min_score), sources, path_prefix or None, mode)


@dataclass
class SearchContext:
    """What a search needs besides the request."""

    store: Store
    config: Config
    embedder: Embedder | None
    vectors: VectorIndex | None
    degraded: str | None  # why vector search is off, if it is
    executor: Executor | None = None
    reranker: Any = None  # recalld.rerank.Reranker, optional
    index_info: Callable[[], dict[str, Any]] | None = None


def snippet(text: str, terms: Sequence[str], limit: int) -> str:
    """At most ``limit`` characters of ``text``, starting at the line with the most query terms."""
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    lowered = [line.lower() for line in lines]
    best, best_hits = 0, 0
    for i in range(len(lines)):
        window, hits, size = i, 0, 0
        while window < len(lines) and size < limit:
            hits += sum(1 for t in terms if t in lowered[window])
            size += len(lines[window]) + 1
            window += 1
        if hits > best_hits:
            best, best_hits = i, hits
    return "\n".join(lines[best:])[:limit]


def run_search(req: SearchRequest, ctx: SearchContext) -> dict[str, Any]:
    """Run one search; returns the wire result of DESIGN.md."""
    started = time.perf_counter()
    cfg = ctx.config
    want = req.max_results * cfg.int("search.candidate_multiplier")
    degraded = ctx.degraded
    vector_ok = ctx.embedder is not None and ctx.vectors is not None and len(ctx.vectors) > 0
    run_vector = req.mode in ("hybrid", "vector") and vector_ok
    run_keyword = req.mode in ("hybrid", "keyword") or (req.mode == "vector" and not vector_ok)
    if req.mode != "keyword" and not vector_ok and degraded is None:
        degraded = "the index has no vectors yet; keyword search only"

    allowed = None
    if run_vector and (req.sources or req.path_prefix):
        allowed = np.asarray(ctx.store.chunk_ids(req.sources, req.path_prefix), dtype=np.int64)

    vector_future: Future[list[tuple[int, float]]] | None = None
    vector_hits: list[tuple[int, float]] = []
    if run_vector:
        assert ctx.embedder is not None and ctx.vectors is not None
        embedder, vectors = ctx.embedder, ctx.vectors

        def vector_channel() -> list[tuple[int, float]]:
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

    keyword_hits: list[tuple[int, float]] = []
    match = build_match(req.query) if run_keyword else None
    if match:
        keyword_hits = ctx.store.keyword_search(
            match,
            want,
            req.sources,
            req.path_prefix,
            context_weight=cfg.float("search.context_weight"),
        )

    if vector_future is not None:
        try:
            vector_hits = vector_future.result()
        except Exception as exc:  # noqa: BLE001
            degraded = f"vector search failed ({exc}); keyword results only"

    kw = fusion.bm25_scores(keyword_hits)
    vs = fusion.cosine_scores(vector_hits)
    if vector_hits and keyword_hits:
        mode = "hybrid" if req.mode == "hybrid" else req.mode
    elif vector_hits:
        mode = "vector" if req.mode == "vector" else req.mode
    else:
        mode = "keyword" if (req.mode != "hybrid" or not run_vector) else "hybrid"

    if not vector_hits:
        # Only the keyword channel answered: its own scores, so the floor keeps its best match.
        fused = [fusion.Fused(cid, s, None, s) for cid, s in kw.items()]
        fused.sort(key=lambda f: (-f.score, f.chunk_id))
    elif not keyword_hits:
        fused = [fusion.Fused(cid, s, s, None) for cid, s in vs.items()]
        fused.sort(key=lambda f: (-f.score, f.chunk_id))
    elif cfg.str("search.fusion") == "rrf":
        fused = fusion.rrf(
            [c for c, _ in vector_hits],
            [c for c, _ in keyword_hits],
            vs,
            kw,
            k=cfg.int("search.rrf_k"),
        )
    else:
        fused = fusion.weighted(
            vs,
            kw,
            vector_weight=cfg.float("search.vector_weight"),
            text_weight=cfg.float("search.text_weight"),
            normalise=cfg.str("search.score_norm") == "minmax",
        )
    # The floor keeps a chunk whose fused score reaches it, or whose cosine similarity alone
    # does: a strong paraphrase match must not be lost because the keyword channel missed it.
    kept = [
        f
        for f in fused
        if f.score >= req.min_score or (f.vector is not None and f.vector >= req.min_score)
    ]
    if not kept and fused and not vector_hits:
        kept = fused[:1]  # never drop every keyword-only match

    rows = ctx.store.chunks(f.chunk_id for f in kept[: max(req.max_results, 1) * 4])
    kept = [f for f in kept if f.chunk_id in rows]
    if ctx.reranker is not None and kept:
        kept, rerank_note = _rerank(req, ctx, kept, rows)
        if rerank_note:
            degraded = f"{degraded}; {rerank_note}" if degraded else rerank_note
    kept = kept[: req.max_results]

    terms = [t.lower() for t in query_terms(req.query)]
    limit = cfg.int("search.snippet_chars")
    results = [_result(rows[f.chunk_id], f, terms, limit) for f in kept]
    return {
        "results": results,
        "mode": mode,
        "degraded": degraded,
        "provider": ctx.embedder.label if ctx.embedder is not None else "none",
        "index": ctx.index_info()
        if ctx.index_info
        else {"state": "idle", "pending": 0, "last_sync": None},
        "took_ms": round((time.perf_counter() - started) * 1000, 3),
    }


def _rerank(
    req: SearchRequest, ctx: SearchContext, kept: list[fusion.Fused], rows: dict[int, ChunkRow]
) -> tuple[list[fusion.Fused], str | None]:
    from recalld.rerank.apply import rerank_shortlist

    cfg = ctx.config
    ranked, note = rerank_shortlist(
        ctx.reranker,
        req.query,
        kept,
        lambda f: rows[f.chunk_id].text,
        top_n=cfg.int("rerank.top_n"),
        timeout_s=cfg.float("rerank.timeout_s"),
        score_of=lambda f: f.score,
    )
    if note:
        return kept, note
    return [fusion.Fused(f.chunk_id, score, f.vector, f.keyword) for f, score in ranked], None


def _result(row: ChunkRow, f: fusion.Fused, terms: Sequence[str], limit: int) -> dict[str, Any]:
    return {
        "path": row.path,
        "source": row.source,
        "start_line": row.start_line,
        "end_line": row.end_line,
        "score": round(f.score, 6),
        "snippet": snippet(row.text, terms, limit),
        "citation": f"{row.path}#L{row.start_line}-L{row.end_line}",
        "scores": {
            "vector": None if f.vector is None else round(f.vector, 6),
            "keyword": None if f.keyword is None else round(f.keyword, 6),
        },
    }
