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

from recalld import coordination, doc_evidence, fusion, prf
from recalld.answer_budget import MIN_BUDGET_TOKENS, fit_to_budget
from recalld.config import Config
from recalld.conversation_windows import focus_result
from recalld.diversity import Candidate, collapse, mmr
from recalld.embedding.base import Embedder
from recalld.errors import BadRequest
from recalld.front_matter import context_names
from recalld.fts_query import build_match, or_terms, query_terms
from recalld.note_dates import decay, is_evergreen, note_date
from recalld.query_shape import QueryShape, analyze, boosted, literal_share, normalise_name
from recalld.store import ChunkRow, Store
from recalld.vector_index import VectorIndex

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
    reranker: Any = None  # recalld.rerank.Reranker, optional
    index_info: Callable[[], dict[str, Any]] | None = None
    common_term: Callable[[tuple[str, ...]], bool] | None = None  # recalld.common_terms


def snippet(text: str, terms: Sequence[str], limit: int) -> str:
    """At most ``limit`` characters of ``text`` around the query terms.

    It starts at the window with the most query terms among those holding the longest term
    the text has (a whole identifier, not a run of its short parts elsewhere); when that term
    sits deep inside a long line (a tool output's single line of JSON or log), the window is
    centred on it.
    """
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    lowered = [line.lower() for line in lines]
    low = text.lower()
    longest = max((t for t in terms if t and t in low), key=len, default="")
    best, best_hits = 0, (False, 0)
    for i in range(len(lines)):
        window, hits, size, whole = i, 0, 0, False
        while window < len(lines) and size < limit:
            hits += sum(1 for t in terms if t in lowered[window])
            whole = whole or (bool(longest) and longest in lowered[window])
            size += len(lines[window]) + 1
            window += 1
        if (whole, hits) > best_hits:
            best, best_hits = i, (whole, hits)
    out = "\n".join(lines[best:])
    found = [(len(t), p) for t in terms if t and (p := out.lower().find(t)) != -1]
    size = max((n for n, _ in found), default=0)
    first = min((p for n, p in found if n == size), default=0)  # the longest term found
    if first + max((len(t) for t in terms), default=0) > limit * 2 // 3:
        start = max(0, first - limit // 3)
        space = out.find(" ", start, first)
        start = space + 1 if space != -1 else start
        return "…" + out[start : start + limit - 1]
    return out[:limit]


def channel_weights(shape: QueryShape | None, cfg: Config) -> tuple[float, float]:
    """(vector, keyword) weights for a query of this shape (query_shape's rule)."""
    if shape is None or shape.kind == "mixed":
        return cfg.float("search.vector_weight"), cfg.float("search.text_weight")
    vw = min(max(cfg.float(f"search.{shape.kind}_vector_weight"), 0.0), 1.0)
    return vw, 1.0 - vw


def _name_of(row: ChunkRow) -> list[str]:
    """The normalised file stem, document title and aliases of a chunk (for the name boost)."""
    base = row.path.rsplit("/", 1)[-1]
    stem = base.rsplit(".", 1)[0] if "." in base[1:] else base
    return [normalise_name(n) for n in (stem, *context_names(row.context))]


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
    shape = analyze(req.query) if cfg.bool("search.query_shape") else None

    allowed = None
    if run_vector and (req.sources or req.path_prefix or req.kinds):
        allowed = np.asarray(
            ctx.store.chunk_ids(req.sources, req.path_prefix, req.kinds), dtype=np.int64
        )

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
                run_vector = False

    keyword_hits: list[tuple[int, float]] = []
    partial = cfg.bool("search.partial_identifiers")
    match = build_match(req.query, partial=partial, common=ctx.common_term) if run_keyword else None
    if match and not partial:
        match = "{text context} : (" + match + ")"  # the derived ident column stays out
    if match:

        def keyword_channel(expr: str) -> list[tuple[int, float]]:
            return ctx.store.keyword_search(
                expr,
                want,
                req.sources,
                req.path_prefix,
                context_weight=cfg.float("search.context_weight"),
                ident_weight=cfg.float("search.ident_weight"),
                kinds=req.kinds,
            )

        keyword_hits = keyword_channel(match)
        if shape is None or shape.kind in ("question", "statement"):
            keyword_hits = prf.feedback(
                ctx.store.conn,
                req.query,
                keyword_hits,
                lambda ids: [r.text for r in ctx.store.chunks(ids).values()],
                lambda extra: keyword_channel(f"{match} OR " + " OR ".join(extra)),
                cfg.float("search.prf"),
            )

    if vector_future is not None:
        try:
            vector_hits = vector_future.result()
        except Exception as exc:  # noqa: BLE001
            degraded = f"vector search failed ({exc}); keyword results only"
            run_vector = False  # the answer is keyword-only and says so in ``mode``

    kw = fusion.bm25_scores(keyword_hits)
    kw, coverage = coordination.credit(
        ctx.store.conn, or_terms(req.query), kw, cfg.float("search.coordination")
    )
    vs = fusion.cosine_scores(vector_hits)
    if vector_hits and keyword_hits:
        mode = "hybrid" if req.mode == "hybrid" else req.mode
    elif vector_hits:
        mode = "vector" if req.mode == "vector" else req.mode
    else:
        mode = "keyword" if (req.mode != "hybrid" or not run_vector) else "hybrid"

    rows = ctx.store.chunks(set(kw) | set(vs))
    # Keyword-only chunks (no vector by policy) are not chunks the vector channel rejected.
    no_vector = {cid for cid in kw if cid in rows and not rows[cid].embed}
    method = "weighted"
    vw, tw = channel_weights(shape, cfg)
    if not vector_hits:
        # Only the keyword channel answered: its own scores, so the floor keeps its best match.
        fused = [fusion.Fused(cid, s, None, s) for cid, s in kw.items()]
        fused.sort(key=lambda f: (-f.score, f.chunk_id))
        method = "keyword only"
    elif not keyword_hits:
        fused = [fusion.Fused(cid, s, s, None) for cid, s in vs.items()]
        fused.sort(key=lambda f: (-f.score, f.chunk_id))
        method = "vector only"
    elif cfg.str("search.fusion") == "rrf":
        fused = fusion.rrf(
            [c for c, _ in vector_hits],
            [c for c, _ in keyword_hits],
            vs,
            kw,
            k=cfg.int("search.rrf_k"),
            no_vector=no_vector,
        )
        method = "rrf"
    else:
        minmax = cfg.str("search.score_norm") == "minmax"
        fused = fusion.weighted(
            vs, kw, vector_weight=vw, text_weight=tw, normalise=minmax, no_vector=no_vector
        )

    fused = [f for f in fused if f.chunk_id in rows]
    places = {cid: (row.path, row.start_line, row.end_line) for cid, row in rows.items()}
    fused = doc_evidence.add_up(fused, places, cfg.float("search.doc_evidence"))[0]
    notes: dict[int, dict[str, Any]] | None = None
    if req.explain:
        notes = _channel_notes(fused, vector_hits, keyword_hits)
        for cid, share in coverage.items():
            if cid in notes:
                notes[cid]["coordination"] = round(share, 4)  # rare-term share held
    fused = _boost(fused, rows, shape, cfg, notes)

    # The floor keeps a chunk whose fused score reaches it, or whose cosine similarity alone
    # does: a strong paraphrase match must not be lost because the keyword channel missed it.
    kept = [
        f
        for f in fused
        if f.score >= req.min_score or (f.vector is not None and f.vector >= req.min_score)
    ]
    if not kept and fused and not vector_hits:
        kept = fused[:1]  # never drop every keyword-only match
    if notes is not None:
        _note_floor(kept, req.min_score, notes)
    kept = kept[: max(req.max_results, 1) * 4]
    # Recency reorders what passed the floor and never hides a note: an old answer is still one.
    kept = _recency(kept, rows, cfg, notes)
    if ctx.reranker is not None and kept:
        kept, rerank_note = _rerank(req, ctx, kept, rows)
        if rerank_note:
            degraded = f"{degraded}; {rerank_note}" if degraded else rerank_note

    channels = {f.chunk_id: f for f in kept}
    cands = [
        Candidate(
            f.chunk_id,
            f.score,
            rows[f.chunk_id].path,
            rows[f.chunk_id].start_line,
            rows[f.chunk_id].end_line,
            rows[f.chunk_id].text,
        )
        for f in kept
    ]
    if cfg.bool("search.dedupe"):
        lookup = ctx.vectors.vectors_of if ctx.vectors else None
        cands = collapse(cands, cfg.float("search.dedupe_similarity"), req.max_results, lookup)
    lam = cfg.float("search.mmr_lambda")
    if lam < 1.0:
        cands = mmr(cands, lam, ctx.vectors.vectors_of if ctx.vectors else None, req.max_results)
    chat_focus = cfg.bool("search.chat_focus")
    # Overlapping chat windows can focus on the same turns: the spare candidates fill in.
    pool = cands if chat_focus else cands[: req.max_results]

    terms = [t.lower() for t in query_terms(req.query)]
    if (whole := req.query.strip().lower()) and " " not in whole and whole not in terms:
        terms.insert(0, whole)  # an identifier's snippet shows it whole, not its parts elsewhere
    limit = cfg.int("search.snippet_chars")
    results: list[dict[str, Any]] = []
    turns_shown: dict[str, list[tuple[int, int]]] = {}
    for c in pool:
        if len(results) >= req.max_results:
            break
        res = _result(rows[c.chunk_id], channels[c.chunk_id], c.score, terms, limit)
        if chat_focus and focus_result(res, rows[c.chunk_id], terms, limit):
            spans = turns_shown.setdefault(res["path"], [])
            if any(a <= res["end_line"] and res["start_line"] <= b for a, b in spans):
                continue  # these turns are shown already, from an overlapping window
            spans.append((res["start_line"], res["end_line"]))
        if c.also:
            res["also"] = [_place(rows[cid]) for cid in c.also]  # collapsed from ``kept``
        if notes is not None:
            res["explain"] = {**notes.get(c.chunk_id, {}), "final": round(c.score, 6)}
            if c.also:
                res["explain"]["collapsed"] = len(c.also)
        results.append(res)
    answer: dict[str, Any] = {
        "results": results,
        "mode": mode,
        "degraded": degraded,
        "provider": ctx.embedder.label if ctx.embedder is not None else "none",
        "index": ctx.index_info()
        if ctx.index_info
        else {"state": "idle", "pending": 0, "last_sync": None},
    }
    if req.explain:
        answer["explain"] = {
            "shape": shape.kind if shape else "off",
            "literals": list(shape.literals) if shape else [],
            "fusion": method,
            "weights": {"vector": round(vw, 4), "keyword": round(tw, 4)},
            "match": match,
            "candidates": {"vector": len(vector_hits), "keyword": len(keyword_hits)},
            "keyword_only": len(no_vector),  # candidates without a vector by policy
        }
    if req.max_tokens:
        answer["budget"] = fit_to_budget(answer, req.max_tokens)
    answer["took_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return answer


def _channel_notes(
    fused: list[fusion.Fused],
    vector_hits: list[tuple[int, float]],
    keyword_hits: list[tuple[int, float]],
) -> dict[int, dict[str, Any]]:
    """Per chunk: each channel's rank and mapped score, and the fused score (for --explain)."""
    vrank = {cid: r for r, (cid, _) in enumerate(vector_hits, 1)}
    krank = {cid: r for r, (cid, _) in enumerate(keyword_hits, 1)}
    notes: dict[int, dict[str, Any]] = {}
    for f in fused:
        notes[f.chunk_id] = {
            "vector": None
            if f.vector is None
            else {"rank": vrank.get(f.chunk_id), "score": round(f.vector, 6)},
            "keyword": None
            if f.keyword is None
            else {"rank": krank.get(f.chunk_id), "score": round(f.keyword, 6)},
            "fused": round(f.score, 6),
        }
    return notes


def _note_floor(kept: list[fusion.Fused], floor: float, notes: dict[int, dict[str, Any]]) -> None:
    """Why each result passed the floor (for --explain; the rule is in docs/DECISIONS.md)."""
    for f in kept:
        if f.score >= floor:
            by, why = "score", f"score {f.score:.3f} reaches the floor {floor}"
        elif f.vector is not None and f.vector >= floor:
            by, why = (
                "cosine",
                (
                    f"cosine {f.vector:.3f} reaches the floor {floor} although the score "
                    f"{f.score:.3f} does not (a paraphrase the keyword channel missed)"
                ),
            )
        else:
            by, why = (
                "best_keyword",
                (
                    f"score {f.score:.3f} is under the floor {floor}, kept as the best match of a "
                    "keyword-only answer"
                ),
            )
        notes[f.chunk_id]["floor"] = {"min_score": floor, "kept_by": by, "why": why}


def _boost(
    fused: list[fusion.Fused],
    rows: dict[int, ChunkRow],
    shape: QueryShape | None,
    cfg: Config,
    notes: dict[int, dict[str, Any]] | None,
) -> list[fusion.Fused]:
    """Literal and name boosts of query_shape's rule; returns the list re-sorted."""
    if shape is None:
        return fused
    lit_b, name_b = cfg.float("search.literal_boost"), cfg.float("search.name_boost")
    out: list[fusion.Fused] = []
    named_ids: set[int] = set()
    changed = False
    for f in fused:
        row = rows[f.chunk_id]
        score = f.score
        share = literal_share(shape.literals, row.text) if lit_b > 0 and shape.literals else 0.0
        if share:
            score = boosted(score, lit_b * share)
        named = name_b > 0 and shape.name in _name_of(row)
        if named:
            score = boosted(score, name_b)
            named_ids.add(f.chunk_id)
        if score != f.score:
            changed = True
            f = fusion.Fused(f.chunk_id, score, f.vector, f.keyword)
            if notes is not None:
                notes[f.chunk_id]["boosts"] = {"literal": round(share, 3), "name": named}
        out.append(f)
    if changed:
        # Stable: among equal scores a name match goes first, then the fused order stays.
        out.sort(key=lambda f: (-f.score, f.chunk_id not in named_ids))
    return out


def _recency(
    kept: list[fusion.Fused],
    rows: dict[int, ChunkRow],
    cfg: Config,
    notes: dict[int, dict[str, Any]] | None,
) -> list[fusion.Fused]:
    """Half-life decay by the note's date (note_dates); evergreen files never decay."""
    half_life = cfg.float("search.recency_half_life_days")
    if half_life <= 0 or not kept:
        return kept
    evergreen = cfg.list("search.evergreen")
    now = time.time()
    factors: dict[str, float] = {}
    out = []
    for f in kept:
        path = rows[f.chunk_id].path
        if path not in factors:
            when = None if is_evergreen(path, evergreen) else note_date(path)
            factors[path] = 1.0 if when is None else decay(now - when, half_life)
        factor = factors[path]
        if notes is not None:
            notes[f.chunk_id]["recency"] = round(factor, 4)
        out.append(fusion.Fused(f.chunk_id, f.score * factor, f.vector, f.keyword))
    out.sort(key=lambda f: (-f.score, f.chunk_id))
    return out


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


def _result(
    row: ChunkRow, f: fusion.Fused, score: float, terms: Sequence[str], limit: int
) -> dict[str, Any]:
    return {
        "path": row.path,
        "source": row.source,
        "start_line": row.start_line,
        "end_line": row.end_line,
        "score": round(score, 6),
        "snippet": snippet(row.text, terms, limit),
        "citation": f"{row.path}#L{row.start_line}-L{row.end_line}",
        "kind": row.kind,
        **({"tool": row.tool} if row.tool else {}),
        "scores": {
            "vector": None if f.vector is None else round(f.vector, 6),
            "keyword": None if f.keyword is None else round(f.keyword, 6),
        },
    }


def _place(row: ChunkRow) -> dict[str, Any]:
    """Where a collapsed duplicate was found (a result's ``also``)."""
    return {
        "path": row.path,
        "source": row.source,
        "start_line": row.start_line,
        "end_line": row.end_line,
        "citation": f"{row.path}#L{row.start_line}-L{row.end_line}",
    }
