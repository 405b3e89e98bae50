"""The options of ``recalld eval`` (the command itself is :mod:`recalld.surfaces.evaluation`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

_JSON_HELP = "print the answer as one JSON object"


def add_parser(sub: Any) -> None:
    """The ``eval`` subcommand: a corpus, its queries and qrels, and how to score."""
    # Imported here: `recalld` imports this module on its way to the fast path.
    from pathlib import Path

    e = sub.add_parser(
        "eval",
        help="retrieval quality on a corpus with known answers (README: Evaluate)",
        description="Index a corpus into a throwaway index of its own and score the queries "
        "against the known relevant places: recall@k, hit@k, MRR@10, nDCG@10, recall@4kc.",
    )
    e.add_argument(
        "--corpus",
        type=Path,
        required=True,
        metavar="DIR",
        help="folder to index: notes (.md, .markdown, .txt) as memory, .jsonl files as transcripts",
    )
    e.add_argument(
        "--queries",
        type=Path,
        required=True,
        metavar="FILE",
        help='queries.jsonl: one {"id": "q1", "text": "..."} object a line '
        '(optional "scope", "tags")',
    )
    e.add_argument(
        "--qrels",
        type=Path,
        required=True,
        metavar="FILE",
        help="qrels.tsv: query id <TAB> path relative to the corpus <TAB> line (0: the whole "
        "file) [<TAB> grade, default 1]",
    )
    _add_scoring(e)


def _add_scoring(e: argparse.ArgumentParser) -> None:
    """How ``eval`` scores: k, the channels, the floor, where its index lives, overrides."""
    from pathlib import Path

    e.add_argument("--k", type=int, default=10, help="results per query scored (default 10)")
    e.add_argument(
        "--mode",
        choices=["hybrid", "keyword", "vector", "rrf"],
        default="hybrid",
        help="channel(s) to evaluate; rrf: hybrid with reciprocal rank fusion",
    )
    e.add_argument(
        "--min-score",
        type=float,
        help="score floor (default: search.min_score, as `search` applies it; the table then "
        "adds a row at 0: the rank quality of every candidate)",
    )
    e.add_argument(
        "--home",
        type=Path,
        metavar="DIR",
        help="where the throwaway index and its embedding cache live "
        "(default: eval/<corpus-name> in the data dir)",
    )
    e.add_argument("--limit", type=int, metavar="N", help="only the first N queries")
    e.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key for this run (TOML value)",
    )
    e.add_argument("--json", action="store_true", help=_JSON_HELP)
