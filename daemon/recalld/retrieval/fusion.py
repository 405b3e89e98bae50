"""Score mapping and fusion of the keyword and vector channels.

Both fusions return (chunk id, fused score, vector score or None, keyword score or None), best
first, with fused scores in [0, 1] so that one ``min_score`` floor means the same for both.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Fused:
    """One fused candidate."""

    chunk_id: int
    score: float
    vector: float | None
    keyword: float | None


def bm25_scores(hits: Sequence[tuple[int, float]]) -> dict[int, float]:
    """Map FTS5 bm25 ranks (negative, lower is better) to (0, 1], the best hit scoring 1.

    Relative to the best hit of this query: absolute BM25 values depend on corpus size and query
    length, so no fixed squashing function means the same on every index.
    """
    if not hits:
        return {}
    strengths = {cid: max(-rank, 0.0) for cid, rank in hits}
    best = max(strengths.values())
    if best <= 0:
        return {cid: 1.0 for cid in strengths}
    # A floor keeps every match strictly above 0: it did match.
    return {cid: max(s / best, 1e-3) for cid, s in strengths.items()}


def cosine_scores(hits: Sequence[tuple[int, float]]) -> dict[int, float]:
    """Map cosine similarity (= 1 - cosine distance) into [0, 1]."""
    return {cid: min(max(sim, 0.0), 1.0) for cid, sim in hits}


MIN_MAX_FLOOR = 0.5


def min_max(scores: dict[int, float]) -> dict[int, float]:
    """Rescale one channel's candidate scores to [0, 1], the best scoring 1.

    Cosine similarities of one model crowd into a narrow band and BM25 has no fixed scale, so
    fusing them raw lets whichever channel spreads wider decide; per-query min-max puts both on
    the same footing (it beat raw scores on LoCoMo and tldr, see docs/DECISIONS.md). The bottom of
    the range is at most half the best score, so that near-ties (two candidates 1% apart) stay
    near-ties instead of becoming 1 and 0.
    """
    if not scores:
        return {}
    clipped = {cid: max(s, 0.0) for cid, s in scores.items()}
    hi = max(clipped.values())
    lo = min(min(clipped.values()), hi * MIN_MAX_FLOOR)
    if hi <= lo:
        return {cid: 1.0 for cid in clipped}
    return {cid: (s - lo) / (hi - lo) for cid, s in clipped.items()}


def weighted(
    vector: dict[int, float],
    keyword: dict[int, float],
    *,
    vector_weight: float,
    text_weight: float,
    normalise: bool = True,
    no_vector: Collection[int] = (),
) -> list[Fused]:
    """``vector_weight * v + text_weight * k``, a channel that missed a chunk counting 0.

    A chunk in ``no_vector`` has no vector by policy (keyword-only transcript content): the
    vector channel could not return it, so its keyword score stands in for the missing part
    instead of a 0, and it ranks on its keyword evidence alone.

    With ``normalise`` each channel is min-max rescaled over its candidates first. Weights are
    normalised to sum to 1 so that scores stay in [0, 1]. The returned ``vector`` / ``keyword``
    fields keep the channel scores as mapped (cosine, relative BM25), not the rescaled ones.
    """
    total = vector_weight + text_weight
    wv, wk = (vector_weight / total, text_weight / total) if total > 0 else (0.5, 0.5)
    nv, nk = (min_max(vector), min_max(keyword)) if normalise else (vector, keyword)
    out = [
        Fused(
            cid,
            wv * nv.get(cid, nk.get(cid, 0.0) if cid in no_vector else 0.0) + wk * nk.get(cid, 0.0),
            vector.get(cid),
            keyword.get(cid),
        )
        for cid in set(vector) | set(keyword)
    ]
    out.sort(key=lambda f: (-f.score, f.chunk_id))
    return out


def rrf(
    vector_ranked: Sequence[int],
    keyword_ranked: Sequence[int],
    vector: dict[int, float],
    keyword: dict[int, float],
    *,
    k: int = 60,
    no_vector: Collection[int] = (),
) -> list[Fused]:
    """Reciprocal rank fusion, scaled so that rank 1 in both channels scores 1.

    A chunk in ``no_vector`` (no vector by policy) counts its keyword rank for both channels.
    """
    return weighted_rrf(
        vector_ranked, keyword_ranked, vector, keyword, weights=(1.0, 1.0), k=k, no_vector=no_vector
    )


def weighted_rrf(
    vector_ranked: Sequence[int],
    keyword_ranked: Sequence[int],
    vector: Mapping[int, float],
    keyword: Mapping[int, float],
    *,
    weights: tuple[float, float],
    k: int,
    no_vector: Collection[int] = (),
) -> list[Fused]:
    """``wv / (k + rank_v) + wk / (k + rank_k)`` over the given rankings, scaled so that rank 1
    in both scores 1; (wv, wk) are ``weights`` normalised to sum to 1. A chunk in ``no_vector``
    counts its keyword rank for the vector channel too (its weight ``wv``)."""
    total = weights[0] + weights[1]
    wv, wk = (weights[0] / total, weights[1] / total) if total > 0 else (0.5, 0.5)
    raw: dict[int, float] = {}
    for ranked, w in ((vector_ranked, wv), (keyword_ranked, wk)):
        for rank, cid in enumerate(ranked, start=1):
            raw[cid] = raw.get(cid, 0.0) + w / (k + rank)
    if vector_ranked:
        for rank, cid in enumerate(keyword_ranked, start=1):
            if cid in no_vector:
                raw[cid] += wv / (k + rank)
    best = ((wv if vector_ranked else 0.0) + (wk if keyword_ranked else 0.0)) / (k + 1) or 1.0
    out = [Fused(cid, s / best, vector.get(cid), keyword.get(cid)) for cid, s in raw.items()]
    out.sort(key=lambda f: (-f.score, f.chunk_id))
    return out
