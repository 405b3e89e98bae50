"""``recalld eval``: retrieval quality of the real pipeline on a benchmark set.

Format of ``../shared/bench/README.md``: queries (id, text, scope, tags), qrels (query, path, line,
grade; line 0 = whole file). A hit covers a row when the paths match and the line lies inside the
hit's range. The corpus is indexed into a throwaway index under its own home, which is kept so that
repeated runs reuse the index and its embedding cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
import tomllib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.config import Config, Value
from recalld.errors import BadRequest

EXCLUDED_FROM_OVERALL = ("adversarial",)  # LoCoMo: reported apart, as the reference does
BUDGET_CHARS = 4000
NOTE_ENDINGS = (".md", ".markdown", ".txt")  # the default memory.extensions


@dataclass(frozen=True)
class Query:
    """One benchmark query."""

    id: str
    text: str
    scope: str | None
    tags: tuple[str, ...]


@dataclass
class Scores:
    """Per-query metrics."""

    values: dict[str, float] = field(default_factory=dict)


def load_queries(path: Path) -> list[Query]:
    """Queries of a set (JSONL)."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            out.append(
                Query(
                    str(obj["id"]), str(obj["text"]), obj.get("scope"), tuple(obj.get("tags") or ())
                )
            )
        except (ValueError, KeyError) as exc:
            raise BadRequest(f"{path}:{n}: not a query record ({exc})") from exc
    return out


def load_qrels(path: Path) -> dict[str, list[tuple[str, int]]]:
    """Relevant (path, line) rows per query id (grade > 0)."""
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            raise BadRequest(f"{path}:{n}: expected query<TAB>path<TAB>line[<TAB>grade]")
        grade = float(parts[3]) if len(parts) > 3 and parts[3] else 1.0
        if grade > 0:
            out[parts[0]].append((parts[1], int(parts[2])))
    return out


def covers(hit: dict[str, Any], rel_path: str, line: int) -> bool:
    """Whether a hit (with a corpus-relative ``rel``) covers a relevant row.

    A result's ``also`` places (the same passage found elsewhere, collapsed into it) cover rows
    at the result's rank: the answer names them.
    """
    if any(covers(place, rel_path, line) for place in hit.get("also", ())):
        return True
    if hit["rel"] != rel_path:
        return False
    return line == 0 or hit["start_line"] <= line <= hit["end_line"]


def score_query(
    hits: Sequence[dict[str, Any]], rels: Sequence[tuple[str, int]], ks: Sequence[int]
) -> dict[str, float]:
    """recall@k, hit@k, MRR@10, nDCG@10 and budgeted recall for one query."""
    out: dict[str, float] = {}
    n_rel = len(rels)
    for k in ks:
        top = hits[:k]
        covered = {i for i, (p, ln) in enumerate(rels) for h in top if covers(h, p, ln)}
        out[f"recall@{k}"] = len(covered) / n_rel
        out[f"hit@{k}"] = 1.0 if covered else 0.0
    rr = 0.0
    for rank, h in enumerate(hits[:10], 1):
        if any(covers(h, p, ln) for p, ln in rels):
            rr = 1.0 / rank
            break
    out["mrr@10"] = rr
    seen: set[int] = set()
    dcg = 0.0
    for rank, h in enumerate(hits[:10], 1):
        new = {i for i, (p, ln) in enumerate(rels) if i not in seen and covers(h, p, ln)}
        if new:
            dcg += 1.0 / math.log2(rank + 1)
            seen |= new
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(n_rel, 10) + 1))
    out["ndcg@10"] = dcg / ideal if ideal else 0.0
    budget_cov: set[int] = set()
    used = 0
    for h in hits:
        if used > BUDGET_CHARS:
            break
        budget_cov |= {i for i, (p, ln) in enumerate(rels) if covers(h, p, ln)}
        used += h["chars"]
    out["recall@4kc"] = len(budget_cov) / n_rel
    return out


_LINES: dict[str, list[int]] = {}


def cited_chars(path: str, start: int, end: int) -> int:
    """Characters of the lines a hit cites (for budgeted recall)."""
    lengths = _LINES.get(path)
    if lengths is None:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return 0
        lengths = [len(line) + 1 for line in text.split("\n")]
        if len(_LINES) > 20_000:
            _LINES.clear()
        _LINES[path] = lengths
    return sum(lengths[max(start - 1, 0) : end])


def _mean(rows: Sequence[dict[str, float]], keys: Sequence[str]) -> dict[str, float]:
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) if rows else 0.0 for k in keys}


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return round(ordered[idx], 2)


def eval_home(corpus: Path) -> Path:
    """Default home of a corpus's throwaway index (kept to reuse the embedding cache)."""
    real = corpus.resolve()
    digest = hashlib.sha256(str(real).encode()).hexdigest()[:8]
    name = real.parent.name if real.name == "corpus" else real.name  # <set>/corpus → <set>
    return paths.data_dir() / "eval" / f"{name}-{digest}"


def corpus_kinds(corpus: Path) -> tuple[bool, bool]:
    """Whether ``corpus`` holds (notes, transcripts), judged file by file.

    Each file is what its name says: a ``.jsonl`` is a transcript, a note ending is a note. A
    mixed corpus (a README beside the transcripts) gets both, so no kind of file is dropped.
    """
    notes = transcripts = False
    for _, _, files in os.walk(corpus):
        for name in files:
            transcripts = transcripts or name.endswith(".jsonl")
            notes = notes or name.endswith(NOTE_ENDINGS)
        if notes and transcripts:
            break
    return notes, transcripts


def eval_config(corpus: Path, home: Path, overrides: dict[str, Value]) -> Config:
    """Config of an eval run: only the corpus indexed, under ``home``.

    Notes are indexed as memory, ``.jsonl`` files as session transcripts (see
    :func:`corpus_kinds`).
    """
    corpus = corpus.resolve()
    notes, transcripts = corpus_kinds(corpus)
    values: dict[str, Value] = {"sync.watch": False}
    # A corpus of transcripts only keeps an empty memory folder: the memory root is not the corpus.
    values["memory.paths"] = [str(corpus if notes or not transcripts else home / "no-memory")]
    values["sessions.paths"] = [str(corpus / "**" / "*.jsonl")] if transcripts else []
    values.update(overrides)
    return Config(values, base_dir=home)


def parse_overrides(items: Sequence[str]) -> dict[str, Value]:
    """``KEY=VALUE`` pairs with TOML values (``search.vector_weight=0.5``)."""
    out: dict[str, Value] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise BadRequest(f"--set expects KEY=VALUE, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        out[key.strip()] = value
    return out


def _place(r: dict[str, Any], root: Path) -> dict[str, Any]:
    try:
        rel = os.path.relpath(r["path"], root)
    except ValueError:
        rel = r["path"]
    return {"rel": rel, "start_line": r["start_line"], "end_line": r["end_line"]}


def run_eval(
    corpus: Path,
    queries_path: Path,
    qrels_path: Path,
    *,
    k: int = 10,
    mode: str = "hybrid",
    min_score: float | None = 0.0,
    home: Path | None = None,
    overrides: dict[str, Value] | None = None,
    limit: int | None = None,
    progress: bool = False,
    compare_min_score: float | None = None,
) -> dict[str, Any]:
    """Index ``corpus`` (incrementally) and score every query; returns the JSON result.

    ``min_score`` None: the config's ``search.min_score``, the floor ``search`` applies.
    ``compare_min_score``: the queries are also scored at this floor, under ``compare``.
    """
    from recalld.engine import Engine

    if not corpus.is_dir():
        raise BadRequest(f"--corpus {corpus} is not a folder")
    home = (home or eval_home(corpus)).resolve()
    home.mkdir(parents=True, exist_ok=True)
    over = dict(overrides or {})
    search_mode = mode
    if mode == "rrf":
        over["search.fusion"] = "rrf"
        search_mode = "hybrid"
    config = eval_config(corpus, home, over)
    if min_score is None:
        min_score = config.float("search.min_score")
    engine = Engine(config, writable=True)
    try:
        if progress:
            print(f"eval: indexing {corpus} into {home} ...", file=sys.stderr)
        t0 = time.perf_counter()
        report = engine.sync()
        index_s = time.perf_counter() - t0
        queries, qrels = _judged_queries(queries_path, qrels_path, limit)
        ks = sorted({1, 5, 10, k})
        run = _QueryRun(engine, corpus.resolve(), max(k, 10), search_mode, ks, progress)
        per_query, latencies = run.score_all(queries, qrels, min_score)
        keys = _metric_keys(ks)
        out = _summary(mode, per_query, latencies, keys)
        out["index"] = _index_facts(engine, home, index_s, report.chunks_embedded)
        out["provider"] = engine.embedder.label if engine.embedder else "none"
        out["min_score"] = min_score
        if compare_min_score is not None and compare_min_score != min_score:
            other = run.score_all(queries, qrels, compare_min_score)[0]
            kept = _overall(other)
            out["compare"] = {"min_score": compare_min_score, "queries": len(kept)}
            out["compare"].update(_mean(kept, keys))
        return out
    finally:
        engine.close()


def _index_facts(engine: Any, home: Path, index_s: float, embedded: int) -> dict[str, Any]:
    """What the evaluated index holds, and how long indexing took."""
    counts = engine.status()["counts"]
    return {
        "home": str(home),
        "files": counts["files"],
        "chunks": counts["chunks"],
        "vectors": counts["vectors"],
        "index_s": round(index_s, 2),
        "chunks_embedded": embedded,
    }


def _judged_queries(
    queries_path: Path, qrels_path: Path, limit: int | None
) -> tuple[list[Query], dict[str, list[tuple[str, int]]]]:
    """The queries that have judgments (the first ``limit`` of them), and the judgments."""
    queries = load_queries(queries_path)
    qrels = load_qrels(qrels_path)
    queries = [q for q in queries if q.id in qrels]
    if limit:
        queries = queries[:limit]
    return queries, qrels


def _metric_keys(ks: Sequence[int]) -> list[str]:
    """The metrics reported, in the order the table shows them."""
    return (
        [f"recall@{x}" for x in ks] + [f"hit@{x}" for x in ks] + ["mrr@10", "ndcg@10", "recall@4kc"]
    )


def _overall(per_query: Sequence[tuple[Query, dict[str, float]]]) -> list[dict[str, float]]:
    """The scores that count in the overall means (not those of EXCLUDED_FROM_OVERALL tags)."""
    return [s for q, s in per_query if not set(q.tags) & set(EXCLUDED_FROM_OVERALL)]


def _summary(
    mode: str,
    per_query: Sequence[tuple[Query, dict[str, float]]],
    latencies: Sequence[float],
    keys: Sequence[str],
) -> dict[str, Any]:
    """Mean scores overall and per tag, and the latency percentiles."""
    overall = _overall(per_query)
    by_tag: dict[str, list[dict[str, float]]] = defaultdict(list)
    for q, s in per_query:
        for tag in q.tags:
            by_tag[tag].append(s)
    out: dict[str, Any] = {"mode": mode, "queries": len(overall)}
    out.update(_mean(overall, keys))
    out["by_tag"] = {
        tag: {"queries": len(rows), **_mean(rows, keys)} for tag, rows in sorted(by_tag.items())
    }
    out["excluded_from_overall"] = [t for t in EXCLUDED_FROM_OVERALL if t in by_tag]
    out["latency_ms"] = {
        "p50": _percentile(latencies, 0.5),
        "p95": _percentile(latencies, 0.95),
    }
    return out


class _QueryRun:
    """Searches every query the same way, at a given floor, and scores the answers."""

    def __init__(
        self, engine: Any, root: Path, fetch: int, mode: str, ks: list[int], progress: bool
    ) -> None:
        self.engine, self.root, self.fetch, self.mode = engine, root, fetch, mode
        self.ks, self.progress = ks, progress

    def score_all(
        self, queries: list[Query], qrels: dict[str, Any], min_score: float
    ) -> tuple[list[tuple[Query, dict[str, float]]], list[float]]:
        """Each query's scores, and each search's latency in ms."""
        per_query: list[tuple[Query, dict[str, float]]] = []
        latencies: list[float] = []
        for i, q in enumerate(queries):
            t = time.perf_counter()
            hits = self._hits(q, min_score)
            latencies.append((time.perf_counter() - t) * 1000)
            per_query.append((q, score_query(hits, qrels[q.id], self.ks)))
            if self.progress and (i + 1) % 200 == 0:
                print(f"eval: {i + 1}/{len(queries)} queries", file=sys.stderr)
        return per_query, latencies

    def _hits(self, q: Query, min_score: float) -> list[dict[str, Any]]:
        params: dict[str, Any] = {
            "query": q.text,
            "max_results": self.fetch,
            "min_score": min_score,
            "mode": self.mode,
        }
        if q.scope:
            params["path_prefix"] = str(self.root / q.scope) + (
                "/" if q.scope.endswith("/") else ""
            )
        try:
            res = self.engine.searcher.search(params)
        except BadRequest:
            res = {"results": []}
        hits = []
        for r in res["results"]:
            hit = _place(r, self.root)
            hit["chars"] = cited_chars(r["path"], r["start_line"], r["end_line"])
            if r.get("also"):
                hit["also"] = [_place(p, self.root) for p in r["also"]]
            hits.append(hit)
        return hits


def format_table(res: dict[str, Any]) -> str:
    """Human-readable summary."""
    keys = [
        "recall@1",
        "recall@5",
        "recall@10",
        "hit@1",
        "hit@5",
        "hit@10",
        "mrr@10",
        "ndcg@10",
        "recall@4kc",
    ]
    lines = [
        f"mode {res['mode']} · {res['queries']} queries · provider {res['provider']} · "
        f"index {res['index']['chunks']} chunks ({res['index']['home']})",
        "| group | n | " + " | ".join(keys) + " |",
        "|---|---|" + "---|" * len(keys),
        "| all | " + str(res["queries"]) + " | " + " | ".join(f"{res[k]:.3f}" for k in keys) + " |",
    ]
    for tag, row in res["by_tag"].items():
        lines.append(
            f"| {tag} | {row['queries']} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |"
        )
    if cmp := res.get("compare"):
        lines.append(
            f"| all, min_score {cmp['min_score']:g} | {cmp['queries']} | "
            + " | ".join(f"{cmp[k]:.3f}" for k in keys)
            + " |"
        )
    lat = res["latency_ms"]
    lines.append(f"latency p50 {lat['p50']} ms, p95 {lat['p95']} ms")
    lines.append(
        f"scored at min_score {res['min_score']:g}"
        + (" (search's floor)" if res.get("compare") else "")
        + (f"; the 'min_score {cmp['min_score']:g}' row: every candidate" if cmp else "")
    )
    if res.get("excluded_from_overall"):
        lines.append(
            f"(tags {', '.join(res['excluded_from_overall'])} reported apart, not in 'all')"
        )
    return "\n".join(lines)


def run_eval_cli(args: argparse.Namespace) -> int:
    """The ``eval`` subcommand."""
    res = run_eval(
        args.corpus,
        args.queries,
        args.qrels,
        k=args.k,
        mode=args.mode,
        min_score=args.min_score,  # None: the floor `search` applies
        compare_min_score=0.0 if args.min_score is None else None,
        home=args.home,
        overrides=parse_overrides(args.set),
        limit=args.limit,
        progress=not args.json,
    )
    print(json.dumps(res) if args.json else format_table(res))
    return 0
