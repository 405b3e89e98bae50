"""Search stage 3, the answer's shape: the score floor, recency, the optional reranker,
duplicates collapsed, diversity (MMR), one slot per short note, chat hits focused on whole
turns, snippets.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from recalld.config import Config
from recalld.index.store import ChunkRow
from recalld.ingest.conversation_windows import focus_result
from recalld.retrieval import doc_groups, fusion, rank_fusion, served
from recalld.retrieval.diversity import Candidate, collapse, mmr
from recalld.retrieval.fts_query import query_terms
from recalld.retrieval.note_dates import decay, is_evergreen, note_date
from recalld.retrieval.search_ranking import Ranking

if TYPE_CHECKING:
    from recalld.retrieval.search_request import SearchContext, SearchRequest


def shortlist(
    req: SearchRequest, ctx: SearchContext, ranking: Ranking
) -> tuple[list[Candidate], dict[int, fusion.Fused], str | None]:
    """Floor, recency, reranker, dedupe and MMR: the candidates to show, best first, their
    channel scores, and a note when the reranker failed."""
    cfg = ctx.config
    fused, rows, notes = ranking.fused, ranking.rows, ranking.notes
    # The floor keeps a chunk whose fused score reaches it, or whose cosine similarity alone
    # does: a strong paraphrase match must not be lost because the keyword channel missed it.
    kept = [
        f
        for f in fused
        if f.score >= req.min_score or (f.vector is not None and f.vector >= req.min_score)
    ]
    if not kept and fused and not ranking.candidates[0]:
        kept = fused[:1]  # never drop every keyword-only match
    if notes is not None:
        _note_floor(kept, req.min_score, notes)
    if guard := cfg.int("search.channel_guard"):
        # Each channel's best few (among what passed the floor) inside the slots shown.
        kept = rank_fusion.guard(
            kept,
            {f.chunk_id: f.vector for f in kept if f.vector is not None},
            {f.chunk_id: f.keyword for f in kept if f.keyword is not None},
            guard,
            req.max_results,
        )
    kept = kept[: max(req.max_results, 1) * 4]
    # Recency reorders what passed the floor and never hides a note: an old answer is still one.
    kept = _recency(kept, rows, cfg, notes)
    rerank_note = None
    if ctx.reranker is not None and kept:
        kept, rerank_note = _rerank(req, ctx, kept, rows)

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
    if cfg.bool("search.group_short_docs"):
        cands = doc_groups.group(cands, ctx.store)
    return cands, channels, rerank_note


def under_floor(req: SearchRequest, ranking: Ranking, shown: int) -> dict[str, Any] | None:
    """When candidates were found but none reached the floor: how many, the best score, the
    floor, and how to see them (``min_score`` lower). None when something is shown or nothing
    matched at all. An empty answer must not read as "memory has nothing on it" when it does.
    """
    if shown or not ranking.fused:
        return None
    best = max(f.score for f in ranking.fused)
    return {
        "candidates": len(ranking.fused),
        "best_score": round(best, 4),
        "min_score": req.min_score,
        "see_with": float(_lower(best)),
        "hint": f"{len(ranking.fused)} candidates scored under the floor {req.min_score:g} "
        f"(best {best:.3f}); search again with min_score {_lower(best)} to see them",
    }


def _lower(best: float) -> str:
    """A floor just under ``best``, rounded down to two decimals (at least 0)."""
    return f"{max(int(best * 100) / 100, 0.0):g}"


def results_of(
    req: SearchRequest,
    cfg: Config,
    ranking: Ranking,
    cands: list[Candidate],
    channels: dict[int, fusion.Fused],
) -> list[dict[str, Any]]:
    """The wire results: snippets around the query's terms; a chat hit shows whole turns."""
    rows, notes = ranking.rows, ranking.notes
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
        res["snippet"] = served.snippet(res["snippet"])  # the gate, whatever the index holds
        if c.also and (also := _places(rows, c.also, res["citation"])):
            res["also"] = also  # collapsed from ``kept``
        if notes is not None:
            res["explain"] = {**notes.get(c.chunk_id, {}), "final": round(c.score, 6)}
            if c.also:
                res["explain"]["collapsed"] = len(c.also)
        results.append(res)
    return results


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
    from recalld.retrieval.rerank.apply import rerank_shortlist

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


def _places(rows: dict[int, ChunkRow], ids: Sequence[int], own: str) -> list[dict[str, Any]]:
    """The ``also`` places of a result, each citation once and never the result's own: the
    chunks of one over-long line all cite that line (``#L2-L2``)."""
    seen = {own}
    out: list[dict[str, Any]] = []
    for cid in ids:
        place = _place(rows[cid])
        if place["citation"] not in seen:
            seen.add(place["citation"])
            out.append(place)
    return out


def _place(row: ChunkRow) -> dict[str, Any]:
    """Where a collapsed duplicate was found (a result's ``also``)."""
    return {
        "path": row.path,
        "source": row.source,
        "start_line": row.start_line,
        "end_line": row.end_line,
        "citation": f"{row.path}#L{row.start_line}-L{row.end_line}",
    }
