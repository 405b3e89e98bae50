"""The leave-one-set-out rule (bench/loo.py) and the ablation's merged result file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import ablation, loo  # noqa: E402


def _row(value: float) -> dict[str, Any]:
    return {m: value for m in ablation.METRICS} | {"queries": 10, "p50_ms": 1.0, "by_tag": {}}


def _results(scores: dict[str, dict[str, float]]) -> dict[str, Any]:
    return {s: {v: _row(x) for v, x in rows.items()} for s, rows in scores.items()}


def test_a_variant_that_wins_only_on_one_set_is_not_the_default() -> None:
    # "+tuned" wins big on a, loses on b and c: chosen when a is in the choice, fails c.
    scores = {
        "a": {"base": 0.50, "+tuned": 0.70},
        "b": {"base": 0.60, "+tuned": 0.597},
        "c": {"base": 0.60, "+tuned": 0.55},
    }
    table = loo.score_table(_results(scores), ["a", "b", "c"], ["base", "+tuned"], None)
    by_set = {f.held_out: f for f in loo.folds(table, ["base", "+tuned"])}
    assert by_set["a"].chosen == "base" and not by_set["a"].passed  # 0.50 vs 0.70 on a
    assert by_set["b"].chosen == "+tuned" and by_set["b"].passed  # 0.003 short: within
    assert by_set["c"].chosen == "+tuned" and not by_set["c"].passed
    assert loo.eligible(table, ["base", "+tuned"]) == []
    assert loo.default(table, ["base", "+tuned"]) == "base"


def test_a_variant_near_the_best_everywhere_is_the_default() -> None:
    scores = {
        "a": {"base": 0.50, "+lever": 0.504},
        "b": {"base": 0.60, "+lever": 0.65},
        "c": {"base": 0.62, "+lever": 0.618},
    }
    table = loo.score_table(_results(scores), ["a", "b", "c"], ["base", "+lever"], None)
    assert loo.eligible(table, ["base", "+lever"]) == ["+lever"]
    assert loo.default(table, ["base", "+lever"]) == "+lever"
    assert all(f.passed for f in loo.folds(table, ["base", "+lever"]))


def test_one_metric_or_the_mean_of_five() -> None:
    results = _results({"a": {"x": 0.5}})
    results["a"]["x"]["hit@1"] = 1.0
    assert loo.score_table(results, ["a"], ["x"], "hit@1")["a"]["x"] == 1.0
    assert loo.score_table(results, ["a"], ["x"], None)["a"]["x"] == pytest.approx(
        (0.5 * 4 + 1.0) / 5
    )


def test_cli_reads_the_cached_json_and_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ablation.json"
    path.write_text(
        json.dumps(_results({"a": {"base": 0.5, "+x": 0.6}, "b": {"base": 0.4, "+x": 0.45}}))
    )
    loo.main(["--results", str(path), "--variants", "base,+x"])
    out = capsys.readouterr().out
    assert "| a | +x | 0.600 | +x 0.600 | 0.000 | yes |" in out
    assert "May be the default (every fold, within 0.005): +x." in out
    assert "Default: +x" in out
    with pytest.raises(SystemExit, match="not measured"):
        loo.main(["--results", str(path), "--variants", "base,+y", "--sets", "a"])


def test_ablation_save_merges_rows_into_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ablation, "OUT", tmp_path)
    monkeypatch.setattr(ablation, "LAST", tmp_path / "ablation.json")
    ablation.save(_results({"a": {"base": 0.5}}))
    merged = ablation.save(_results({"a": {"+x": 0.6}, "b": {"base": 0.4}}))
    assert set(merged["a"]) == {"base", "+x"} and set(merged["b"]) == {"base"}
    on_disk = json.loads((tmp_path / "ablation.json").read_text())
    assert on_disk == merged
    assert "| +x | 0.600 | 0.600 |" in (tmp_path / "ablation.md").read_text()


def test_a_cached_row_is_reused_only_under_the_same_settings() -> None:
    row = _row(0.5) | {"settings": ablation.settings(ablation.VARIANTS["+doc 0.3"]), "limit": 3}
    got = ablation.run(["cranfield"], ["+doc 0.3"], 3, {"cranfield": {"+doc 0.3": row}})
    assert got["cranfield"]["+doc 0.3"] is row
    assert ablation.settings({}) != ablation.settings({"search.coordination": 0.9})
    assert ablation.settings({}) != ablation.settings({"chunking.chat_windows": False})


def test_decisions_table_judges_each_lever_on_the_sets_that_hold_it() -> None:
    rows = {"all (defaults)": 0.70, "-coord": 0.60, "+coord 0.25": 0.69, "+doc 0.3": 0.80}
    results = _results({"a": rows, "b": rows | {"+doc 0.3": 0.50}, "c": {"all (defaults)": 0.1}})
    md = ablation.decisions_markdown(results)
    coord = md.split("**coordination")[1].split("**document")[0]
    assert "| a |" in coord and "| b |" in coord and "| c |" not in coord
    assert "Default: all (defaults)" in coord
    doc = md.split("**document evidence")[1]
    # +doc wins on a by 0.10 and loses on b by 0.20: chosen on a's fold, it fails b's.
    assert "| b | +doc 0.3 | 0.500 | all (defaults) 0.700 | 0.200 | no |" in doc
    assert "Default: all (defaults)" in doc
    assert "front matter" not in md  # no set holds its variants


def test_decisions_name_each_metric_an_alternative_loses_past_the_tolerance() -> None:
    base = {"all (defaults)": 0.70, "+doc 0.3": 0.70}
    results = _results({"a": base, "b": base})
    results["b"]["+doc 0.3"]["hit@1"] = 0.69  # one metric of one set, 0.01 down
    md = ablation.decisions_markdown(results).split("**document evidence")[1]
    assert "- +doc 0.3: b hit@1 -0.010" in md
    results["b"]["+doc 0.3"]["hit@1"] = 0.697  # within the tolerance
    md = ablation.decisions_markdown(results).split("**document evidence")[1]
    assert "- +doc 0.3: no metric loses more" in md
