"""Document evidence (``search.doc_evidence``): several matching chunks of one file add up.

A three-chunk abstract whose every chunk matches the query is better evidence than one lucky
chunk elsewhere, but ranking chunks alone sees only its best chunk. The file's best candidate
gets a bonus from the file's other candidates, bounded so that no amount of weak matches beats a
strong one::

    bonus(file) = weight * min(sum(score of the file's other candidates), 1)
    best(file)  = score + bonus * (1 - score)                       (stays in [0, 1])

Only the best chunk of a file is raised: the others keep their own scores, so the top of the
list is not filled with one file's chunks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from recalld.fusion import Fused

__all__ = ["add_up"]


def add_up(
    fused: Sequence[Fused], path_of: Mapping[int, str], weight: float
) -> tuple[list[Fused], dict[int, float]]:
    """``fused`` with each file's best candidate raised (re-sorted), and the bonus per chunk."""
    if weight <= 0 or len(fused) < 2:
        return list(fused), {}
    best: dict[str, Fused] = {}
    rest: dict[str, float] = {}
    for f in fused:
        path = path_of[f.chunk_id]
        top = best.get(path)
        if top is None or f.score > top.score:
            if top is not None:
                rest[path] = rest.get(path, 0.0) + top.score
            best[path] = f
        else:
            rest[path] = rest.get(path, 0.0) + f.score
    bonus: dict[int, float] = {}
    for path, f in best.items():
        extra = weight * min(rest.get(path, 0.0), 1.0)
        if extra > 0:
            bonus[f.chunk_id] = min(extra, 1.0)
    if not bonus:
        return list(fused), {}
    out = [
        Fused(f.chunk_id, f.score + bonus[f.chunk_id] * (1.0 - f.score), f.vector, f.keyword)
        if f.chunk_id in bonus
        else f
        for f in fused
    ]
    out.sort(key=lambda f: (-f.score, f.chunk_id))
    return out, bonus
