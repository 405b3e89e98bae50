"""Rank-aware fusion levers of issue 39 (docs/DECISIONS.md has their tables).

Gap confidence is on (1.0 since session 34); the other levers are off by default.

Weighted fusion adds min-max rescaled channel scores, so a chunk that one channel alone ranks
first can fall below chunks both channels hold in the middle. Each lever here is a way to keep
what one channel knows:

- :func:`weighted_rrf` (``search.fusion = "wrrf"``): reciprocal rank fusion with the channel
  weights, the keyword channel ranked by its mapped scores (coordination's credit included,
  which the plain ``rrf`` mode's raw BM25 order lacks);
- :func:`blend` (``search.rrf_blend``): weighted fusion's score mixed with that of an RRF of
  equal channel weights (the rank evidence the keyword-heavy weights leave out);
- :func:`gap_weights` (``search.gap_confidence``): a channel whose best hit stands clear of its
  runner-up gets more weight for this query;
- :func:`guard` (``search.channel_guard``): each channel's top few are kept inside the slots
  shown, in place of the weakest fused ones;
- :func:`coverage_weights` (``search.coverage_confidence``): the keyword channel weighs less for
  a query none of whose keyword hits holds its rare terms (each holds a word or two of them).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from recalld.retrieval import fusion
from recalld.retrieval.fusion import Fused, min_max

__all__ = ["blend", "coverage_weights", "gap_weights", "guard", "ranked_ids", "weighted_rrf"]


def ranked_ids(scores: Mapping[int, float]) -> list[int]:
    """Chunk ids by score, best first (ties by id, so the order is stable)."""
    return sorted(scores, key=lambda cid: (-scores[cid], cid))


def weighted_rrf(
    vector: Mapping[int, float],
    keyword: Mapping[int, float],
    *,
    vector_weight: float,
    text_weight: float,
    k: int,
    no_vector: Collection[int] = (),
) -> list[Fused]:
    """``fusion.weighted_rrf`` with each channel ranked by its own mapped scores (the plain
    ``rrf`` mode ranks the keyword channel in raw BM25 order)."""
    return fusion.weighted_rrf(
        ranked_ids(vector),
        ranked_ids(keyword),
        vector,
        keyword,
        weights=(vector_weight, text_weight),
        k=k,
        no_vector=no_vector,
    )


def blend(weighted: Sequence[Fused], rrf: Sequence[Fused], share: float) -> list[Fused]:
    """``(1 - share) * weighted + share * rrf`` per chunk (both in [0, 1]), re-sorted."""
    ranks = {f.chunk_id: f.score for f in rrf}
    out = [
        Fused(
            f.chunk_id,
            (1.0 - share) * f.score + share * ranks.get(f.chunk_id, 0.0),
            f.vector,
            f.keyword,
        )
        for f in weighted
    ]
    out.sort(key=lambda f: (-f.score, f.chunk_id))
    return out


def standout(scores: Mapping[int, float]) -> float:
    """How far a channel's best hit stands above its runner-up, in [0, 1].

    Read on the channel's min-max rescaled scores (the best 1, the bottom of its range 0), so
    that cosine's narrow band and BM25's wide one are compared on the same footing: 1 when the
    runner-up sits at the bottom of the range, 0 when it ties the best (or the channel has one
    hit: nothing to stand out from).
    """
    if len(scores) < 2:
        return 0.0
    top = sorted(min_max(dict(scores)).values(), reverse=True)
    return max(0.0, min(1.0, top[0] - top[1]))


def gap_weights(
    vector: Mapping[int, float],
    keyword: Mapping[int, float],
    weights: tuple[float, float],
    strength: float,
) -> tuple[float, float]:
    """(vector, keyword) weights, each raised by ``strength`` times its channel's standout."""
    if strength <= 0:
        return weights
    vw = weights[0] * (1.0 + strength * standout(vector))
    kw = weights[1] * (1.0 + strength * standout(keyword))
    return vw, kw


def coverage_weights(
    weights: tuple[float, float], coverage: Mapping[int, float], strength: float
) -> tuple[float, float]:
    """(vector, keyword) weights, the keyword one times ``1 - strength * (1 - best)``, where best
    is the largest share of the query's rare terms any keyword hit holds (coordination's
    coverage). Keyword hits that each hold one word of a four-word question are weak evidence,
    however BM25 ranks them among themselves (their best maps to 1); unchanged when coverage was
    not measured (one term, a long query, coordination off)."""
    if strength <= 0 or not coverage:
        return weights
    best = max(coverage.values())
    return weights[0], weights[1] * max(0.0, 1.0 - strength * (1.0 - best))


def guard(
    fused: Sequence[Fused],
    vector: Mapping[int, float],
    keyword: Mapping[int, float],
    top: int,
    slots: int,
) -> list[Fused]:
    """``fused`` with each channel's ``top`` best chunks inside the first ``slots``.

    A protected chunk that fused below the slots takes the place of the weakest unprotected
    chunk inside them (which moves just below); protected chunks keep their fused order among
    the rest, and nothing else moves. Only chunks in ``fused`` are protected (a filter or the
    floor may have removed others).
    """
    if top <= 0 or slots <= 0 or len(fused) <= slots:
        return list(fused)
    present = {f.chunk_id for f in fused}
    protected: set[int] = set()
    for channel in (vector, keyword):
        protected.update([cid for cid in ranked_ids(channel) if cid in present][:top])
    head, tail = list(fused[:slots]), list(fused[slots:])
    lifted = [f for f in tail if f.chunk_id in protected]
    if not lifted:
        return list(fused)
    dropped: list[Fused] = []
    for f in lifted:
        weakest = next(
            (i for i in range(len(head) - 1, -1, -1) if head[i].chunk_id not in protected), None
        )
        if weakest is None:
            break  # every slot holds a protected chunk already
        dropped.insert(0, head.pop(weakest))
        head.append(f)
    moved = {f.chunk_id for f in head}
    rest = dropped + [f for f in tail if f.chunk_id not in moved]
    return head + rest
