"""A short note as one unit of evidence (``search.note_units``): its chunks pool their channels.

Fusion scores chunks, so an abstract whose title chunk matches the query's words (the keyword
channel) and whose body chunk matches its meaning (the vector channel) counts each half on a
different chunk, and neither ranks as the whole note would. For a *short note*
(:func:`~recalld.retrieval.doc_groups.is_short_note`: one slot per note is shown anyway), each
candidate chunk moves ``search.note_units`` (0.75) of the way to the note's best score in each
channel before fusion; the note's chunks then nearly tie, and among ties its best chunk of the
plain fusion stays first. Long files, chats and transcripts are untouched: their chunks are
different passages. On by the leave-one-set-out rule of ``bench/loo.py`` (within 0.005 of the
choice and of the best in every fold; the incumbent off failed the scifact-train fold), though
its gain rests on the abstracts sets (docs/DECISIONS.md, "A short note as one unit").
"""

from __future__ import annotations

from collections.abc import Mapping

from recalld.index.store import ChunkRow, Store
from recalld.retrieval.doc_groups import is_short_note

__all__ = ["note_members", "pool"]


def note_members(rows: Mapping[int, ChunkRow], cands: set[int], store: Store) -> list[list[int]]:
    """The candidate chunks of each short note that has two candidates or more."""
    by_path: dict[str, list[int]] = {}
    for cid in cands:
        if cid in rows:
            by_path.setdefault(rows[cid].path, []).append(cid)
    return [ids for path, ids in by_path.items() if len(ids) > 1 and is_short_note(store, path)]


def pool(scores: Mapping[int, float], notes: list[list[int]], share: float) -> dict[int, float]:
    """``scores`` with every chunk of each note raised ``share`` of the way to the note's best
    (1: all of it; a chunk the channel did not return is raised from 0: the note matched)."""
    out = dict(scores)
    for ids in notes:
        best = max((scores[c] for c in ids if c in scores), default=None)
        if best is not None:
            for c in ids:
                own = scores.get(c, 0.0)
                out[c] = own + share * (best - own)
    return out
