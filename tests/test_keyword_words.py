"""The keyword channel's pruned top rows are the full sum's (keyword_words.py).

Synthetic postings at a scale where the pruning runs (a common word of tens of thousands of
rows beside rare ones), compared with every part summed over every row; then the real index's
answers with pruning forced on small data, compared with FTS5's own bm25 ranking.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld.index import fts_postings
from recalld.retrieval import keyword_words
from recalld.retrieval.keyword_postings import Snapshot
from recalld.retrieval.keyword_words import WordPart, top_rows, word_part

ROWS = 200_000


def _snapshot(rng: np.random.Generator, sizes: dict[str, int], equal_lengths: bool) -> Snapshot:
    postings = {}
    for token, n in sizes.items():
        ids = np.sort(rng.choice(ROWS, size=n, replace=False)).astype(np.int64)
        counts = rng.integers(0, 4, size=(n, 3)).astype(np.uint16)
        counts[:, 0] += 1  # at least one instance in the text column
        if n > 10_000:  # some rows all but made of a common word: near its bound
            counts[rng.random(n) < 0.01, 0] = 200
        postings[token] = fts_postings.Postings(*fts_postings.compact(ids, counts))
    if equal_lengths:
        lengths = np.full(ROWS, 40.0)  # many exact ties
    else:
        lengths = rng.integers(5, 400, size=ROWS).astype(np.float64)
    return Snapshot(postings, lengths, ROWS, float(lengths.mean()))


def _full(snap: Snapshot, parts: list[WordPart], phrases: Any, limit: int, allowed: Any) -> Any:
    """Every part over every row, then FTS5's order: best first, ties by id."""
    size = max([ROWS] + [int(ids.max()) + 1 for ids, _ in phrases or ()])
    scores = np.zeros(size, dtype=np.float64)
    matched = np.zeros(size, dtype=bool)
    for p in parts:
        scores[p.ids] += p.scores(snap)
        matched[p.ids] = True
    for ids, values in phrases or ():
        scores[ids] += values
        matched[ids] = True
    if allowed is not None:
        keep = np.zeros(size, dtype=bool)
        keep[allowed[allowed < size]] = True
        matched &= keep
    cand = np.flatnonzero(matched)
    order = np.lexsort((cand, -scores[cand]))[:limit]
    return [(int(cand[i]), -float(scores[cand[i]])) for i in order]


class _Late:
    """FTS5's parts handed over when asked (as a read on another thread would be)."""

    def __init__(self, phrases: list[tuple[Any, Any]]) -> None:
        self.phrases = phrases
        self.asked = 0

    def __call__(self) -> list[tuple[Any, Any]]:
        self.asked += 1
        return self.phrases


def _phrase(rng: np.random.Generator, n: int, rows: int) -> tuple[Any, Any]:
    """A phrase's rows (distinct, some beyond ``ROWS`` when ``rows`` is larger) and parts."""
    ids = np.sort(rng.choice(rows, size=n, replace=False)).astype(np.int64)
    return ids, rng.uniform(0.5, 30.0, size=n)


def _spy_pruning(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the words each pruned search added only at its candidates."""
    looked: list[int] = []
    real = keyword_words._top_of_candidates

    def spy(snap: Snapshot, board: Any, rest: list[WordPart], limit: int, phrases: Any) -> Any:
        looked.extend(len(p.ids) for p in rest)
        return real(snap, board, rest, limit, phrases)

    monkeypatch.setattr(keyword_words, "_top_of_candidates", spy)
    return looked


def _same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [c for c, _ in got] == [c for c, _ in want]
    for (_, g), (_, w) in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_pruned_top_rows_are_the_full_sums(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    # the rare words' best parts are close to what the common ones can add up to: the cut is
    # decided by the bound, not by a wide margin
    sizes = {"common": 60_000, "also": 50_000, "often": 25_000, "middling": 4_000, "rare": 900}
    snap = _snapshot(rng, sizes, equal_lengths=seed % 2 == 0)
    weights = (1.0, 1.5, 1.0)
    looked = _spy_pruning(monkeypatch)
    for limit in (1, 24, 500, 2_000, 8_000, 20_000):
        for restricted in (False, True):
            parts = [word_part(snap, t, restricted and t == "rare", weights) for t in sizes]
            phrases = None
            if seed % 3 != 2:  # FTS5's parts of phrases: rows of their own, no bound
                phrases = [_phrase(rng, 50, ROWS), _phrase(rng, 400, ROWS)]
                if seed % 3 == 1:  # rows written after the lengths were read
                    phrases.append(_phrase(rng, 5, ROWS + 40))
            allowed = None
            if limit == 24:
                allowed = np.sort(rng.choice(ROWS + 40, size=ROWS // 2, replace=False))
            want = _full(snap, parts, phrases, limit, allowed)
            late = None if phrases is None else _Late(phrases)
            _same(top_rows(snap, parts, late, limit, allowed), want)
            assert late is None or late.asked == 1  # read once, when the words need it
    assert looked and max(looked) >= 25_000  # the common words were gathered, not scattered


def test_a_query_of_common_words_only_is_summed_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    sizes = {"the": 90_000, "said": 70_000, "time": 50_000}
    snap = _snapshot(rng, sizes, equal_lengths=False)
    parts = [word_part(snap, t, False, (1.0, 1.5, 1.0)) for t in sizes]
    _same(top_rows(snap, parts, None, 24, None), _full(snap, parts, None, 24, None))
    # An empty word or no limit: nothing to rank, nothing raised.
    empty = WordPart(np.zeros(0, np.int64), np.zeros((0, 3), np.uint8), np.ones(3), 1.0)
    assert top_rows(snap, [empty], None, 24, None) == []
    assert top_rows(snap, parts, None, 0, None) == []


def test_pruning_forced_on_a_real_index_matches_fts5(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every query of the FTS5-equality test again, with pruning tried at any size."""
    import test_keyword_postings as kp

    monkeypatch.setattr(keyword_words, "MIN_PRUNED_ROWS", 0)
    looked = _spy_pruning(monkeypatch)
    with kp._synced(home, 160) as (store, cache):
        assert kp._check_all(store, cache) > 200
    assert looked  # some searches were pruned


def test_rows_of_common_words_only_keep_their_place_at_the_cut() -> None:
    """The rows holding only the common words lead the rare word's rows by a hair: the bound
    is what keeps them, so a cut read too high (or a bound too low) loses them."""
    rows = np.arange(ROWS, dtype=np.int64)
    both = rows[:30_000]  # every row here holds both common words
    rare = rows[100_000:102_000]

    def snapshot(rare_len: float) -> Snapshot:
        lengths = np.full(ROWS, 100.0)
        lengths[:100] = 5.0  # short rows made of the common words: near their bounds
        lengths[rare] = rare_len
        lengths[rare[:10]] = 5.0
        common = np.ones((len(both), 3), dtype=np.uint16) * [1, 0, 0]
        common[:100, 0] = 200
        once = np.ones((len(rare), 3), dtype=np.uint16) * [1, 0, 0]
        once[:10, 0] = 200  # fewer than the limit: they lift the best score, not the cut
        postings = {
            "c1": fts_postings.Postings(*fts_postings.compact(both, common)),
            "c2": fts_postings.Postings(*fts_postings.compact(both, common.copy())),
            "r": fts_postings.Postings(*fts_postings.compact(rare, once)),
        }
        return Snapshot(postings, lengths, ROWS, float(lengths.mean()))

    weights = (1.0, 1.5, 1.0)
    for rare_len in np.arange(2.0, 60.0, 0.1):  # the rare word's part just under the bounds
        snap = snapshot(float(rare_len))
        parts = [word_part(snap, t, False, weights) for t in ("c1", "c2", "r")]
        short = float(parts[0].scores(snap)[0] + parts[1].scores(snap)[0])  # just under bounds
        plain = float(parts[2].scores(snap)[20])
        if short - 0.1 < plain < short:
            break
    else:
        raise AssertionError("no length puts the rare word's part under the bounds")
    got = top_rows(snap, parts, None, 24, None)
    _same(got, _full(snap, parts, None, 24, None))
    assert sum(1 for cid, _ in got if cid < 100) == 14  # the common words' short rows
