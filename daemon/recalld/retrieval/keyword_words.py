"""One word's part of FTS5's BM25 from its held postings, and the top rows of a query's words.

A word's part in a row is ``idf * f * (k1 + 1) / (f + norm)`` (``recalld.retrieval.
keyword_scoring`` gives the whole formula); ``f / (f + norm)`` is below 1, so the part is below
``idf * (k1 + 1)``: the word's *bound*, which the pruning here rests on (MaxScore, Turtle and
Flood 1995).

Why prune: at 1M chunks a question's common word ("use": 186k rows) cost more to scatter into
the dense score arrays than all its rare words together, and ranking the 200k+ rows it matched
cost as much again, though no row can reach a 24-row list on such a word alone: those searches
were the keyword channel's tail (p95 3.5x its p50 in-process). So the words are scored rarest
first, in full over their rows; once the bounds of the words left sum below the limit-th best
score so far (a lower bound on the final one: parts only add), a row that none of the scored
words or phrases holds cannot reach the list, and the words left are added only at the rows
that can (the candidates' flags read along each word's sorted rows). The answer is the full
sum's: the same rows and scores, ties at the cut by id.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from recalld.index.fts_postings import CountArray, RowIds
from recalld.retrieval.keyword_postings import Snapshot

__all__ = ["K1", "B", "PhraseRows", "WordPart", "scores_at", "top_rows", "word_part"]

K1 = 1.2  # FTS5's bm25 constants
B = 0.75
Hits = list[tuple[int, float]]
#: Words left holding fewer rows than this are added in full: a look at the cut would cost more.
MIN_PRUNED_ROWS = 20_000
#: Rows read for the cut's lower bound: a failed look costs a partition of at most this many.
PROBE_ROWS = 30_000


@dataclass(frozen=True)
class WordPart:
    """A word's rows (ascending), their instances per column, the column weights and its idf."""

    ids: RowIds
    counts: CountArray
    weights: npt.NDArray[np.float64]
    idf: float

    @property
    def bound(self) -> float:
        """Above the word's part in any row."""
        return self.idf * (K1 + 1.0)

    def scores(self, snap: Snapshot, at: npt.NDArray[np.int64] | None = None) -> np.ndarray:
        """The word's part in its rows (or in the rows at positions ``at`` of ``ids``)."""
        ids, counts = (self.ids, self.counts) if at is None else (self.ids[at], self.counts[at])
        f = counts.astype(np.float64) @ self.weights
        norm = K1 * (1.0 - B + B * snap.lengths[ids] / snap.avgdl)
        part: np.ndarray = self.idf * (f * (K1 + 1.0)) / (f + norm)
        return part


def word_part(
    snap: Snapshot, token: str, restricted: bool, weights: tuple[float, float, float]
) -> WordPart:
    """``token``'s part (``restricted``: instances in the ident column are not the phrase's)."""
    post = snap.postings[token]
    ids, counts = post.ids, post.counts
    w = np.asarray(weights, dtype=np.float64)
    if restricted:
        inside = (counts[:, 0] > 0) | (counts[:, 1] > 0)
        ids, counts = ids[inside], counts[inside]
        w = w.copy()
        w[2] = 0.0
    hits = len(ids)
    idf = math.log((snap.rows - hits + 0.5) / (hits + 0.5)) if hits else 0.0
    return WordPart(ids, counts, w, idf if idf > 0.0 else 1e-6)


#: FTS5's part of the sum, one (row ids, their part) per phrase read; ids distinct in each.
PhraseRows = Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]


class _Board:
    """One search's dense per-row sums, the rows matched and the rows its filters allow."""

    def __init__(self, size: int, allowed: npt.NDArray[np.int64] | None) -> None:
        self.scores = np.zeros(size, dtype=np.float64)
        self.matched = np.zeros(size, dtype=bool)
        self.allowed = allowed
        self.keep: np.ndarray | None = None
        if allowed is not None:
            self.keep = np.zeros(size, dtype=bool)
            self.keep[allowed[(allowed >= 0) & (allowed < size)]] = True

    def add(self, ids: npt.NDArray[np.int64], values: np.ndarray) -> None:
        self.scores[ids] += values  # ids are distinct within a word or a phrase part
        self.matched[ids] = True

    def add_phrases(self, phrases: PhraseRows) -> None:
        """FTS5's rows, which may hold rows written after the lengths were read (grown for)."""
        top = max((int(ids.max()) + 1 for ids, _ in phrases if len(ids)), default=0)
        if top > len(self.scores):
            grown = _Board(top, self.allowed)
            grown.scores[: len(self.scores)] = self.scores
            grown.matched[: len(self.matched)] = self.matched
            self.scores, self.matched, self.keep = grown.scores, grown.matched, grown.keep
        for ids, values in phrases:
            self.add(ids, values)  # no bound is known for them: always scored in full

    def held(self) -> np.ndarray:
        """The flags of the rows matched that the filters allow."""
        return self.matched if self.keep is None else self.matched & self.keep

    def candidates(self) -> npt.NDArray[np.int64]:
        cand: npt.NDArray[np.int64] = np.flatnonzero(self.held())
        return cand


def top_rows(
    snap: Snapshot,
    parts: Sequence[WordPart],
    phrases: Callable[[], PhraseRows] | None,
    limit: int,
    allowed: npt.NDArray[np.int64] | None,
) -> Hits:
    """The ``limit`` best rows by the sum of ``parts`` and FTS5's ``phrases`` part.

    ``phrases`` is called only once the words need it (when they prune, or at the end): FTS5
    may still be reading it on another thread meanwhile. The words' lower bound of the cut
    leaves it out, which keeps it a lower bound (parts only add); a row the phrases hold is
    always a candidate."""
    board = _Board(len(snap.lengths), allowed)
    order = sorted((p for p in parts if len(p.ids)), key=lambda p: -p.bound)
    left = sum(p.bound for p in order)  # above what the words not yet added can give a row
    unread = sum(len(p.ids) for p in order)
    reach = 0.0  # the best score any row can have so far from the words
    floor, gain = 0.0, 0.0  # the last lower bound of the cut, and what came in since
    for i, part in enumerate(order):
        values = part.scores(snap)
        board.add(part.ids, values)
        best = float(values.max())
        left, reach, gain = left - part.bound, reach + best, gain + best
        unread -= len(part.ids)
        # Worth a look only when the words left are big and the cut may have passed their
        # bounds (it rises by at most what came in since the last look).
        if i + 1 < len(order) and unread >= MIN_PRUNED_ROWS and left < min(reach, floor + gain):
            floor, gain = _floor(board, order[: i + 1], limit), 0.0
            if left < floor:
                return _top_of_candidates(snap, board, order[i + 1 :], limit, phrases)
    board.add_phrases(phrases() if phrases is not None else ())
    cand = board.candidates()
    return _top(cand, board.scores[cand], limit)


def scores_at(
    snap: Snapshot, parts: Sequence[WordPart], phrases: PhraseRows, ids: npt.NDArray[np.int64]
) -> Hits:
    """The rows of ``ids`` (distinct) that the terms match, with the sum :func:`top_rows` gives
    them (FTS5's sign), in the order of ``ids``: a binary search per row in each word's sorted
    rows, so a few rows cost the same at any index size."""
    total = np.zeros(len(ids), dtype=np.float64)
    matched = np.zeros(len(ids), dtype=bool)
    for part in parts:
        if not len(part.ids):
            continue
        pos = np.minimum(np.searchsorted(part.ids, ids), len(part.ids) - 1)
        hit = part.ids[pos] == ids
        total[hit] += part.scores(snap, pos[hit])
        matched |= hit
    for rows, values in phrases:
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        if not len(sorted_rows):
            continue
        pos = np.minimum(np.searchsorted(sorted_rows, ids), len(sorted_rows) - 1)
        hit = sorted_rows[pos] == ids
        total[hit] += values[order[pos[hit]]]
        matched |= hit
    return [(int(ids[i]), -float(total[i])) for i in np.flatnonzero(matched)]


def _top_of_candidates(
    snap: Snapshot,
    board: _Board,
    rest: Sequence[WordPart],
    limit: int,
    phrases: Callable[[], PhraseRows] | None,
) -> Hits:
    """The top rows once no row outside the candidates can reach them: the words left are
    added only at the candidates they hold (a gather of the matched flags along each sorted
    list: cheaper than adding the word, and than a binary search per candidate). The phrases'
    rows are candidates too; they are asked for last (FTS5 may still be reading them), and the
    few the words had not matched get the words left by a binary search each."""
    # Read before the words left are added (they match no new row) and kept apart from the
    # phrases' rows, added below: a copy when it is the board's own array.
    held = board.matched.copy() if board.keep is None else board.held()
    for other in rest:
        at = np.flatnonzero(held[other.ids])
        board.scores[other.ids[at]] += other.scores(snap, at)
    late = phrases() if phrases is not None else ()
    board.add_phrases(late)
    if late:
        ids = np.unique(np.concatenate([rows for rows, _ in late]))
        new = ids[ids >= len(held)]
        inside = ids[ids < len(held)]
        new = np.concatenate([inside[~held[inside]], new])
        if board.keep is not None:
            new = new[board.keep[new]]
        for other in rest:
            pos = np.searchsorted(other.ids, new)
            hit = pos < len(other.ids)
            hit[hit] = other.ids[pos[hit]] == new[hit]
            at = pos[hit]
            board.scores[other.ids[at]] += other.scores(snap, at)
    cand: npt.NDArray[np.int64] = np.flatnonzero(board.held())
    return _top(cand, board.scores[cand], limit)


def _floor(board: _Board, scored: Sequence[WordPart], limit: int) -> float:
    """A lower bound of the ``limit``-th best score so far, read cheaply: the ``limit``-th best
    of the rows of one scored word (some of the candidates: the biggest list under PROBE_ROWS,
    else the smallest; one list, so no row is counted twice)."""
    small = [p.ids for p in scored if len(p.ids) <= PROBE_ROWS]
    rows = max(small, key=len) if small else min((p.ids for p in scored), key=len)
    if board.keep is not None:
        rows = rows[board.keep[rows]]
    if len(rows) < limit or limit <= 0:
        return -math.inf
    return _kth(board.scores[rows], limit)


def _kth(values: np.ndarray, k: int) -> float:
    """The k-th highest of ``values`` (at least k of them)."""
    return float(np.partition(values, len(values) - k)[len(values) - k])


def _top(cand: npt.NDArray[np.int64], values: np.ndarray, limit: int) -> Hits:
    """The ``limit`` best of ``cand``: highest score first, then lowest id (FTS5's sign)."""
    if not len(cand) or limit <= 0:
        return []
    if len(cand) > limit:
        # everything scoring at least the limit-th best, so that ties at the cut sort by id
        keep = values >= _kth(values, limit)
        cand, values = cand[keep], values[keep]
    order = np.lexsort((cand, -values))[:limit]
    return [(int(cand[i]), -float(values[i])) for i in order]
