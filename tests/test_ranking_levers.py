"""Issue 17's ranking levers: coordination, document evidence and keyword feedback (PRF),
through a real engine and index (keyword channel: no embedder needed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conftest import make_config, write
from recalld.config import Value
from recalld.engine import Engine
from recalld.retrieval import doc_evidence
from recalld.retrieval.fts_query import or_terms
from recalld.retrieval.fusion import Fused
from recalld.retrieval.term_stats import TermCounts

FILLER = [f"Note {i} about the weekly garden chores, compost and watering.\n" for i in range(8)]


def engine_with(home: Path, notes: dict[str, str], **values: Value) -> Engine:
    for rel, text in notes.items():
        write(home / "memory" / rel, text)
    engine = Engine(make_config(home, embedding__provider="none", **values), writable=True)
    engine.sync()
    return engine


def ranked(engine: Engine, query: str) -> list[str]:
    res: dict[str, Any] = engine.searcher.search(
        {"query": query, "min_score": 0.0, "max_results": 10}
    )
    root = Path(engine.config.memory_roots()[0])
    return [os.path.relpath(r["path"], root) for r in res["results"]]


COORD_NOTES = {
    # One rare word said many times, against both words once each.
    "repeat.md": "zephyr zephyr zephyr zephyr zephyr zephyr blew over the hill all day\n",
    "both.md": "a zephyr and a quokka met by the hill one day\n",
    **{f"quokka-{i}.md": f"the quokka number {i} sat in the sun\n" for i in range(3)},
    **{f"filler-{i}.md": text for i, text in enumerate(FILLER)},
}


@pytest.mark.parametrize(("weight", "first"), [(0.0, "repeat.md"), (1.0, "both.md")])
def test_coordination_credits_the_chunk_holding_every_term(
    home: Path, weight: float, first: str
) -> None:
    engine = engine_with(home, COORD_NOTES, search__coordination=weight)
    try:
        top = ranked(engine, "zephyr quokka")
        assert top[0] == first
        assert set(top) >= {"repeat.md", "both.md"}  # a signal, not a filter: both still found
    finally:
        engine.close()


def test_explain_shows_the_rare_term_share_each_result_holds(home: Path) -> None:
    engine = engine_with(home, COORD_NOTES)  # coordination is on by default
    try:
        res = engine.searcher.search({"query": "zephyr quokka", "min_score": 0.0, "explain": True})
        shares = {Path(r["path"]).name: r["explain"]["coordination"] for r in res["results"]}
        assert shares["both.md"] == 1.0
        assert 0 < shares["repeat.md"] < 1 and 0 < shares["quokka-0.md"] < 1
    finally:
        engine.close()


@pytest.mark.parametrize("seek_ratio", [0, 1_000_000])
def test_coverage_is_the_same_whether_fts5_streams_or_seeks(
    home: Path, monkeypatch: pytest.MonkeyPatch, seek_ratio: int
) -> None:
    from recalld.retrieval import coordination

    engine = engine_with(home, COORD_NOTES, search__coordination=0.0)
    try:
        with engine.reader() as store:
            weights, dfs = coordination._rare_terms(
                TermCounts(store.conn), ['"zephyr"', '"quokka"']
            )
            ids = [int(r[0]) for r in store.conn.execute("SELECT rowid FROM chunks_fts")]
            streamed = coordination.coverage(store.conn, weights, ids)  # no dfs: streams
            monkeypatch.setattr(coordination, "SEEK_RATIO", seek_ratio)
            chosen = coordination.coverage(store.conn, weights, ids, dfs)
        assert chosen == streamed and sorted(set(streamed.values())) == [
            0.0,
            *sorted({v for v in streamed.values() if 0 < v < 1}),
            1.0,
        ]
    finally:
        engine.close()


def test_or_terms_are_the_quoted_content_terms() -> None:
    assert or_terms("What did the snake_case thing do?") == ['"snake case"', '"thing"']


PRF_NOTES = {
    "class.md": "My pottery class at the clay wheel helps with anxiety a lot.\n",
    "calm.md": "Anxiety fades at the wheel: clay and pottery calm me down.\n",
    "saturday.md": "I spent Saturday glazing pottery and throwing clay on the wheel.\n",
    **{f"filler-{i}.md": text for i, text in enumerate(FILLER)},
}


@pytest.mark.parametrize(("weight", "found"), [(0.0, False), (0.5, True)])
def test_feedback_finds_the_answer_without_the_question_words(
    home: Path, weight: float, found: bool
) -> None:
    engine = engine_with(home, PRF_NOTES, search__prf=weight)
    try:
        top = ranked(engine, "What hobby helps with anxiety?")
        assert top[:2] and set(top[:2]) == {"class.md", "calm.md"}
        assert ("saturday.md" in top) is found
    finally:
        engine.close()


def test_feedback_leaves_identifier_queries_alone(home: Path) -> None:
    engine = engine_with(home, PRF_NOTES, search__prf=0.5)
    try:
        assert "saturday.md" not in ranked(engine, "anxiety")
    finally:
        engine.close()


def test_document_evidence_raises_the_best_chunk_of_a_file_with_several_matches() -> None:
    fused = [
        Fused(1, 0.80, None, 0.80),  # a lucky single chunk
        Fused(2, 0.70, None, 0.70),  # the abstract's best chunk ...
        Fused(3, 0.60, None, 0.60),  # ... and the rest of it
        Fused(4, 0.50, None, 0.50),
        Fused(5, 0.75, None, 0.75),  # a long chat's best chunk, its other match far away
        Fused(6, 0.70, None, 0.70),
    ]
    places = {
        1: ("lucky.md", 1, 5),
        2: ("abstract.md", 1, 1),
        3: ("abstract.md", 3, 3),
        4: ("abstract.md", 3, 3),
        5: ("chat.md", 10, 20),
        6: ("chat.md", 300, 310),
    }
    assert doc_evidence.add_up(fused, places, 0.0)[0] == fused
    out, bonus = doc_evidence.add_up(fused, places, 0.5)
    assert [f.chunk_id for f in out] == [2, 1, 5, 6, 3, 4]
    assert bonus == {2: 0.5}  # bounded: 0.5 x min(0.6 + 0.5, 1); the chat gets nothing
    assert out[0].score == pytest.approx(0.70 + 0.5 * 0.30)
    assert [f.score for f in out[4:]] == [0.60, 0.50]  # the others keep their scores


def test_coordination_leaves_long_queries_to_bm25(home: Path) -> None:
    engine = engine_with(home, COORD_NOTES, search__coordination=1.0)
    try:
        long = "zephyr quokka alpha beta gamma delta epsilon theta iota"  # 9 terms
        assert ranked(engine, long)[0] == "repeat.md"
        assert ranked(engine, "zephyr quokka")[0] == "both.md"
    finally:
        engine.close()
