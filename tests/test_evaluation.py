"""``recalld eval``: metric arithmetic by hand, and a run on a tiny corpus."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import env_for, write
from recalld.surfaces.evaluation import score_query


def hit(rel: str, start: int, end: int, chars: int = 100) -> dict[str, object]:
    return {"rel": rel, "start_line": start, "end_line": end, "chars": chars}


def test_metrics_by_hand() -> None:
    hits = [hit("a.md", 1, 5), hit("b.md", 10, 20), hit("a.md", 30, 40), hit("c.md", 1, 1)]
    rels = [("b.md", 12), ("a.md", 35), ("d.md", 0)]
    s = score_query(hits, rels, [1, 5, 10])
    assert s["recall@1"] == 0.0 and s["hit@1"] == 0.0
    assert s["recall@5"] == pytest.approx(2 / 3) and s["hit@5"] == 1.0
    assert s["mrr@10"] == 0.5
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert s["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / ideal)
    whole = score_query([hit("d.md", 3, 4)], rels, [1])
    assert whole["recall@1"] == pytest.approx(1 / 3)  # line 0 = the whole file is relevant
    budget = score_query(
        [hit("x.md", 1, 1, 3900), hit("b.md", 12, 12, 200), hit("a.md", 35, 35, 10)], rels, [10]
    )
    assert budget["recall@4kc"] == pytest.approx(1 / 3)  # the crossing hit counts, later not


@pytest.mark.slow
def test_eval_on_tiny_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "set" / "corpus"
    write(
        corpus / "c1" / "s1.md",
        "# c1\n\nAnna adopted a grey cat named Pixel.\nThe weather was rainy.\n",
    )
    write(corpus / "c1" / "s2.md", "# c1 later\n\nAnna started learning the cello in June.\n")
    write(corpus / "c2" / "s1.md", "# c2\n\nBen moved to Oslo for a job in shipping.\n")
    queries = tmp_path / "set" / "queries.jsonl"
    queries.write_text(
        "\n".join(
            json.dumps(q)
            for q in [
                {
                    "id": "q1",
                    "text": "What pet did Anna get?",
                    "scope": "c1/",
                    "tags": ["single-hop"],
                },
                {
                    "id": "q2",
                    "text": "Which instrument does Anna play?",
                    "scope": "c1/",
                    "tags": ["single-hop"],
                },
                {
                    "id": "q3",
                    "text": "Where did Ben move?",
                    "scope": "c2/",
                    "tags": ["adversarial"],
                },
            ]
        )
        + "\n"
    )
    qrels = tmp_path / "set" / "qrels.tsv"
    qrels.write_text("q1\tc1/s1.md\t3\t1\nq2\tc1/s2.md\t3\t1\nq3\tc2/s1.md\t0\t1\n")
    home = tmp_path / "home"
    cmd = [
        sys.executable,
        "-m",
        "recalld.surfaces.cli",
        "eval",
        "--corpus",
        str(corpus),
        "--queries",
        str(queries),
        "--qrels",
        str(qrels),
        "--home",
        str(home),
        "--json",
    ]
    proc = subprocess.run(cmd, env=env_for(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    for key in (
        "mode",
        "queries",
        "recall@1",
        "recall@5",
        "recall@10",
        "hit@1",
        "hit@5",
        "hit@10",
        "mrr@10",
        "ndcg@10",
        "by_tag",
        "latency_ms",
    ):
        assert key in res
    assert res["queries"] == 2  # adversarial reported apart
    assert res["hit@1"] == 1.0 and res["by_tag"]["adversarial"]["hit@1"] == 1.0
    assert set(res["latency_ms"]) == {"p50", "p95"}
    # By default the floor `search` applies, and the same queries at floor 0 beside it.
    assert res["min_score"] == 0.35
    assert res["compare"]["min_score"] == 0.0 and res["compare"]["queries"] == 2
    assert res["compare"]["hit@10"] >= res["hit@10"]
    table = subprocess.run(
        [*cmd[:-1], "--limit", "2"], env=env_for(tmp_path), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert "| all, min_score 0 | 2 |" in table.stdout, table.stdout + table.stderr
    assert "scored at min_score 0.35 (search's floor)" in table.stdout
    again = subprocess.run(
        [*cmd[:-1], "--mode", "keyword", "--k", "3", "--min-score", "0.2", "--json"],
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    second = json.loads(again.stdout)
    assert second["index"]["chunks_embedded"] == 0  # the kept index and cache are reused
    assert "compare" not in second and second["min_score"] == 0.2  # the floor asked for only
    assert "recall@3" in second and second["mode"] == "keyword"


def _claude_line(role: str, text: str) -> str:
    return json.dumps({"type": role, "message": {"role": role, "content": text}})


def test_eval_judges_each_file_notes_and_transcripts_together(tmp_path: Path) -> None:
    """A README beside transcripts (listed first by the walk) no longer drops every JSONL."""
    from recalld.surfaces.evaluation import corpus_kinds, run_eval

    corpus = tmp_path / "set" / "corpus"
    write(corpus / "README.md", "# Sessions\n\nTwo agent sessions about the nightly build.\n")
    write(
        corpus / "s" / "one.jsonl",
        _claude_line("user", "The deploy failed with error E4012 in the billing service.")
        + "\n"
        + _claude_line("assistant", "I restarted the billing worker and it recovered.")
        + "\n",
    )
    write(
        corpus / "s" / "two.jsonl",
        _claude_line("user", "Please rename the payments table to ledger_entries.") + "\n",
    )
    assert corpus_kinds(corpus) == (True, True)
    assert corpus_kinds(corpus / "s") == (False, True)
    queries = tmp_path / "set" / "queries.jsonl"
    queries.write_text(
        "\n".join(
            json.dumps({"id": q, "text": text})
            for q, text in [
                ("q1", "error E4012 billing"),
                ("q2", "rename payments table"),
                ("q3", "nightly build sessions"),
            ]
        )
        + "\n"
    )
    qrels = tmp_path / "set" / "qrels.tsv"
    qrels.write_text("q1\ts/one.jsonl\t1\nq2\ts/two.jsonl\t1\nq3\tREADME.md\t0\n")
    res = run_eval(
        corpus,
        queries,
        qrels,
        mode="keyword",
        home=tmp_path / "home",
        overrides={"embedding.provider": "none"},
    )
    assert res["index"]["files"] == 3  # the README as a note, both JSONL files as transcripts
    assert res["queries"] == 3 and res["hit@1"] == 1.0, res


def _readme_block(heading: str) -> str:
    """The first ``sh`` code block under a README heading."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split(f"\n{heading}\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("\n```", 1)[0]


@pytest.mark.timeout(300)
def test_readme_eval_example_runs_on_a_users_notes(tmp_path: Path) -> None:
    """The README's "Evaluate on your own notes" commands, as written, on a home of notes."""
    block = _readme_block("### Evaluate on your own notes")
    user = tmp_path / "user"
    notes = user / ".local" / "share" / "recalld" / "memory"  # the README's NOTES
    write(
        notes / "projects" / "billing.md",
        "# Billing\n\nWe picked Postgres for billing: row locks and mature tooling.\n"
        "The invoices service talks to it through pgbouncer.\n",
    )
    write(notes / "team.md", "# Team\n\nDana runs the release checklist every Friday.\n")
    write(notes / "garden.md", "# Garden\n\nTomatoes need watering twice a week in July.\n")
    env = {
        k: v
        for k, v in env_for(tmp_path).items()
        if k not in ("RECALLD_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME")
    }
    env["HOME"] = str(user)
    env["TMPDIR"] = str(tmp_path)  # where the example's mktemp -d makes its scratch folder
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-e", "-c", block], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| group")
    }
    assert set(rows) == {"all", "decisions", "people", "all, min_score 0"}, proc.stdout
    assert rows["all"][0] == "2"  # queries
    assert rows["all"][4] == "1.000", proc.stdout  # hit@1: both answers ranked first
    assert (user / ".local" / "share" / "recalld" / "eval").is_dir()  # its own index
    assert not (user / ".local" / "share" / "recalld" / "index.sqlite").exists()
