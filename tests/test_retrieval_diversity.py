"""Retrieval beyond the anchor (issue 9): collapse (one passage found in several places
comes back once) and MMR (one file does not fill every slot), and how evaluation counts a
collapsed place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import make_engine, write
from recalld.retrieval.diversity import Candidate, collapse, mmr


def test_same_passage_in_a_note_and_a_transcript_comes_back_once(
    home: Path, local_embedder: Any
) -> None:
    passage = (
        "The staging database password rotation runs every Tuesday at 04:00 UTC and the "
        "runbook lives in the ops wiki under rotation."
    )
    write(home / "memory" / "ops.md", f"# Ops\n\n{passage}\n")
    sessions = home / "sessions"
    sessions.mkdir()
    (sessions / "s1.jsonl").write_text(
        json.dumps(
            {
                "type": "user",
                "message": {"role": "user", "content": passage},
                "timestamp": "2026-11-01T10:00:00Z",
                "sessionId": "s1",
            }
        )
        + "\n"
    )
    glob = [str(sessions / "*.jsonl")]
    eng = make_engine(home, local_embedder, sessions__paths=glob)
    raw = make_engine(home, local_embedder, sessions__paths=glob, search__dedupe=False)
    try:
        eng.sync()
        query = {"query": "when does the staging password rotation run", "min_score": 0}
        plain = raw.searcher.search(query)["results"]
        assert {r["source"] for r in plain[:2]} == {"memory", "sessions"}
        res = eng.searcher.search(query)["results"]
        top = res[0]
        assert len(top["also"]) == 1
        places = {top["source"], top["also"][0]["source"]}
        assert places == {"memory", "sessions"}
        assert all(r["path"] != top["also"][0]["path"] for r in res)
    finally:
        eng.close()
        raw.close()


def test_collapse_overlapping_ranges_of_one_file() -> None:
    a = Candidate(1, 0.9, "/m/a.md", 1, 10, "alpha beta gamma")
    b = Candidate(2, 0.8, "/m/a.md", 8, 20, "totally different words")
    c = Candidate(3, 0.7, "/m/a.md", 21, 30, "more text")
    kept = collapse([a, b, c], 0.8, 6)
    assert [k.chunk_id for k in kept] == [1, 3] and kept[0].also == [2]


def test_mmr_keeps_one_file_from_filling_every_slot() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(size=16).astype(np.float32)
    base /= np.linalg.norm(base)
    vecs: dict[int, Any] = {}
    cands = []
    for i in range(5):  # five near-identical chunks of one long file, scored highest
        v = base + 0.01 * rng.normal(size=16).astype(np.float32)
        vecs[i] = v / np.linalg.norm(v)
        cands.append(Candidate(i, 0.95 - i * 0.01, "/m/long.md", i * 10 + 1, i * 10 + 9, "x"))
    other = rng.normal(size=16).astype(np.float32)
    other -= float(np.dot(other, base)) * base  # a different topic: orthogonal to the file's
    vecs[9] = other / np.linalg.norm(other)
    cands.append(Candidate(9, 0.7, "/m/other.md", 1, 5, "y"))

    def lookup(ids: Any) -> dict[int, Any]:
        return {i: vecs[i] for i in ids}

    assert [c.chunk_id for c in mmr(cands, 1.0, lookup, 3)][:3] == [0, 1, 2]
    diverse = [c.chunk_id for c in mmr(cands, 0.5, lookup, 3)][:3]
    assert diverse[0] == 0 and 9 in diverse


@pytest.mark.slow
def test_mmr_through_the_engine(home: Path, local_embedder: Any) -> None:
    long_file = "# Garden log\n\n" + "\n\n".join(
        f"Day {i}: watered the tomatoes and checked the tomato plants for blight."
        for i in range(40)
    )
    write(home / "memory" / "garden.md", long_file)
    write(home / "memory" / "pests.md", "# Pests\n\nTomato blight spreads in wet weather.\n")
    eng = make_engine(home, local_embedder, search__mmr_lambda=0.3)
    try:
        eng.sync()
        res = eng.searcher.search({"query": "tomato blight", "max_results": 3, "min_score": 0})
        assert "pests.md" in {Path(r["path"]).name for r in res["results"]}
    finally:
        eng.close()


def test_eval_counts_collapsed_places_at_the_result_rank() -> None:
    from recalld.surfaces.evaluation import score_query

    hit = {
        "rel": "notes/a.md",
        "start_line": 1,
        "end_line": 5,
        "chars": 100,
        "also": [{"rel": "sessions/s.jsonl", "start_line": 7, "end_line": 7}],
    }
    scores = score_query([hit], [("sessions/s.jsonl", 7)], [1, 10])
    assert scores["hit@1"] == 1.0 and scores["mrr@10"] == 1.0
    scores = score_query([hit], [("sessions/s.jsonl", 8)], [1, 10])
    assert scores["hit@1"] == 0.0
