"""The cost of indexing whole transcripts: ``../shared/bench/transcripts`` from scratch.

    .venv/bin/python bench/transcript_cost.py [--home DIR] [--set KEY=VALUE ...]

One in-process ``Engine.sync()`` of the folder into an empty home (no embedding cache), keyword
and vectors for the embedded kinds with the configured provider (default: the local model).
Prints JSON: wall and CPU seconds (CPU = this process, all threads, plus children), the index
file's size per MB of JSONL, and chunks indexed vs embedded, by kind. ``--home`` keeps the index
(``bench/transcript_needles.py`` can then rebuild from its embedding cache). ``--needles`` then
scores the needle set (built by ``bench/transcript_needles.py``) on that index, same overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recalld.config import Value  # noqa: E402
from recalld.engine import Engine  # noqa: E402
from recalld.surfaces.evaluation import eval_config, parse_overrides  # noqa: E402

CORPUS = (ROOT.parent / "shared" / "bench" / "transcripts").resolve()
HOME = ROOT / "bench" / "out" / "transcript-cost"


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _chunk_counts(index: Path) -> dict[str, Any]:
    conn = sqlite3.connect(index)
    try:
        rows = conn.execute(
            "SELECT kind, count(*), sum(embed), sum(length(text)),"
            " sum(CASE WHEN embed THEN length(text) ELSE 0 END) FROM chunks GROUP BY kind"
        ).fetchall()
    finally:
        conn.close()
    by_kind = {
        k: {"chunks": n, "embedded": e, "chars": c, "embedded_chars": ec} for k, n, e, c, ec in rows
    }
    return {
        "chunks": sum(v["chunks"] for v in by_kind.values()),
        "embedded": sum(v["embedded"] for v in by_kind.values()),
        "by_kind": by_kind,
    }


def measure(home: Path, overrides: dict[str, Value]) -> dict[str, Any]:
    """Index the corpus into a fresh ``home``; the figures as a dict."""
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    jsonl = sum(p.stat().st_size for p in CORPUS.rglob("*.jsonl"))
    engine = Engine(eval_config(CORPUS, home, overrides), writable=True)
    try:
        wall0, cpu0 = time.perf_counter(), _cpu_s()
        engine.sync()
        wall, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
    finally:
        engine.close()
    index = home / "index.sqlite"
    size = sum(p.stat().st_size for p in home.glob("index.sqlite*"))
    return {
        "jsonl_mb": round(jsonl / 1e6, 2),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "index_mb": round(size / 1e6, 2),
        "index_mb_per_jsonl_mb": round(size / jsonl, 3),
        **_chunk_counts(index),
        "overrides": overrides,
    }


def main() -> None:
    """Measure and print the JSON (``--help``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--home", type=Path, default=HOME, help="index home (wiped first)")
    p.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    p.add_argument("--needles", action="store_true", help="then score the needle set (hybrid)")
    args = p.parse_args()
    overrides = parse_overrides(args.set)
    result = measure(args.home, overrides)
    if args.needles:
        result["needles"] = needles(args.home, overrides)
    print(json.dumps(result, indent=1))


def needles(home: Path, overrides: dict[str, Value]) -> dict[str, Any]:
    """hit@1 / hit@10 / MRR@10 of the needle set on the index in ``home`` (hybrid)."""
    from bench.transcript_needles import OUT, summary
    from recalld.surfaces.evaluation import run_eval

    res = run_eval(CORPUS, OUT / "queries.jsonl", OUT / "qrels.tsv", home=home, overrides=overrides)
    return summary(res)


if __name__ == "__main__":
    main()
