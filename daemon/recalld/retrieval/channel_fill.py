"""Each channel's own score of the candidates only the other found (``search.fill_channels``).

Weighted fusion adds the two channels' scores of a candidate. Each channel returns its top
``max_results x candidate_multiplier``, so a chunk the keyword channel ranks 3rd may be 60th by
cosine and miss the vector list: fusion then counted its vector part as 0, as if it were the
least similar chunk of the index, while its cosine may be close to the last one listed. Here
each channel scores the other's candidates as well: the vector channel by exact cosine of those
rows, the keyword channel by the bm25 those rows get for the same terms (0 when they hold none,
as before). Both lists then cover the same candidates and fusion weighs what each channel knows
of every one (docs/DECISIONS.md, "Each channel scores the other's candidates").

The filled hits go after the channel's own, best first: a channel's ranks (the query shape's
name check, ``--explain``) stay its own, and its best hit is unchanged for the keyword channel
(exact top-k). Rank fusions (``rrf``, ``wrrf``) are left alone: a filled hit has no rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Hits = list[tuple[int, float]]
#: Scores the given chunk ids (distinct), returning (chunk id, score) in the channel's order.
Scorer = Callable[[npt.NDArray[np.int64]], Hits]

__all__ = ["Filled", "fill", "own"]


@dataclass(frozen=True)
class Filled:
    """Both channels' hits with the other's candidates scored, and how many each gained."""

    vector: Hits
    keyword: Hits
    added: tuple[int, int]  # (vector, keyword) hits scored here, after each channel's own


def fill(vector: Hits, keyword: Hits, score_vector: Scorer, score_keyword: Scorer) -> Filled:
    """``vector`` and ``keyword`` each extended by its own scores of the other's candidates.

    ``score_keyword`` returns FTS5's sign (lower is better), ``score_vector`` cosines (higher
    is better); each list stays sorted best first. A candidate the channel cannot score (no
    vector by policy, no query term held) stays out of its list, as before."""
    more_vector = _scored(vector, keyword, score_vector, best_high=True)
    more_keyword = _scored(keyword, vector, score_keyword, best_high=False)
    return Filled(
        vector + more_vector, keyword + more_keyword, (len(more_vector), len(more_keyword))
    )


def _scored(own: Hits, other: Hits, score: Scorer, *, best_high: bool) -> Hits:
    held = {cid for cid, _ in own}
    missing = sorted({cid for cid, _ in other} - held)
    if not missing:
        return []
    found = [(cid, s) for cid, s in score(np.asarray(missing, dtype=np.int64)) if cid not in held]
    return sorted(found, key=lambda h: ((-h[1] if best_high else h[1]), h[0]))


def own(hits: Sequence[tuple[int, float]], added: int) -> Sequence[tuple[int, float]]:
    """The channel's own hits: those before the ``added`` filled ones."""
    return hits[: len(hits) - added]
