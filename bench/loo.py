"""The leave-one-set-out rule of issue 17 over the cached ablation (bench/out/ablation.json).

    .venv/bin/python bench/loo.py [--variants a,b,c] [--sets ...] [--metric ndcg@10]

A set's score of a variant is the mean of the five metrics (recall@10, recall@4kc, hit@1, MRR@10,
nDCG@10), or one ``--metric``. For each set left out, the variant with the best mean score over
the *other* sets is chosen; it passes that fold when, on the left-out set, it is the best or
within ``TOLERANCE`` of the best. A variant may be the default only when it is chosen (or within
``TOLERANCE`` of the choice) in every fold and passes every fold; the incumbent (listed first)
stays the default unless it fails and another passes. Compare the values of one lever at a
time (``--variants baseline,+coord``): the rule judges a setting against its alternatives, not
against unrelated ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The five metrics of every set, as `recalld eval --json` names them.
METRICS = ("recall@10", "recall@4kc", "hit@1", "mrr@10", "ndcg@10")
#: What bench/ablation.py writes and this analysis reads by default.
LAST = ROOT / "bench" / "out" / "ablation.json"

TOLERANCE = 0.005
Table = Mapping[str, Mapping[str, float]]  # set -> variant -> score


@dataclass(frozen=True)
class Fold:
    """One left-out set: what the other sets chose and how it does on the left-out one."""

    held_out: str
    chosen: str
    chosen_score: float  # on the held-out set
    best: str  # the best variant on the held-out set
    best_score: float

    @property
    def gap(self) -> float:
        """How far the choice falls short of the best on the held-out set."""
        return self.best_score - self.chosen_score

    @property
    def passed(self) -> bool:
        """Best or within TOLERANCE of the best."""
        return self.gap <= TOLERANCE + 1e-12


def score_table(
    results: Mapping[str, Any], sets: Sequence[str], variants: Sequence[str], metric: str | None
) -> dict[str, dict[str, float]]:
    """Per set and variant: ``metric``, or the mean of the five metrics."""
    keys = (metric,) if metric else METRICS
    out: dict[str, dict[str, float]] = {}
    for name in sets:
        rows = results[name]
        out[name] = {v: sum(float(rows[v][k]) for k in keys) / len(keys) for v in variants}
    return out


def _mean_over(table: Table, variant: str, sets: Sequence[str]) -> float:
    return sum(table[s][variant] for s in sets) / len(sets)


def folds(table: Table, variants: Sequence[str]) -> list[Fold]:
    """One fold per set; ties go to the variant listed first (the incumbent)."""
    sets = list(table)
    out = []
    for held in sets:
        others = [s for s in sets if s != held] or [held]
        chosen = max(variants, key=lambda v: (_mean_over(table, v, others), -variants.index(v)))
        best = max(variants, key=lambda v: (table[held][v], -variants.index(v)))
        out.append(Fold(held, chosen, table[held][chosen], best, table[held][best]))
    return out


def eligible(table: Table, variants: Sequence[str]) -> list[str]:
    """Variants that may be the default: near the choice of every fold and near every best."""
    sets = list(table)
    ok = []
    for v in variants:
        good = True
        for held in sets:
            others = [s for s in sets if s != held] or [held]
            top = max(_mean_over(table, w, others) for w in variants)
            best = max(table[held][w] for w in variants)
            near_choice = _mean_over(table, v, others) >= top - TOLERANCE - 1e-12
            near_best = table[held][v] >= best - TOLERANCE - 1e-12
            good = good and near_choice and near_best
        if good:
            ok.append(v)
    return ok


def default(table: Table, variants: Sequence[str]) -> str:
    """The incumbent (listed first) unless it fails the rule and another passes."""
    ok = eligible(table, variants)
    return variants[0] if variants[0] in ok or not ok else ok[0]


def markdown(table: Table, variants: Sequence[str], label: str) -> str:
    """The score table (each cell minus the set's best), the folds, and the verdict."""
    out = [f"Scores ({label}); in brackets, the shortfall from the set's best variant:\n"]
    out.append("| variant | " + " | ".join(table) + " |")
    out.append("|---|" + "---|" * len(table))
    for v in variants:
        cells = []
        for s in table:
            gap = max(table[s].values()) - table[s][v]
            cells.append(
                f"{table[s][v]:.3f} ({-gap:+.3f})" if gap > 0 else f"**{table[s][v]:.3f}**"
            )
        out.append(f"| {v} | " + " | ".join(cells) + " |")
    out.append("\nLeave one set out: the variant chosen on the other sets, on the left-out set:\n")
    out.append("| left out | chosen on the others | its score | best there | gap | passes |")
    out.append("|---|---|---|---|---|---|")
    for f in folds(table, variants):
        out.append(
            f"| {f.held_out} | {f.chosen} | {f.chosen_score:.3f} | {f.best} {f.best_score:.3f} "
            f"| {f.gap:.3f} | {'yes' if f.passed else 'no'} |"
        )
    ok = eligible(table, variants)
    listed = ", ".join(ok) if ok else "none"
    out.append(f"\nMay be the default (every fold, within {TOLERANCE}): {listed}.")
    out.append(f"Default: {default(table, variants)}\n")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=LAST, help="an ablation.json")
    p.add_argument("--variants", default="", help="variants to compare, incumbent first")
    p.add_argument("--sets", default="", help="sets (default: every set holding all variants)")
    p.add_argument("--metric", default=None, choices=METRICS, help="one metric, not the mean")
    args = p.parse_args(argv)
    if not args.results.exists():
        raise SystemExit(f"{args.results} does not exist: run bench/ablation.py first")
    results = json.loads(args.results.read_text(encoding="utf-8"))
    variants = [v for v in args.variants.split(",") if v] or list(
        dict.fromkeys(v for rows in results.values() for v in rows)
    )
    sets = [s for s in args.sets.split(",") if s] or [
        s for s, rows in results.items() if all(v in rows for v in variants)
    ]
    missing = [(s, v) for s in sets for v in variants if v not in results.get(s, {})]
    if missing or not sets:
        raise SystemExit(f"not measured: {missing or 'no set holds every variant'}")
    table = score_table(results, sets, variants, args.metric)
    print(markdown(table, variants, args.metric or "mean of " + ", ".join(METRICS)))


if __name__ == "__main__":
    main()
