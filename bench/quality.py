"""Retrieval quality: ``recalld eval`` (run_eval) on every open set, four modes."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cache import VectorCache
from bench.common import OUT, SHARED_BENCH, Sheet, Sizes, log
from bench.corpora import Doc
from recalld.index.store import Store
from recalld.surfaces.evaluation import run_eval

MODES = ("keyword", "vector", "hybrid", "rrf")
METRICS = ("recall@10", "hit@1", "mrr@10", "ndcg@10", "recall@4kc")
QUALITY = OUT / "quality"
LAST = QUALITY / "last.json"
PRIMARY = {
    "locomo": "recall@10",
    "locomo-transcripts": "recall@10",
    "scifact-train": "ndcg@10",
    "tldr": "hit@1",
    "cranfield": "ndcg@10",
    "cisi": "ndcg@10",
    "vault-known-item": "hit@1",
}


def home_of(name: str) -> Path:
    """The persistent eval home of a set (its index and embedding cache survive reruns)."""
    return QUALITY / name


def run_quality(
    sizes: Sizes, sheet: Sheet, cache: VectorCache, pool: Sequence[Doc], meta: dict[str, Any]
) -> None:
    """All sets x modes; results into ``sheet.tables['quality']`` and ``bench/out/quality``."""
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for name in sizes.quality_sets:
        base = SHARED_BENCH / name
        home = home_of(name)
        home.mkdir(parents=True, exist_ok=True)
        # The pool holds this set's chunks as the indexer cuts them now, with real vectors:
        # an index built by an older chunker gets them through its cache, not by embedding.
        with Store(home / "index.sqlite") as store:
            seeded = cache.seed(store, [c.hash for d in pool if d.set == name for c in d.chunks])
        log(f"quality {name}: {seeded} cached embeddings seeded into its home")
        rows[name] = {}
        for mode in MODES:
            t = time.perf_counter()
            res = run_eval(
                base / "corpus",
                base / "queries.jsonl",
                base / "qrels.tsv",
                k=10,
                mode=mode,
                min_score=0.0,
                home=home,
                limit=sizes.quality_limit,
            )
            row = {m: res[m] for m in METRICS}
            row["queries"] = res["queries"]
            row["p50_ms"] = res["latency_ms"]["p50"]
            row["p95_ms"] = res["latency_ms"]["p95"]
            row["chunks"] = res["index"]["chunks"]
            row["embedded"] = res["index"]["chunks_embedded"]
            if "adversarial" in res["by_tag"]:
                row["adversarial"] = {m: res["by_tag"]["adversarial"][m] for m in METRICS}
            if name == "vault-known-item":
                row["by_tag"] = {t: {m: v[m] for m in METRICS} for t, v in res["by_tag"].items()}
            rows[name][mode] = row
            log(
                f"quality {name} {mode}: "
                + ", ".join(f"{m} {row[m]:.3f}" for m in METRICS)
                + f", p50 {row['p50_ms']} ms ({time.perf_counter() - t:.0f} s)"
            )
        cache.harvest(home / "index.sqlite")
    sheet.tables["quality"] = rows
    sheet.tables["quality_meta"] = {
        **meta,
        "limit": sizes.quality_limit,
        "min_score": 0.0,
        "rerank": "none configured",
    }
    if sizes.quality_limit is None:
        LAST.parent.mkdir(parents=True, exist_ok=True)
        LAST.write_text(
            json.dumps({"meta": sheet.tables["quality_meta"], "rows": rows}, indent=1),
            encoding="utf-8",
        )
    quality_metrics(sheet)


def load_last(sheet: Sheet) -> bool:
    """With --skip-quality: the last full quality results (labelled with their own date)."""
    if not LAST.exists():
        return False
    data = json.loads(LAST.read_text())
    sheet.tables["quality"] = data["rows"]
    sheet.tables["quality_meta"] = {**data["meta"], "reused": True}
    quality_metrics(sheet)
    return True


def quality_metrics(sheet: Sheet) -> None:
    """Flat quality keys for the JSON (primary metric of each set and mode)."""
    for name, modes in sheet.tables["quality"].items():
        metric = PRIMARY.get(name, "ndcg@10")
        for mode, row in modes.items():
            sheet.put(f"quality_{name}_{mode}_{metric}", row[metric], 4)
