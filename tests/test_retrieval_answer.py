"""Retrieval beyond the anchor (issue 9): what the answer holds: token budgets
(max_tokens), --explain, and candidates all under the score floor announced with how to see
them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, make_engine, write
from recalld.engine import Engine
from recalld.errors import BadRequest
from recalld.retrieval.answer_budget import estimate_tokens, fit_to_budget, refit
from retrieval_support import CODE_NOTES
from retrieval_support import code_engine as code_engine  # a fixture


def test_fit_to_budget_trims_then_drops() -> None:
    results = [
        {"path": f"/m/{i}.md", "citation": f"/m/{i}.md#L1-L9", "snippet": "word " * 140}
        for i in range(6)
    ]
    answer: dict[str, Any] = {
        "results": [dict(r) for r in results],
        "mode": "hybrid",
        "took_ms": 1.0,
    }
    report = fit_to_budget(answer, 400)
    assert report["used_tokens"] <= 400 and estimate_tokens(answer) <= 400
    # The best result stays whole; the others share the rest, each a real snippet.
    best, *rest = answer["results"]
    assert best["snippet"] == "word " * 140 and "truncated" not in best
    assert rest and report["snippets_trimmed"] == len(rest)
    assert all(r["truncated"] and len(r["snippet"]) >= 100 for r in rest)
    assert all(r["snippet"].endswith("…") for r in rest)
    small: dict[str, Any] = {"results": [dict(r) for r in results], "mode": "hybrid"}
    report = fit_to_budget(small, 150)
    assert report["dropped"] > 0 and len(small["results"]) == 6 - report["dropped"]
    roomy: dict[str, Any] = {"results": [dict(r) for r in results], "mode": "hybrid"}
    report = fit_to_budget(roomy, 100_000)
    assert report["snippets_trimmed"] == report["dropped"] == 0
    # A field added after the fit (vectors_pending, shared hits, a longer `degraded`): refit
    # keeps the answer within its budget and reports the earlier cuts with its own.
    answer = {"results": [dict(r) for r in results], "mode": "hybrid"}
    answer["budget"] = first = fit_to_budget(answer, 400)
    answer["took_ms"] = 12.5
    answer["degraded"] = "shared store unavailable: " + "connection refused " * 8
    answer["results"].append({**results[0], "path": "shared:eng/x.md"})
    second = refit(answer)["budget"]
    assert estimate_tokens(answer) <= 400 and second["used_tokens"] <= 400
    assert second["dropped"] >= first["dropped"]
    assert second["snippets_trimmed"] == sum(1 for r in answer["results"] if r.get("truncated"))
    assert refit({"results": []}) == {"results": []}  # no budget asked: left alone


def test_every_budget_holds_the_whole_answer(home: Path, local_embedder: Any) -> None:
    # vectors_pending is added after the search's own fit: the answer is fitted again with it.
    for i in range(6):
        write(home / "memory" / f"r{i}.md", f"# Reset {i}\n\n" + "the router reset again " * 40)
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        for budget in range(300, 900, 11):
            res = eng.searcher.search(
                {"query": "router reset", "min_score": 0, "max_tokens": budget}
            )
            assert len(res["results"]) >= 1 and res["budget"]["used_tokens"] <= budget
            assert estimate_tokens(res) <= budget, (budget, res["budget"])
    finally:
        eng.close()


def test_search_max_tokens_and_explain(code_engine: Engine) -> None:
    # The answer's JSON (paths, scores, index state) takes ~220 tokens with one result.
    res = code_engine.searcher.search({"query": "reset", "min_score": 0, "max_tokens": 300})
    assert res["budget"]["max_tokens"] == 300
    assert res["budget"]["used_tokens"] <= 300
    assert estimate_tokens(res) <= 300  # took_ms had a wider stand-in during the fit
    assert all(len(r["snippet"]) >= 40 for r in res["results"])
    for bad in (50, -1, "many", True):
        with pytest.raises(BadRequest):
            code_engine.searcher.search({"query": "reset", "max_tokens": bad})
    with pytest.raises(BadRequest):
        code_engine.searcher.search({"query": "reset", "explain": "yes"})
    res = code_engine.searcher.search(
        {"query": "connection reset", "explain": True, "min_score": 0}
    )
    e = res["results"][0]["explain"]
    assert set(e) >= {"vector", "keyword", "fused", "final"}
    assert e["keyword"]["rank"] >= 1 and 0 <= e["fused"] <= 1
    assert res["explain"]["fusion"] == "weighted" and res["explain"]["match"]


@pytest.mark.slow
def test_cli_search_explain_and_budget(home: Path) -> None:
    for rel, text in CODE_NOTES.items():
        write(home / "memory" / rel, text)
    env = env_for(home)
    run = [sys.executable, "-m", "recalld.surfaces.cli"]
    subprocess.run([*run, "sync"], env=env, check=True, capture_output=True, timeout=300)
    out = subprocess.run(
        [*run, "search", "ConnReset", "--explain", "--max-tokens", "300", "--min-score", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "explain: vector" in out.stdout and "final" in out.stdout
    assert "query shape identifier (0 prose words)" in out.stdout and "NEAR(" in out.stdout
    assert "budget 300: ~" in out.stderr
    js = subprocess.run(
        [*run, "search", "ConnReset", "--explain", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(js.stdout)
    assert data["explain"]["shape"] == "identifier" and "explain" in data["results"][0]


def test_candidates_all_under_the_floor_are_announced_with_how_to_see_them(
    home: Path, local_embedder: Any
) -> None:
    write(home / "memory" / "infra.md", "# Infra\n\nWe picked Kubernetes for the cluster.\n")
    write(home / "memory" / "food.md", "# Food\n\nTomatoes need sun and water.\n")
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        # Paraphrase with no shared word: candidates from the vector channel, all under 0.95.
        res = eng.searcher.search({"query": "container orchestration choice", "min_score": 0.95})
        assert res["results"] == []
        floor = res["under_floor"]
        assert floor["candidates"] >= 1 and floor["min_score"] == 0.95
        assert 0 < floor["see_with"] <= floor["best_score"] < 0.95
        assert f"min_score {floor['see_with']:g}" in floor["hint"]
        shown = eng.searcher.search(
            {"query": "container orchestration choice", "min_score": floor["see_with"]}
        )
        assert shown["results"] and "under_floor" not in shown
        # The CLI and the MCP tool say the same.
        from recalld.surfaces.cli_output import search_text
        from recalld.surfaces.mcp_server import search_payload

        printed = search_text(res, False)[0]
        assert "no results over the score floor 0.95" in printed
        assert f"--min-score {floor['see_with']:g}" in printed
        assert floor["hint"] in search_payload(res)["note"]
        # Nothing found at all is not "under the floor": no such note.
        none = eng.searcher.search({"query": "zzqx", "mode": "keyword"})
        assert none["results"] == [] and "under_floor" not in none
    finally:
        eng.close()
