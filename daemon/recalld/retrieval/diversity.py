"""Near-duplicate collapse and MMR diversity over a fused shortlist.

- Collapse (``search.dedupe``): two candidates are the same passage when they come from one file
  with overlapping line ranges, or when their texts are near-identical (Jaccard similarity of
  word 3-shingles >= ``search.dedupe_similarity``), as when a note and a transcript quote the
  same lines. The best-scored one stays; the others become its ``also`` places.
- MMR (``search.mmr_lambda`` < 1): greedy maximal marginal relevance,
  ``lambda * relevance - (1 - lambda) * max similarity to what is already picked``, with cosine
  similarity of the chunks' vectors (word-set Jaccard when a chunk has none), so that one long
  file cannot fill every slot with variations of one passage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Candidate", "collapse", "mmr", "shingles"]

_WORD = re.compile(r"[^\W_]+")
VectorLookup = Callable[[Sequence[int]], dict[int, npt.NDArray[np.float32]]]
#: Largest shortlist the quadratic passes look at; the rest keeps its fused order.
MAX_PASS = 200


@dataclass
class Candidate:
    """One shortlisted chunk on its way to a result."""

    chunk_id: int
    score: float
    path: str
    start_line: int
    end_line: int
    text: str
    also: list[int] = field(default_factory=list)  # chunk ids collapsed into this one
    _shingles: frozenset[tuple[str, ...]] | None = None
    _words: frozenset[str] | None = None

    def shingles(self) -> frozenset[tuple[str, ...]]:
        if self._shingles is None:
            self._shingles = shingles(self.text)
        return self._shingles

    def words(self) -> frozenset[str]:
        if self._words is None:
            self._words = frozenset(self.text.casefold().split())
        return self._words


def shingles(text: str, n: int = 3) -> frozenset[tuple[str, ...]]:
    """Word ``n``-shingles of a text, case-folded (the words themselves for short texts).

    Words are split on whitespace with punctuation kept: cheap, and the same text gives the
    same shingles wherever it was found.
    """
    words = text.casefold().split()
    if len(words) < n:
        return frozenset((w,) for w in words)
    return frozenset(zip(*(words[i:] for i in range(n)), strict=False))


def _jaccard(a: frozenset[Any], b: frozenset[Any]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def _same_passage(a: Candidate, b: Candidate, threshold: float, maybe: bool = True) -> bool:
    if a.path == b.path:
        return a.start_line <= b.end_line and b.start_line <= a.end_line
    if not maybe:
        return False
    la, lb = len(a.text), len(b.text)
    if min(la, lb) < threshold * max(la, lb) * 0.8:
        return False  # lengths too far apart for near-identical text: skip the shingles
    return _jaccard(a.shingles(), b.shingles()) >= threshold


#: Chunks whose embeddings are less similar than this are never the same passage: a cheap
#: prefilter (one small matrix product) before the exact shingle comparison.
VECTOR_PREFILTER = 0.9


def collapse(
    ranked: Sequence[Candidate],
    threshold: float,
    want: int,
    vectors: VectorLookup | None = None,
) -> list[Candidate]:
    """Keep the first of every group of same-passage candidates; the rest go to its ``also``.

    Only the first ``2 * want`` candidates are compared; later ones keep their order unchecked:
    they only matter when many duplicates were collapsed.
    """
    limit = min(max(2 * want, 1), MAX_PASS)
    head, tail = list(ranked[:limit]), list(ranked[limit:])
    close = _close_pairs(head, vectors)
    kept: list[Candidate] = []
    for cand in head:
        for winner in kept:
            maybe = close is None or (winner.chunk_id, cand.chunk_id) in close
            if _same_passage(winner, cand, threshold, maybe):
                winner.also.append(cand.chunk_id)
                winner.also.extend(cand.also)
                break
        else:
            kept.append(cand)
    return kept + tail


def _close_pairs(
    head: Sequence[Candidate], vectors: VectorLookup | None
) -> set[tuple[int, int]] | None:
    """Pairs whose embeddings are close enough to be compared (None: compare every pair)."""
    if vectors is None or len(head) < 2:
        return None
    found = vectors([c.chunk_id for c in head])
    if len(found) < len(head):
        return None  # some chunk has no vector: no prefilter
    ids = [c.chunk_id for c in head]
    matrix = np.stack([found[i] for i in ids])
    sims = matrix @ matrix.T
    rows, cols = np.nonzero(sims >= VECTOR_PREFILTER)
    return {(ids[r], ids[c]) for r, c in zip(rows.tolist(), cols.tolist(), strict=True)}


def mmr(
    ranked: Sequence[Candidate],
    lam: float,
    vectors: VectorLookup | None,
    take: int,
) -> list[Candidate]:
    """Reorder the best ``take`` by maximal marginal relevance; the rest keeps its order."""
    if lam >= 1.0 or len(ranked) <= 1:
        return list(ranked)
    pool = list(ranked[:MAX_PASS])
    vecs = vectors([c.chunk_id for c in pool]) if vectors is not None else {}
    top = max(c.score for c in pool) or 1.0

    def similarity(a: Candidate, b: Candidate) -> float:
        va, vb = vecs.get(a.chunk_id), vecs.get(b.chunk_id)
        if va is not None and vb is not None:
            return float(np.dot(va, vb))
        return _jaccard(a.words(), b.words())

    picked: list[Candidate] = []
    best_sim = {c.chunk_id: 0.0 for c in pool}
    while pool and len(picked) < take:
        choice = max(pool, key=lambda c: lam * c.score / top - (1 - lam) * best_sim[c.chunk_id])
        pool.remove(choice)
        picked.append(choice)
        for c in pool:
            best_sim[c.chunk_id] = max(best_sim[c.chunk_id], similarity(c, choice))
    return picked + pool + list(ranked[MAX_PASS:])
