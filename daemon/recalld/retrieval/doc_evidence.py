"""Document evidence (``search.doc_evidence``): several matching chunks of one file add up.

A three-chunk abstract whose every chunk matches the query is better evidence than one lucky
chunk elsewhere, but ranking chunks alone sees only its best chunk. The file's best candidate
gets a bonus from the file's other candidates next to it (at most ``GAP`` lines away: the same
passage going on, which in a short note or an abstract is the whole file), bounded so that no
amount of weak matches beats a strong one::

    bonus(best) = weight * min(sum(score of the file's candidates next to it), 1)
    best        = score + bonus * (1 - score)                       (stays in [0, 1])

Far-away matches in a long file (a months-long chat, a manual) are other passages, not more
evidence for this one: counting them cost LoCoMo recall@10 0.015. Only the best chunk of a file
is raised: the others keep their own scores, so the top of the list is not filled with one
file's chunks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from recalld.retrieval.fusion import Fused

__all__ = ["GAP", "add_up"]

#: Lines between two chunks that still make them one passage (a blank line, a heading).
GAP = 2


def add_up(
    fused: Sequence[Fused], place_of: Mapping[int, tuple[str, int, int]], weight: float
) -> tuple[list[Fused], dict[int, float]]:
    """``fused`` with each file's best candidate raised (re-sorted), and the bonus per chunk.

    ``place_of`` gives each chunk's (path, start line, end line).
    """
    if weight <= 0 or len(fused) < 2:
        return list(fused), {}
    by_file: dict[str, list[Fused]] = {}
    for f in fused:
        by_file.setdefault(place_of[f.chunk_id][0], []).append(f)
    bonus: dict[int, float] = {}
    for group in by_file.values():
        if len(group) < 2:
            continue
        top = max(group, key=lambda f: (f.score, -f.chunk_id))
        _, start, end = place_of[top.chunk_id]
        near = sum(
            f.score
            for f in group
            if f is not top
            and place_of[f.chunk_id][1] <= end + GAP
            and place_of[f.chunk_id][2] >= start - GAP
        )
        if near > 0:
            bonus[top.chunk_id] = weight * min(near, 1.0)
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
