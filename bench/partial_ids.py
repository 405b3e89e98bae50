"""A partial-identifier query set built from the real transcripts in ``../shared/bench``.

Nobody types an identifier exactly as it was written weeks ago: ``ConnReset`` for
``ERR_CONN_RESET``, ``conn_reset`` for ``connectionReset``, ``recalld/search`` for
``daemon/recalld/retrieval/search.py``. This builds such queries, deterministically, from the
transcripts' indexed text:

1. index the transcripts (as session sources) into an eval home;
2. collect identifiers from the chunk texts: ``snake_case`` / ``SCREAMING_CASE`` with 2+ parts,
   ``camelCase`` / ``PascalCase`` with 2+ parts, and paths with 2+ segments;
3. keep those found on 1 to 3 JSONL lines (a findable needle, not a word used everywhere);
4. derive one partial form of each: the other case style (``fooBar`` <-> ``foo_bar``), the
   identifier minus its first part (``conn_reset`` for ``err_conn_reset``), or a path's last two
   segments without the extension;
5. drop a query when its squashed form (lowercase, no separators) also occurs on a line that does
   not hold the full identifier: the answer must be unambiguous.

qrels: every JSONL line holding the full identifier. Output in the bench format (queries.jsonl,
qrels.tsv) under ``bench/out/partial-ids/``; ``corpus`` is a symlink to the shared folder.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import re
from collections import defaultdict
from pathlib import Path

from recalld.config import Value

SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+){1,5}\b")
CAMEL = re.compile(r"\b[a-zA-Z][a-z0-9]+(?:[A-Z][a-z0-9]+){1,5}\b")
PATH = re.compile(r"\b[\w.-]+(?:/[\w.-]+){1,6}\.[a-z]{1,5}\b")
JSON_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)")
_PARTS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
MAX_QUERIES = 300
SEED = 20261130


def _parts(ident: str) -> list[str]:
    return [p.lower() for p in _PARTS.findall(ident.replace("_", " "))]


def _squash(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.lower())


def partial_form(ident: str, rng: random.Random) -> str | None:
    """One partial spelling of ``ident`` (None when it has none worth asking)."""
    if "/" in ident:
        segs = ident.split("/")
        tail = segs[-2:]
        tail[-1] = tail[-1].rsplit(".", 1)[0]
        form = "/".join(tail)
        return form if form != ident and len(_squash(form)) >= 6 else None
    parts = _parts(ident)
    if len(parts) < 2:
        return None
    choices = []
    if "_" in ident:
        choices.append(parts[0] + "".join(p.title() for p in parts[1:]))  # camel
    else:
        choices.append("_".join(parts))  # snake
    if len(parts) >= 3:
        rest = parts[1:]
        choices.append(
            "_".join(rest) if "_" in ident else rest[0] + "".join(p.title() for p in rest[1:])
        )
    form = rng.choice(choices)
    return form if len(_squash(form)) >= 6 else None


def _occurrences(
    needle: str, texts: dict[str, str], starts: dict[str, list[int]]
) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for rel, text in texts.items():
        at = text.find(needle)
        while at >= 0:
            out.add((rel, bisect.bisect_right(starts[rel], at)))
            at = text.find(needle, at + 1)
    return out


def _lines_holding(
    sq: str, squashed: str, begins: list[int], flat: list[tuple[str, int, str]]
) -> list[tuple[str, int, str]]:
    """The lines of ``flat`` whose squashed form (line i of ``squashed``) holds ``sq``."""
    found: list[tuple[str, int, str]] = []
    at = squashed.find(sq)
    while at >= 0:
        found.append(flat[bisect.bisect_right(begins, at) - 1])
        end = squashed.find("\n", at)
        at = squashed.find(sq, end) if end >= 0 else -1
    return found


def build(corpus: Path, lines_of: dict[str, list[str]], indexed: str, out: Path) -> int:
    """Write queries.jsonl / qrels.tsv for ``corpus`` (lines per corpus-relative path).

    ``indexed`` is the text the index holds: an identifier only in fields that are not indexed
    (ids, metadata) makes no query.
    """
    where: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for rel, lines in lines_of.items():
        for n, line in enumerate(lines, 1):
            # JSON escapes glue letters to words ("\\nadd_item"): read them as spaces.
            plain = JSON_ESCAPE.sub(" ", line)
            for rx in (SNAKE, CAMEL, PATH):
                for m in rx.finditer(plain):
                    where[m.group()].add((rel, n))
    squashed_lines: dict[str, list[tuple[str, int, str]]] = {}
    rng = random.Random(SEED)
    queries: list[tuple[str, str, list[tuple[str, int]]]] = []
    qrels: list[str] = []
    texts = {rel: "\n".join(lines) for rel, lines in lines_of.items()}
    starts = {
        rel: list(itertools.accumulate((len(x) + 1 for x in lines), initial=0))
        for rel, lines in lines_of.items()
    }
    # Every line squashed once, joined: one find() per form instead of a pass over 17 MB each.
    flat = [(rel, n, line) for rel, lines in lines_of.items() for n, line in enumerate(lines, 1)]
    parts = [_squash(line) for _, _, line in flat]
    squashed = "\n".join(parts)
    begins = list(itertools.accumulate((len(x) + 1 for x in parts[:-1]), initial=0))
    for ident in sorted(where):
        if not 1 <= len(where[ident]) <= 3 or len(ident) > 60 or ident not in indexed:
            continue
        # Relevant: every line holding the literal, also inside a longer identifier.
        found = _occurrences(ident, texts, starts)
        if not 1 <= len(found) <= 3:
            continue
        form = partial_form(ident, rng)
        if form is None or form.lower() == ident.lower():
            continue
        sq = _squash(form)
        if sq not in squashed_lines:
            squashed_lines[sq] = _lines_holding(sq, squashed, begins, flat)
        if any(ident not in line for _, _, line in squashed_lines[sq]):
            continue
        queries.append((ident, form, sorted(found)))
    rng.shuffle(queries)
    queries = sorted(queries[:MAX_QUERIES])
    out.mkdir(parents=True, exist_ok=True)
    with (out / "queries.jsonl").open("w", encoding="utf-8") as qf:
        for i, (ident, form, places) in enumerate(queries):
            qid = f"pid{i:03d}"
            qf.write(
                json.dumps({"id": qid, "text": form, "tags": ["partial-identifier"], "of": ident})
                + "\n"
            )
            qrels.extend(f"{qid}\t{rel}\t{n}\t1" for rel, n in places)
    (out / "qrels.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    link = out / "corpus"
    if not link.exists():
        link.symlink_to(corpus.resolve(), target_is_directory=True)
    return len(queries)


def transcript_overrides(corpus: Path, home: Path) -> dict[str, Value]:
    """Eval config of the transcripts folder: every JSONL a session source, no notes."""
    return {
        "memory.paths": [str(home / "no-memory")],
        "sessions.paths": [str(corpus.resolve() / "**" / "*.jsonl")],
    }


def main() -> None:
    from recalld.engine import Engine
    from recalld.surfaces.evaluation import eval_config

    root = Path(__file__).resolve().parents[1]
    corpus = root.parent / "shared" / "bench" / "transcripts"
    out = root / "bench" / "out" / "partial-ids"
    home = root / "bench" / "out" / "quality" / "partial-ids"
    home.mkdir(parents=True, exist_ok=True)
    engine = Engine(eval_config(corpus, home, transcript_overrides(corpus, home)), writable=True)
    try:
        engine.sync()
        with engine.reader() as store:
            indexed = "\n".join(str(r[0]) for r in store.conn.execute("SELECT text FROM chunks"))
    finally:
        engine.close()
    lines_of = {
        str(p.relative_to(corpus)): p.read_text(encoding="utf-8", errors="replace").split("\n")
        for p in sorted(corpus.rglob("*.jsonl"))
    }
    n = build(corpus, lines_of, indexed, out)
    print(f"{n} partial-identifier queries in {out}")


if __name__ == "__main__":
    main()
