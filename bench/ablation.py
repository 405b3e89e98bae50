"""Retrieval ablation: the anchor pipeline, each issue-9 addition on its own, and all together.

    .venv/bin/python bench/ablation.py [--sets locomo,tldr] [--variants anchor,all] [--limit N]
    .venv/bin/python bench/ablation.py --reuse ...   # skip (set, variant) pairs already measured

Runs ``recalld eval`` (min score 0, k 10) against the persistent quality homes of ``make bench``
(bench/out/quality/<set>; built on first use) with config overrides per variant. Results are
merged into bench/out/ablation.json (one row per set and variant, with the overrides it ran
with), so that variants added later are measured alone and ``bench/loo.py`` reads them all; a
Markdown table goes to bench/out/ablation.md for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loo import LAST, METRICS, TOLERANCE, score_table  # noqa: E402
from bench.loo import markdown as loo_markdown  # noqa: E402
from bench.partial_ids import transcript_overrides  # noqa: E402
from recalld.config import Config, Value  # noqa: E402
from recalld.surfaces.evaluation import parse_overrides, run_eval  # noqa: E402

SHARED = ROOT.parent / "shared" / "bench"
OUT = ROOT / "bench" / "out"

#: Every addition off: the session-1 pipeline (min-max 0.2/0.8, title column 1.5).
OFF: dict[str, Value] = {
    "search.coordination": 0.0,
    "search.doc_evidence": 0.0,
    "search.prf": 0.0,
    "search.query_shape": False,
    "search.partial_identifiers": False,
    "search.dedupe": False,
    "search.group_short_docs": False,
    "search.long_query_vector_weight": 0.0,
    "search.mmr_lambda": 1.0,
    "search.recency_half_life_days": 0.0,
    "search.note_units": 0.0,
    "search.unnamed_question_vector_weight": 0.0,
    "search.gap_confidence": 0.0,
    "search.fill_channels": False,
}
VARIANTS: dict[str, dict[str, Value]] = {
    # OpenClaw's fusion: raw scores, 0.7 vector / 0.3 keyword, no title weighting.
    "anchor": {
        **OFF,
        "search.score_norm": "none",
        "search.vector_weight": 0.7,
        "search.text_weight": 0.3,
        "search.context_weight": 1.0,
    },
    "baseline": OFF,
    "+shape": {**OFF, "search.query_shape": True},
    "+partial": {**OFF, "search.partial_identifiers": True},
    "+dedupe": {**OFF, "search.dedupe": True},
    "+mmr 0.7": {**OFF, "search.mmr_lambda": 0.7},
    "+recency 30d": {**OFF, "search.recency_half_life_days": 30.0},
    "all (defaults)": {},
    "all + mmr + recency": {"search.mmr_lambda": 0.7, "search.recency_half_life_days": 30.0},
}
#: Issue 39's rank-aware fusion levers (recalld.retrieval.rank_fusion), each against the defaults.
FUSION: dict[str, dict[str, Value]] = {
    "rrf k60": {"search.fusion": "rrf"},
    "rrf k20": {"search.fusion": "rrf", "search.rrf_k": 20},
    "wrrf k60": {"search.fusion": "wrrf"},
    "wrrf k20": {"search.fusion": "wrrf", "search.rrf_k": 20},
    "+blend 0.3": {"search.rrf_blend": 0.3},
    "+blend 0.5": {"search.rrf_blend": 0.5},
    # On since session 34 (1.0): the fold table chose it in two full runs running.
    "-gap": {"search.gap_confidence": 0.0},
    # Issue 39, tenth pass: each channel scores the other's candidates (channel_fill), off.
    "+fill": {"search.fill_channels": True},
    "+gap 3": {"search.gap_confidence": 3.0},
    "+cov 0.5": {"search.coverage_confidence": 0.5},
    "+cov 1": {"search.coverage_confidence": 1.0},
    "+guard 1": {"search.channel_guard": 1},
    "+guard 2": {"search.channel_guard": 2},
    # Issue 39's fusion by query shape (query_shape.is_long_prose): long prose queries of 9 prose
    # words or more get a vector weight of their own (0.5, on); the RRF blend for them is off.
    "-long vw": {"search.long_query_vector_weight": 0.0},
    "+long vw 0.7": {"search.long_query_vector_weight": 0.7},
    "+long w12": {"search.long_query_words": 12},
    "+long rrf": {"search.long_query_blend": 1.0},
    "+long blend 0.5": {"search.long_query_blend": 0.5},
    "+unnamed rrf": {"search.unnamed_question_blend": 1.0},
    "+unnamed blend 0.5": {"search.unnamed_question_blend": 0.5},
    # Issue 39, fourth pass: a short note's chunks move s of the way to the note's best in each
    # channel (note_units, 0.75 since session 28); a question that names nothing weighed more like
    # a statement (0.5 since session 28). Fifth pass: "names" read from the index too
    # (query_shape.index_names), so a name typed in lower case still names.
    "-note units": {"search.note_units": 0.0},
    "+note units 1": {"search.note_units": 1.0},
    "+note units 0.5": {"search.note_units": 0.5},
    "-unnamed q": {"search.unnamed_question_vector_weight": 0.0},
    "+unnamed q 0.7": {"search.unnamed_question_vector_weight": 0.7},
}
#: Fusion variants measured once on the sets they could win (docs/DECISIONS.md) and not in
#: every `make bench`: each lever keeps one or two values there (~90 s a variant over all sets).
FUSION_ONCE = (
    "wrrf k20",
    "+blend 0.5",
    "+gap 3",
    "+guard 1",
    "+long vw 0.7",
    "+long blend 0.5",
    "+note units 0.5",
    "+note units 1",
    "+unnamed q 0.7",
    "+unnamed rrf",
    "+unnamed blend 0.5",
)
#: Issue 17's levers, each alone against the defaults (``bench/loo.py`` judges them). Those that
#: change chunking run last in each set: the home is rebuilt for them (cached vectors reused).
LEVERS: dict[str, dict[str, Value]] = {
    "-coord": {"search.coordination": 0.0},
    "+coord 0.25": {"search.coordination": 0.25},
    "+doc 0.3": {"search.doc_evidence": 0.3},
    "+prf 0.5": {"search.prf": 0.5},
    "-group short docs": {"search.group_short_docs": False},
    **FUSION,  # search-time only: before the levers that rebuild the home
    "-front matter": {"chunking.front_matter": False},
    "-chat windows": {"chunking.chat_windows": False, "search.chat_focus": False},
    "-message overlap": {"chunking.message_window_overlap": 0.0},
}
#: One leave-one-set-out decision per lever: the default first, then its alternatives.
DECISIONS: dict[str, tuple[str, ...]] = {
    "coordination (`search.coordination` 0.5)": ("all (defaults)", "-coord", "+coord 0.25"),
    "document evidence (`search.doc_evidence` off)": ("all (defaults)", "+doc 0.3"),
    "pseudo-relevance feedback (`search.prf` off)": ("all (defaults)", "+prf 0.5"),
    "one slot per short note (`search.group_short_docs` on)": (
        "all (defaults)",
        "-group short docs",
    ),
    "front matter names (`chunking.front_matter` on)": ("all (defaults)", "-front matter"),
    "conversation windows (`chunking.chat_windows`, `search.chat_focus` on)": (
        "all (defaults)",
        "-chat windows",
    ),
    "message overlap (`chunking.message_window_overlap` 0.5)": (
        "all (defaults)",
        "-message overlap",
    ),
    "RRF inside hybrid (`search.fusion` weighted)": (
        "all (defaults)",
        "rrf k60",
        "rrf k20",
        "wrrf k60",
    ),
    "weighted and RRF blended (`search.rrf_blend` off)": ("all (defaults)", "+blend 0.3"),
    "score-gap confidence (`search.gap_confidence` 1)": ("all (defaults)", "-gap"),
    "channel guard (`search.channel_guard` off)": ("all (defaults)", "+guard 2"),
    "keyword coverage confidence (`search.coverage_confidence` off)": (
        "all (defaults)",
        "+cov 0.5",
        "+cov 1",
    ),
    "vector weight for long prose queries (`search.long_query_vector_weight` 0.5, 9 words)": (
        "all (defaults)",
        "-long vw",
        "+long w12",
    ),
    "RRF blend for long prose queries (`search.long_query_blend` off)": (
        "all (defaults)",
        "+long rrf",
    ),
    "a short note as one unit (`search.note_units` 0.75)": ("all (defaults)", "-note units"),
    "vector weight for questions that name nothing (`search.unnamed_question_vector_weight` 0.5)": (
        "all (defaults)",
        "-unnamed q",
    ),
}
VARIANTS.update(LEVERS)
#: Every open set of ../shared/bench, then the derived partial-identifier set.
SETS = (
    "locomo",
    "scifact-train",
    "tldr",
    "cranfield",
    "cisi",
    "vault-known-item",
    "locomo-transcripts",
    "partial-ids",
)
#: Sets whose per-tag rows the Markdown shows.
TAGGED = ("locomo", "locomo-transcripts", "vault-known-item")
#: What `make bench` runs: every variant (the levers last) but the fusion values measured once.
STANDARD = tuple(v for v in VARIANTS if v not in FUSION_ONCE)


def set_files(name: str) -> tuple[Path, Path, Path, dict[str, Value]]:
    """Corpus, queries, qrels and extra overrides of a set."""
    if name == "partial-ids":
        base = OUT / "partial-ids"
        if not (base / "queries.jsonl").exists():
            raise SystemExit("run `.venv/bin/python bench/partial_ids.py` first")
        corpus = SHARED / "transcripts"
        home = OUT / "quality" / name
        return (
            corpus,
            base / "queries.jsonl",
            base / "qrels.tsv",
            transcript_overrides(corpus, home),
        )
    base = SHARED / name
    return base / "corpus", base / "queries.jsonl", base / "qrels.tsv", {}


def settings(overrides: dict[str, Value]) -> dict[str, Value]:
    """The ``search.*`` and ``chunking.*`` settings a variant runs with (overrides on defaults).

    Stored with each row, so that a cached row is reused only while the defaults under it are
    unchanged (a lever turned on by default changes ``all (defaults)``).
    """
    values = Config(overrides).as_dict()
    return {k: v for k, v in sorted(values.items()) if k.startswith(("search.", "chunking."))}


def run(
    sets: list[str], variants: list[str], limit: int | None, reuse: dict[str, Any] | None = None
) -> dict[str, Any]:
    """All (set, variant) evals; results keyed by set then variant.

    With ``reuse`` (an earlier result), a pair measured there with the same overrides and query
    limit is taken as it is instead of being run again.
    """
    results: dict[str, Any] = {}
    for name in sets:
        corpus, queries, qrels, extra = set_files(name)
        results[name] = {}
        for variant in variants:
            old = (reuse or {}).get(name, {}).get(variant)
            same = old and old.get("settings") == settings(VARIANTS[variant])
            if same and old.get("limit") == limit:
                results[name][variant] = old
                continue
            t = time.perf_counter()
            res = run_eval(
                corpus,
                queries,
                qrels,
                k=10,
                mode="hybrid",
                min_score=0.0,
                home=OUT / "quality" / name,
                overrides={**extra, **VARIANTS[variant]},
                limit=limit,
            )
            row: dict[str, Any] = {m: res[m] for m in METRICS}
            row["p50_ms"] = res["latency_ms"]["p50"]
            row["queries"] = res["queries"]
            row["by_tag"] = {tag: {m: v[m] for m in METRICS} for tag, v in res["by_tag"].items()}
            row["overrides"] = VARIANTS[variant]
            row["settings"] = settings(VARIANTS[variant])
            row["limit"] = limit
            results[name][variant] = row
            print(
                f"{name:14} {variant:22} "
                + " ".join(f"{m} {row[m]:.3f}" for m in METRICS)
                + f" p50 {row['p50_ms']} ms ({time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    return results


def run_all(limit: int | None = None) -> dict[str, Any]:
    """Every set x the standard variants: the ablation part of ``make bench``."""
    if not (OUT / "partial-ids" / "queries.jsonl").exists():
        from bench import partial_ids

        partial_ids.main()
    results = run(list(SETS), list(STANDARD), limit)
    save(results)
    return results


def save(results: dict[str, Any]) -> dict[str, Any]:
    """Merge ``results`` into bench/out/ablation.json (new rows win); rewrite ablation.md."""
    OUT.mkdir(parents=True, exist_ok=True)
    merged = load_last() or {}
    for name, rows in results.items():
        merged.setdefault(name, {}).update(rows)
    LAST.write_text(json.dumps(merged, indent=1), encoding="utf-8")
    (OUT / "ablation.md").write_text(markdown(merged), encoding="utf-8")
    return merged


def load_last() -> dict[str, Any] | None:
    """The last saved ablation (``make bench --skip-quality`` shows it again)."""
    if not LAST.exists():
        return None
    data: dict[str, Any] = json.loads(LAST.read_text(encoding="utf-8"))
    return data


def decisions_markdown(results: dict[str, Any]) -> str:
    """The leave-one-set-out rule (``bench/loo.py``) for each lever of ``DECISIONS``."""

    out: list[str] = []
    for label, variants in DECISIONS.items():
        sets = [s for s, rows in results.items() if all(v in rows for v in variants)]
        if not sets:
            continue
        table = score_table(results, sets, variants, None)
        out.append(f"\n**{label}**\n")
        out.append(loo_markdown(table, variants, "mean of " + ", ".join(METRICS)))
        out.append(metric_losses(results, sets, variants))
    return "\n".join(out)


def metric_losses(results: dict[str, Any], sets: list[str], variants: tuple[str, ...]) -> str:
    """The second rule: each alternative's metrics that fall more than ``TOLERANCE`` below the
    incumbent on some set (a lever that passes on the mean may not cost any one metric that)."""
    lines = []
    for v in variants[1:]:
        worse = [
            f"{name} {m} {results[name][v][m] - results[name][variants[0]][m]:+.3f}"
            for name in sets
            for m in METRICS
            if results[name][v][m] < results[name][variants[0]][m] - TOLERANCE - 1e-12
        ]
        lines.append(f"- {v}: " + (", ".join(worse) if worse else "no metric loses more"))
    return f"Losses past {TOLERANCE} on one metric (any blocks a default):\n\n" + "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    """One table per set (locomo also per tag)."""
    out: list[str] = []
    for name, rows in results.items():
        out.append(f"\n**{name}** ({next(iter(rows.values()))['queries']} queries)\n")
        out.append("| variant | recall@10 | recall@4kc | hit@1 | MRR@10 | nDCG@10 | p50 ms |")
        out.append("|---|---|---|---|---|---|---|")
        for variant, row in rows.items():
            out.append(
                f"| {variant} | "
                + " | ".join(f"{row[m]:.3f}" for m in METRICS)
                + f" | {row['p50_ms']} |"
            )
        if name in TAGGED:
            tags = sorted(next(iter(rows.values()))["by_tag"])
            out.append(
                f"\n{name} per tag, recall@10 / hit@1 (adversarial is not in the overall):\n"
            )
            out.append("| variant | " + " | ".join(tags) + " |")
            out.append("|---|" + "---|" * len(tags))
            for variant, row in rows.items():
                tagged = row["by_tag"]
                cells = [
                    f"{tagged[t]['recall@10']:.3f} / {tagged[t]['hit@1']:.3f}"
                    if t in tagged
                    else "-"
                    for t in tags
                ]
                out.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--limit", type=int, default=None, help="first N queries of each set")
    p.add_argument(
        "--custom",
        action="append",
        default=[],
        metavar="LABEL|KEY=VALUE|...",
        help="an extra variant: defaults plus these overrides (repeatable)",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="take pairs already in bench/out/ablation.json (same overrides and limit) as they are",
    )
    args = p.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    for spec in args.custom:
        label, *pairs = spec.split("|")
        VARIANTS[label] = parse_overrides(pairs)
        variants.append(label)
    unknown = [v for v in variants if v not in VARIANTS] + [s for s in sets if s not in SETS]
    if unknown:
        raise SystemExit(f"unknown: {unknown}; variants {list(VARIANTS)}, sets {list(SETS)}")
    results = run(sets, variants, args.limit, load_last() if args.reuse else None)
    save(results)
    print(markdown(results))


if __name__ == "__main__":
    main()
