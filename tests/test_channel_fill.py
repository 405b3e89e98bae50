"""Each channel scores the other's candidates (``search.fill_channels``, issue 39, tenth pass).

The keyword channel's score of a row it did not return is the bm25 its search gives that row
(held postings and FTS5 alike); the vector channel's is the row's exact cosine; a search with
the fill off is the old answer, and ``--explain`` says which scores were filled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import make_engine, write
from recalld.retrieval import channel_fill, keyword_scoring, search_channels
from recalld.surfaces.cli_output import explain_line
from test_keyword_beside import _IDENT_QUERIES
from test_keyword_postings import _IDENT_NOTES, QUERIES, _synced, _terms

WEIGHTS = ((1.0, 1.5, 1.0), (1.0, 3.0, 0.0))


def _all_rows(store: Any, terms: list[keyword_scoring.Term], weights: Any) -> dict[int, float]:
    """FTS5's bm25 of every row the terms match."""
    return dict(
        store.keyword_search(
            keyword_scoring.match_of(terms),
            100_000,
            None,
            None,
            context_weight=weights[1],
            ident_weight=weights[2],
        )
    )


def test_scores_of_rows_equal_their_bm25_in_the_full_search(home: Path) -> None:
    for i, text in enumerate(_IDENT_NOTES * 3):
        write(home / "memory" / f"id{i:02d}.md", text)
    checked = 0
    with _synced(home, 80) as (store, cache):
        top = int(store.conn.execute("SELECT max(id) FROM chunks").fetchone()[0])
        rng = np.random.default_rng(3)
        for q in QUERIES + _IDENT_QUERIES:
            for partial in (True, False):
                terms = _terms(q, partial)
                for weights in WEIGHTS:
                    every = _all_rows(store, terms, weights)
                    ids = np.unique(rng.integers(1, top + 2, size=40)).astype(np.int64)
                    for memo in ({}, None):  # phrases read by the search first, or here
                        phrases: keyword_scoring.PhraseParts = {}
                        if memo is not None:
                            keyword_scoring.search(
                                store.conn, cache, terms, 5, weights, None, phrases
                            )
                        got = keyword_scoring.scores_of(
                            store.conn, cache, terms, weights, ids, phrases
                        )
                        sql = store.keyword_scores_of(
                            keyword_scoring.match_of(terms),
                            [int(i) for i in ids],
                            context_weight=weights[1],
                            ident_weight=weights[2],
                        )
                        want = {int(i): every[int(i)] for i in ids if int(i) in every}
                        assert dict(sql) == pytest.approx(want, rel=1e-9), q
                        if got is None:  # phrases only: FTS5's
                            continue
                        assert [c for c, _ in got] == sorted(want), q  # in the order of ids
                        assert dict(got) == pytest.approx(want, rel=1e-9), q
                        checked += len(want)
    assert checked > 300


def test_fill_appends_each_channels_scores_of_the_others_candidates() -> None:
    vector = [(1, 0.9), (2, 0.8)]
    keyword = [(3, -5.0), (1, -4.0), (4, -1.0)]
    cosines = {3: 0.5, 4: 0.7, 9: 0.1}
    bm25 = {2: -2.0}
    asked: list[list[int]] = []

    def score_vector(ids: Any) -> list[tuple[int, float]]:
        asked.append([int(i) for i in ids])
        return [(int(i), cosines[int(i)]) for i in ids if int(i) in cosines]

    def score_keyword(ids: Any) -> list[tuple[int, float]]:
        asked.append([int(i) for i in ids])
        return [(int(i), bm25[int(i)]) for i in ids if int(i) in bm25]

    filled = channel_fill.fill(vector, keyword, score_vector, score_keyword)
    assert asked == [[3, 4], [2]]  # only the other's candidates, each once
    assert filled.vector == [(1, 0.9), (2, 0.8), (4, 0.7), (3, 0.5)]  # own first, then best
    assert filled.keyword == [(3, -5.0), (1, -4.0), (4, -1.0), (2, -2.0)]
    assert filled.added == (2, 1)
    assert channel_fill.own(filled.vector, 2) == vector  # the filled ones: 3 and 4
    assert channel_fill.own(filled.keyword, 1) == keyword
    # nothing to fill: nothing asked
    asked.clear()
    same = channel_fill.fill(vector, [(1, -3.0)], score_vector, score_keyword)
    assert asked == [[2]] and same.vector == vector and same.added == (0, 1)


def _corpus(home: Path) -> None:
    topics = [
        "The deploy pipeline ships containers to the staging cluster every night.",
        "Kubernetes orchestrates the containers; the scheduler places pods on nodes.",
        "Grandma's lemon cake needs three eggs, sugar and the zest of two lemons.",
        "The retry policy backs off exponentially, starting at two hundred milliseconds.",
        "Our cat sleeps on the radiator all winter and ignores the dog.",
    ]
    for i in range(60):
        write(home / "memory" / f"n{i:02d}.md", f"# Note {i}\n\n{topics[i % 5]} Variant {i}.\n")


def test_search_fills_both_channels_and_explains_it(
    home: Path, local_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _corpus(home)
    seen: dict[str, Any] = {}
    real = search_channels.run_channels

    def spy(*args: Any) -> Any:
        seen["hits"] = hits = real(*args)
        return hits

    monkeypatch.setattr("recalld.retrieval.search.run_channels", spy)
    engine = make_engine(
        home, local_embedder, search__candidate_multiplier=1, search__fill_channels=True
    )
    try:
        engine.sync()
        query = "how do containers reach the cluster at night"
        ans = engine.searcher.search(
            {"query": query, "max_results": 5, "explain": True, "min_score": 0}
        )
        hits = seen["hits"]
        assert hits.filled[0] > 0 and hits.filled[1] > 0
        own_v = {c for c, _ in channel_fill.own(hits.vector, hits.filled[0])}
        own_k = {c for c, _ in channel_fill.own(hits.keyword, hits.filled[1])}
        filled_v = dict(hits.vector[len(hits.vector) - hits.filled[0] :])
        assert set(filled_v) <= own_k - own_v
        # a filled cosine is the row's exact cosine
        qvec = local_embedder.embed([query], query=True)[0]
        index = engine.searcher.vectors()
        assert index is not None
        vecs = index.vectors_of(list(filled_v))
        for cid, cos in filled_v.items():
            assert cos == pytest.approx(float(vecs[cid] @ qvec), abs=1e-5)
        assert ans["explain"]["candidates"] == {"vector": len(own_v), "keyword": len(own_k)}
        # each result's explanation: a score the channel gave only as a fill has no rank
        for r in ans["results"]:
            for name in ("vector", "keyword"):
                ch = r["explain"].get(name)
                if ch is not None and ch["rank"] is None:
                    assert "(unranked)" in explain_line(r["explain"])
        assert engine_search_off(home, local_embedder, query)["filled"] == (0, 0)
    finally:
        engine.close()


def test_explain_line_says_a_filled_score_is_unranked() -> None:
    line = explain_line(
        {
            "vector": {"rank": None, "score": 0.41},
            "keyword": {"rank": 2, "score": 0.9},
            "fused": 0.6,
            "final": 0.6,
        }
    )
    assert line.startswith("vector (unranked) 0.410, keyword #2 0.900, fused 0.600")


def engine_search_off(home: Path, embedder: Any, query: str) -> dict[str, Any]:
    """The same search with the fill off: no filled hits."""
    seen: dict[str, Any] = {}
    real = search_channels.run_channels

    def spy(*args: Any) -> Any:
        seen["hits"] = hits = real(*args)
        return hits

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("recalld.retrieval.search.run_channels", spy)
        engine = make_engine(
            home, embedder, search__candidate_multiplier=1, search__fill_channels=False
        )
        try:
            engine.searcher.search({"query": query, "max_results": 5, "min_score": 0})
        finally:
            engine.close()
    return {"filled": seen["hits"].filled}
