"""The transcript needle set: exact identifiers from real sessions, each found in one session.

Issue 13. Unlike ``bench/partial_ids.py`` this never looks at what recalld indexes: it decodes
every JSONL line of ``../shared/bench/transcripts`` itself (``json.loads``, every string value,
JSON held inside strings decoded too), so an identifier that only a tool result, an edit's new
string or a subagent file holds is a needle like any other.

1. Content strings are classified by where they live: ``message`` (user/assistant text),
   ``tool_call`` (a tool's input) or ``tool_output`` (a tool's result); thinking is left out,
   as recalld leaves it out by default. Identifier candidates are cut from them by shape:
   ``path`` (``a/b/c.ext``, ``file.ext``), ``snake``, ``camel``, ``dotted`` (``Foo.Bar``)
   and ``other`` (kebab-case, CONSTANTS, migration names). Id fields (``tool_use_id``) are
   bookkeeping, not content.
2. A candidate is kept when it occurs as a whole token (no letter or digit glued to it; ``_``
   separates, as in the index) in exactly one session, case-blind: a session's subagent files
   count with it, and every string value of every line counts (metadata and progress lines
   too), so "unique" is strict.
3. A seeded sample, balanced over shape x location, of at least MIN_QUERIES needles, at most
   MAX_PER_LINE of them first seen on the same line.
4. Relevant rows: every line of that session whose decoded strings hold the needle.

``main`` writes the set in the bench format under ``bench/out/transcript-needles/`` (gitignored)
and scores recalld (keyword and hybrid) and a plain line-level BM25 on it.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEED = 20261201
MIN_QUERIES = 320
LOCATIONS = ("message", "tool_call", "tool_output")
SHAPES = ("path", "snake", "camel", "dotted", "other")
MAX_NEEDLE = 120
# Needles first seen on one line: without a cap, one 178 KB test-run dump (2,000 DOM constants)
# gave 50 of 320 needles, and that one line's fate decided a sixth of the score.
MAX_PER_LINE = 2

# Runs of identifier characters; a run right after a backslash is a JSON escape's tail
# (``\nadd_item``), never an identifier.
_RUN = re.compile(r"(?<![\\A-Za-z0-9_./-])[A-Za-z0-9_./-]+")
_EXTENSION_TEXT = (
    "ex exs heex eex leex py js ts tsx jsx mjs cjs md json jsonl toml yaml yml lock sh bash sql "
    "rs go rb java kt c h cc cpp hpp css scss html txt csv log cfg ini conf xml svg env "
    "gitignore dockerfile mix erl hrl lua php swift vue"
)
_EXTENSIONS = frozenset(_EXTENSION_TEXT.split())
_FILE = re.compile(r"[\w-]+\.([A-Za-z][A-Za-z0-9]{0,9})")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
_CAMEL = re.compile(r"(?:[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+)")
_OTHER = (
    re.compile(r"\d{6,}_[a-z0-9_]+"),  # migration names
    re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"),  # CONSTANTS
    re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+"),  # kebab-case
    re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+"),  # Mixed_snake
)


def shape_of(token: str) -> str | None:
    """The shape of an identifier candidate, or None when it is not one worth asking."""
    if not 6 <= len(token) <= MAX_NEEDLE or not re.search(r"[A-Za-z]", token):
        return None
    if "/" in token:
        # A file (``a/b.ex``) or a deeper path; ``Pub/Sub`` and ``dev/test`` are prose.
        segs = token.lstrip("/~").split("/")
        m = _FILE.fullmatch(segs[-1])
        file = bool(m and m.group(1).lower() in _EXTENSIONS)
        return "path" if all(segs) and (file or len(segs) >= 3) else None
    m = _FILE.fullmatch(token)
    if m and m.group(1).lower() in _EXTENSIONS:
        return "path"
    if "." in token:
        parts = token.split(".")
        return "dotted" if _DOTTED.fullmatch(token) and min(map(len, parts)) >= 2 else None
    if _SNAKE.fullmatch(token):
        return "snake"
    if _CAMEL.fullmatch(token):
        return "camel"
    if any(rx.fullmatch(token) for rx in _OTHER):
        if "-" in token and token.count("-") < 2 and not re.search(r"\d", token):
            return None  # one hyphen and no digit: an English compound ("read-only")
        return "other"
    return None


def candidates(text: str) -> Iterator[str]:
    """Identifier-shaped runs of ``text`` (trailing sentence punctuation stripped)."""
    for m in _RUN.finditer(text):
        tok = m.group().rstrip("./-").removeprefix("./").lstrip("-")
        if tok.startswith("."):  # a dotfile path keeps its dot; a lone leading dot is punctuation
            tok = tok if "/" in tok else tok.lstrip(".")
        if tok.startswith("//"):
            tok = tok.lstrip("/")  # a URL after its scheme's colon
        if tok.startswith("/") and "/" not in tok[1:]:
            tok = tok[1:]  # the tail of a glob or a longer path ("**/app.js")
        if tok:
            yield tok


@dataclass
class Line:
    """One decoded JSONL line: its session, place, all its strings and its content by kind."""

    session: str
    rel: str
    number: int
    text: str  # every string value, "\n"-joined
    content: dict[str, list[str]]  # location -> content strings


_ID_KEY = re.compile(r"^(?:id|uuid)$|_(?:id|uuid)$|[a-z](?:Id|ID|Uuid)$")


def session_of(rel: str) -> str:
    """``spotter/<id>.jsonl`` and ``spotter/<id>/subagents/x.jsonl`` are one session."""
    parts = rel.split("/")
    if "subagents" in parts[1:-1]:
        return "/".join(parts[: parts.index("subagents", 1)])
    return rel.removesuffix(".jsonl")


def _strings(value: Any, skip_ids: bool = False) -> Iterator[str]:
    """Every string inside ``value``; strings that hold JSON are decoded and walked too.

    ``skip_ids`` leaves out the values of id fields (``tool_use_id``, ``uuid``): bookkeeping
    that nobody typed or read, so no needle is cut from them (they still count for uniqueness).
    """
    if isinstance(value, str):
        yield value
        if value[:1] in "{[" and len(value) > 1:
            try:
                inner = json.loads(value)
            except ValueError:
                return
            if not isinstance(inner, str):
                yield from _strings(inner, skip_ids)
    elif isinstance(value, dict):
        for k, v in value.items():
            if not (skip_ids and isinstance(k, str) and _ID_KEY.search(k)):
                yield from _strings(v, skip_ids)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, skip_ids)


def _blocks(content: Any, out: dict[str, list[str]], text_kind: str) -> None:
    if isinstance(content, str):
        out[text_kind].append(content)
        return
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text"):
            out[text_kind].extend(_strings(block.get("text"), True))
        elif kind == "tool_use":
            out["tool_call"].extend(_strings(block.get("input"), True))
        elif kind == "tool_result":
            out["tool_output"].extend(_strings(block.get("content"), True))


def content_of(record: Any) -> dict[str, list[str]]:
    """Content strings of one decoded line by location (Claude Code and Codex shapes)."""
    out: dict[str, list[str]] = {loc: [] for loc in LOCATIONS}
    if not isinstance(record, dict):
        return out
    if record.get("type") in ("user", "assistant") and isinstance(record.get("message"), dict):
        _blocks(record["message"].get("content"), out, "message")
        if "toolUseResult" in record:
            out["tool_output"].extend(_strings(record["toolUseResult"], True))
    payload = record.get("payload")
    if record.get("type") == "response_item" and isinstance(payload, dict):
        kind = payload.get("type")
        if kind == "message":
            _blocks(payload.get("content"), out, "message")
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            out["tool_call"].extend(
                _strings(payload.get("arguments") or payload.get("input"), True)
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out["tool_output"].extend(_strings(payload.get("output"), True))
    return out


def load_lines(corpus: Path) -> list[Line]:
    """Every line of every JSONL file under ``corpus``, decoded."""
    lines: list[Line] = []
    for path in sorted(corpus.rglob("*.jsonl")):
        rel = str(path.relative_to(corpus))
        raw = path.read_text(encoding="utf-8", errors="replace").split("\n")
        for n, line in enumerate(raw, 1):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            lines.append(
                Line(session_of(rel), rel, n, "\n".join(_strings(record)), content_of(record))
            )
    return lines


def boundary(needle: str) -> re.Pattern[str]:
    """The needle as a whole token, in any case: no letter or digit glued to either end.

    ``_`` is a boundary as it is to the index (``add_x`` inside ``20240101_add_x``), and case
    is ignored as the index ignores it: a needle must be unambiguous to a case-blind search.
    """
    # An end that is punctuation is a boundary itself ("/lib/x.ex" inside "a/lib/x.ex").
    head = r"(?<![A-Za-z0-9])" if needle[:1].isalnum() else ""
    tail = r"(?![A-Za-z0-9])" if needle[-1:].isalnum() else ""
    return re.compile(head + re.escape(needle) + tail, re.IGNORECASE)


@dataclass(frozen=True)
class Needle:
    """One query: the identifier, its shape and location, and its relevant rows."""

    text: str
    shape: str
    location: str
    rows: tuple[tuple[str, int], ...]


def _location(counts: Counter[str]) -> str:
    """Where a needle lives: its most frequent location (ties: the one recalld indexed least)."""
    return max(LOCATIONS, key=lambda loc: (counts[loc], LOCATIONS.index(loc)))


def build(lines: list[Line], n: int = MIN_QUERIES, seed: int = SEED) -> list[Needle]:
    """A seeded sample of ``n`` needles, balanced over shape x location (see the module doc)."""
    # Candidates from content strings: where they occur, and in which sessions as a maximal run.
    seen_in: dict[str, set[str]] = defaultdict(set)
    places: dict[str, Counter[str]] = defaultdict(Counter)
    home: dict[str, tuple[str, int]] = {}  # the first line whose content holds the candidate
    for line in lines:
        for tok in set(candidates(line.text)):
            seen_in[tok.lower()].add(line.session)
        for loc, strings in line.content.items():
            for s in strings:
                for tok in candidates(s):
                    places[tok][loc] += 1
                    home.setdefault(tok, (line.rel, line.number))
    buckets: dict[tuple[str, str], list[str]] = defaultdict(list)
    for tok in sorted(places):
        shape = shape_of(tok)
        if shape and len(seen_in[tok.lower()]) == 1:
            buckets[(shape, _location(places[tok]))].append(tok)
    rng = random.Random(seed)
    for key in sorted(buckets):
        rng.shuffle(buckets[key])
    by_session: dict[str, list[Line]] = defaultdict(list)
    for line in lines:
        by_session[line.session].append(line)
    blobs = {s: "\n".join(x.text for x in ls).lower() for s, ls in by_session.items()}
    out: list[Needle] = []
    per_line: Counter[tuple[str, int]] = Counter()
    order = sorted(buckets)
    while len(out) < n and any(buckets[k] for k in order):
        for key in order:
            if len(out) >= n:
                break
            while buckets[key]:
                tok = buckets[key].pop()
                if per_line[home[tok]] >= MAX_PER_LINE:
                    continue
                needle = _verify(tok, key, blobs, by_session)
                if needle:
                    per_line[home[tok]] += 1
                    out.append(needle)
                    break
    return sorted(out, key=lambda x: x.text)


def _verify(
    tok: str, key: tuple[str, str], blobs: dict[str, str], by_session: dict[str, list[Line]]
) -> Needle | None:
    """The needle of ``tok`` if it occurs as a whole token in exactly one session."""
    rx = boundary(tok)
    low = tok.lower()
    sessions = [s for s, blob in blobs.items() if low in blob and rx.search(blob)]
    if len(sessions) != 1:
        return None
    rows = tuple((x.rel, x.number) for x in by_session[sessions[0]] if rx.search(x.text))
    return Needle(tok, key[0], key[1], rows) if rows else None


def write(needles: list[Needle], corpus: Path, out: Path) -> None:
    """queries.jsonl / qrels.tsv in the bench format; ``corpus`` is linked beside them."""
    out.mkdir(parents=True, exist_ok=True)
    qrels: list[str] = []
    with (out / "queries.jsonl").open("w", encoding="utf-8") as qf:
        for i, nd in enumerate(needles):
            qid = f"tn{i:03d}"
            tags = [f"shape:{nd.shape}", f"loc:{nd.location}"]
            qf.write(json.dumps({"id": qid, "text": nd.text, "tags": tags}) + "\n")
            qrels.extend(f"{qid}\t{rel}\t{n}\t1" for rel, n in nd.rows)
    (out / "qrels.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    link = out / "corpus"
    if not link.exists():
        link.symlink_to(corpus.resolve(), target_is_directory=True)


def bm25_baseline(lines: list[Line], needles: list[Needle], k: int = 10) -> dict[str, float]:
    """Plain BM25: one FTS5 row per decoded line, the needle's tokens as one phrase."""
    import sqlite3

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61')")
    conn.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)", enumerate(x.text for x in lines))
    hit1 = hit10 = mrr = 0.0
    for nd in needles:
        phrase = '"' + " ".join(re.findall(r"[A-Za-z0-9]+", nd.text)) + '"'
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (phrase, k)
            )
        ]
        relevant = set(nd.rows)
        ranks = [
            i for i, rid in enumerate(ids, 1) if (lines[rid].rel, lines[rid].number) in relevant
        ]
        if ranks:
            hit1 += ranks[0] == 1
            hit10 += 1
            mrr += 1 / ranks[0]
    n = max(len(needles), 1)
    return {"hit@1": hit1 / n, "hit@10": hit10 / n, "mrr@10": mrr / n}


ROOT = Path(__file__).resolve().parents[1]
# ../shared/bench beside the checkout (a worktree sits one level deeper: look further up).
CORPUS = next(
    (
        p / "shared" / "bench" / "transcripts"
        for p in ROOT.parents
        if (p / "shared" / "bench").is_dir()
    ),
    ROOT.parent / "shared" / "bench" / "transcripts",
)
OUT = ROOT / "bench" / "out" / "transcript-needles"
KEYS = ("hit@1", "hit@10", "mrr@10")


def score_recalld(
    mode: str, out: Path = OUT, *, fresh: bool = True, tag: str = ""
) -> dict[str, Any]:
    """recalld's scores on the set in ``out`` (``keyword``: no embedder; ``hybrid``: local).

    The index lives in a throwaway home under ``bench/out/quality``. ``fresh`` rebuilds it (a
    tokenizer change needs that); a hybrid rebuild keeps its embedding cache.
    """
    from recalld.config import Value
    from recalld.engine import Engine
    from recalld.surfaces.evaluation import eval_config, run_eval

    home = ROOT / "bench" / "out" / "quality" / f"transcript-needles-{mode}{tag}"
    home.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus"
    over: dict[str, Value] = {
        "memory.paths": [str(home / "no-memory")],
        "sessions.paths": [str(corpus.resolve() / "**" / "*.jsonl")],
    }
    if mode == "keyword":
        over["embedding.provider"] = "none"
    if fresh and (home / "index.sqlite").exists():
        engine = Engine(eval_config(corpus, home, over), writable=True)
        try:
            engine.reindex()
        finally:
            engine.close()
    return run_eval(
        corpus, out / "queries.jsonl", out / "qrels.tsv", mode=mode, home=home, overrides=over
    )


def summary(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Rows ``overall`` and one per tag, each {hit@1, hit@10, mrr@10, queries}."""
    rows = {"overall": {"queries": res["queries"], **{k: res[k] for k in KEYS}}}
    for tag, vals in res["by_tag"].items():
        rows[tag] = {"queries": vals["queries"], **{k: vals[k] for k in KEYS}}
    return rows


def run(
    modes: tuple[str, ...] = ("keyword", "hybrid"), out: Path = OUT, tag: str = ""
) -> dict[str, Any]:
    """Build the set, score recalld in each mode and plain BM25; the results as one dict."""
    import time

    lines = load_lines(CORPUS)
    needles = build(lines)
    write(needles, CORPUS, out)
    result: dict[str, Any] = {"queries": len(needles), "modes": {}}
    result["bm25"] = bm25_baseline(lines, needles)
    for mode in modes:
        t0 = time.perf_counter()
        res = score_recalld(mode, out, tag=tag)
        result["modes"][mode] = {
            "rows": summary(res),
            "index": res["index"],
            "wall_s": round(time.perf_counter() - t0, 1),
        }
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def load_last(out: Path = OUT) -> dict[str, Any] | None:
    """The results of the last run, if any."""
    path = out / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def markdown(result: dict[str, Any]) -> list[str]:
    """The BENCHMARKS.md table: one row per slice, hit@1 / hit@10 / MRR@10 per mode."""
    modes = list(result["modes"])
    head = "| slice | queries | " + " | ".join(f"{m} hit@1 / hit@10 / MRR@10" for m in modes)
    lines = [head + " |", "|---|---|" + "---|" * len(modes)]
    first = result["modes"][modes[0]]["rows"] if modes else {}
    for name in first:
        cells = []
        for m in modes:
            row = result["modes"][m]["rows"].get(name)
            cells.append(" / ".join(f"{row[k]:.3f}" for k in KEYS) if row else "-")
        lines.append(f"| {name} | {first[name]['queries']} | " + " | ".join(cells) + " |")
    b = result["bm25"]
    lines.append("")
    lines.append(
        "Plain BM25 (one FTS5 row per decoded line, the needle as a phrase): "
        + " / ".join(f"{k} {b[k]:.3f}" for k in KEYS)
        + "."
    )
    return lines


def main() -> None:
    """Build the set, score it, print the table (``--help``)."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("modes", nargs="?", default="keyword,hybrid", help="comma-separated modes")
    p.add_argument("--out", type=Path, default=OUT, help="where the set and results go")
    p.add_argument("--tag", default="", help="suffix of the index homes (to keep versions apart)")
    args = p.parse_args()
    print("\n".join(markdown(run(tuple(args.modes.split(",")), args.out, args.tag))))


if __name__ == "__main__":
    main()
