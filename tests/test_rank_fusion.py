"""Issue 39's rank-aware fusion levers (recalld.retrieval.rank_fusion): the functions on lists
made here, then each lever's setting through a real engine, index and model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conftest import make_engine, write
from recalld.engine import Engine
from recalld.retrieval import rank_fusion
from recalld.retrieval.fusion import Fused


def ids(fused: list[Fused]) -> list[int]:
    return [f.chunk_id for f in fused]


def test_weighted_rrf_scores_rank_one_in_both_as_one_and_follows_the_weights() -> None:
    vector = {1: 0.9, 2: 0.5, 3: 0.4}
    keyword = {3: 1.0, 1: 0.6, 4: 0.2}
    both = rank_fusion.weighted_rrf(vector, keyword, vector_weight=0.5, text_weight=0.5, k=1)
    assert both[0].score <= 1.0 and ids(both)[0] == 1  # first and second beat third and first
    assert rank_fusion.weighted_rrf({5: 0.9}, {5: 1.0}, vector_weight=1, text_weight=3, k=60)[
        0
    ].score == pytest.approx(1.0)
    # The keyword channel's first (3) wins when it weighs more, the vector's (1) when that does.
    assert (
        ids(rank_fusion.weighted_rrf(vector, keyword, vector_weight=0.1, text_weight=0.9, k=1))[0]
        == 3
    )
    assert (
        ids(rank_fusion.weighted_rrf(vector, keyword, vector_weight=0.9, text_weight=0.1, k=1))[0]
        == 1
    )


def test_weighted_rrf_ranks_the_keyword_channel_by_its_mapped_scores() -> None:
    # Dict order is not rank order: coordination's credit may have lifted a later BM25 hit.
    keyword = {7: 0.3, 8: 1.0}
    fused = rank_fusion.weighted_rrf({}, keyword, vector_weight=0.5, text_weight=0.5, k=1)
    assert ids(fused) == [8, 7] and fused[0].score == pytest.approx(1.0)


def test_weighted_rrf_counts_a_chunk_without_a_vector_in_both_channels() -> None:
    vector = {1: 0.8, 2: 0.7}
    keyword = {9: 1.0, 1: 0.5}
    plain = rank_fusion.weighted_rrf(vector, keyword, vector_weight=0.5, text_weight=0.5, k=1)
    policy = rank_fusion.weighted_rrf(
        vector, keyword, vector_weight=0.5, text_weight=0.5, k=1, no_vector={9}
    )
    assert ids(plain)[0] == 1 and ids(policy)[0] == 9
    assert policy[0].score == pytest.approx(1.0)


def test_blend_moves_from_the_weighted_order_to_the_rank_order() -> None:
    weighted = [Fused(1, 0.9, 0.5, 1.0), Fused(2, 0.8, 0.9, 0.1)]
    by_rank = [Fused(2, 1.0, 0.9, 0.1), Fused(1, 0.4, 0.5, 1.0)]
    assert ids(rank_fusion.blend(weighted, by_rank, 0.0)) == [1, 2]
    assert ids(rank_fusion.blend(weighted, by_rank, 1.0)) == [2, 1]
    half = rank_fusion.blend(weighted, by_rank, 0.5)
    assert [round(f.score, 3) for f in half] == [0.9, 0.65]


def test_gap_confidence_raises_the_channel_whose_best_hit_stands_out() -> None:
    clear = {1: 0.9, 2: 0.3, 3: 0.25}
    tied = {4: 1.0, 5: 0.99, 6: 0.2}
    assert rank_fusion.standout(clear) > 0.8 and rank_fusion.standout(tied) < 0.05
    assert rank_fusion.standout({1: 0.9}) == 0.0
    vw, kw = rank_fusion.gap_weights(clear, tied, (0.2, 0.8), 2.0)
    assert vw > 0.2 * 2.5 and kw < 0.8 * 1.1
    assert rank_fusion.gap_weights(clear, tied, (0.2, 0.8), 0.0) == (0.2, 0.8)


def test_coverage_confidence_lowers_the_keyword_channel_when_no_hit_holds_the_query() -> None:
    partial = {1: 0.25, 2: 0.25, 3: 0.5}  # the best keyword hit holds half the rare terms
    whole = {1: 1.0, 2: 0.25}
    assert rank_fusion.coverage_weights((0.2, 0.8), partial, 1.0) == pytest.approx((0.2, 0.4))
    assert rank_fusion.coverage_weights((0.2, 0.8), partial, 0.5) == pytest.approx((0.2, 0.6))
    assert rank_fusion.coverage_weights((0.2, 0.8), whole, 1.0) == (0.2, 0.8)
    assert rank_fusion.coverage_weights((0.2, 0.8), {}, 1.0) == (0.2, 0.8)  # not measured
    assert rank_fusion.coverage_weights((0.2, 0.8), partial, 0.0) == (0.2, 0.8)


def test_guard_lifts_a_channels_best_into_the_slots_in_place_of_the_weakest() -> None:
    # Fused order 1..12; chunk 12 is the vector channel's best, chunk 1 the keyword's.
    fused = [Fused(i, 1.0 - i / 20, 0.3, 1.0 if i == 1 else 0.5 - i / 40) for i in range(1, 12)]
    fused.append(Fused(12, 0.3, 0.95, None))
    vector = {f.chunk_id: f.vector for f in fused if f.vector is not None}
    keyword = {f.chunk_id: f.keyword for f in fused if f.keyword is not None}
    out = rank_fusion.guard(fused, vector, keyword, 1, 10)
    assert ids(out)[:10] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 12]
    assert ids(out)[10:] == [10, 11]  # the displaced one just below, nothing lost
    assert rank_fusion.guard(fused, vector, keyword, 0, 10) == fused
    assert rank_fusion.guard(fused, vector, keyword, 1, 12) == fused  # inside already


def test_guard_never_displaces_a_protected_chunk() -> None:
    fused = [Fused(1, 0.9, 0.9, None), Fused(2, 0.8, None, 1.0), Fused(3, 0.1, 0.95, None)]
    vector = {1: 0.9, 3: 0.95}
    keyword = {2: 1.0}
    # Two slots, three protected chunks (top 2 of the vector channel, top 1 of the keyword's).
    out = rank_fusion.guard(fused, vector, keyword, 2, 2)
    assert ids(out) == [1, 2, 3]  # the slots are full of protected chunks: nothing moves


NOTES = {
    "infra/cluster.md": "# Cluster\n\nWe settled on Kubernetes to schedule and run our services "
    "across the machines.\n",
    **{
        f"misc/platform-{i}.md": f"# Platform note {i}\n\nWhich platform to choose for the "
        f"garden club newsletter {i}: container gardening tips, choice of seeds.\n"
        for i in range(6)
    },
}
QUERY = "which container orchestration platform did we choose"


def top(engine: Engine, mode: str = "hybrid", n: int = 10) -> list[str]:
    res: dict[str, Any] = engine.searcher.search(
        {"query": QUERY, "min_score": 0.0, "max_results": n, "mode": mode}
    )
    root = Path(engine.config.memory_roots()[0])
    return [os.path.relpath(r["path"], root) for r in res["results"]]


@pytest.fixture
def notes_home(home: Path) -> Path:
    for rel, text in NOTES.items():
        write(home / "memory" / rel, text)
    return home


def test_channel_guard_shows_the_vector_channels_best_within_the_slots(
    notes_home: Path, local_embedder: Any
) -> None:
    plain = make_engine(notes_home, local_embedder)
    plain.sync()
    try:
        # The paraphrase shares no word with the query: the vector channel alone ranks it first,
        # and the keyword-heavy fusion of questions leaves it out of two slots.
        assert top(plain, "vector")[0] == "infra/cluster.md"
        assert "infra/cluster.md" not in top(plain, n=2)
    finally:
        plain.close()
    guarded = make_engine(notes_home, local_embedder, search__channel_guard=1)
    try:
        shown = top(guarded, n=2)
        assert "infra/cluster.md" in shown and len(shown) == 2
    finally:
        guarded.close()


@pytest.mark.parametrize(
    ("values", "method"),
    [
        ({"search__fusion": "wrrf"}, "wrrf"),
        ({"search__rrf_blend": 0.5}, "weighted+rrf"),
        ({"search__gap_confidence": 2.0}, "weighted"),
        ({"search__gap_confidence": 1.0}, "weighted"),
        ({"search__coverage_confidence": 1.0, "search__gap_confidence": 0.0}, "weighted"),
    ],
)
def test_each_fusion_lever_runs_through_the_engine_and_says_so(
    notes_home: Path, local_embedder: Any, values: dict[str, Any], method: str
) -> None:
    engine = make_engine(notes_home, local_embedder, **values)
    engine.sync()
    try:
        res = engine.searcher.search({"query": QUERY, "min_score": 0.0, "explain": True})
        assert res["explain"]["fusion"] == method
        assert res["results"] and all(0 <= r["score"] <= 1 for r in res["results"])
        weights = res["explain"]["weights"]
        if values.get("search__gap_confidence"):  # the weights of this query, not the shape's
            shape = res["explain"]["shape_weights"]
            assert (weights["vector"], weights["keyword"]) != (shape["vector"], shape["keyword"])
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("long_words", "method", "vector_weight"), [(4, "weighted+rrf", 0.7), (5, "weighted", 0.2)]
)
def test_long_query_levers_apply_to_long_prose_queries_only(
    notes_home: Path, local_embedder: Any, long_words: int, method: str, vector_weight: float
) -> None:
    # QUERY is a question of four prose words: long from 4 words, not from 5 (then it keeps a
    # question's 0.2 vector weight and plain weighted fusion; it names nothing, so the weight of
    # questions that name nothing is turned off to leave the question's own, and the gap
    # confidence too, which would raise this query's weights past the shape's).
    engine = make_engine(
        notes_home,
        local_embedder,
        search__gap_confidence=0.0,
        search__unnamed_question_vector_weight=0.0,
        search__long_query_blend=1.0,
        search__long_query_vector_weight=0.7,
        search__long_query_words=long_words,
    )
    engine.sync()
    try:
        res = engine.searcher.search({"query": QUERY, "min_score": 0.0, "explain": True})
        assert res["explain"]["fusion"] == method
        assert res["explain"]["weights"]["vector"] == pytest.approx(vector_weight)
        assert res["explain"]["prose_words"] == 4
        assert res["results"] and all(0 <= r["score"] <= 1 for r in res["results"])
    finally:
        engine.close()
