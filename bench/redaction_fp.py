"""How often redaction fires on real text, by rule, with samples to eyeball for false positives.

    .venv/bin/python bench/redaction_fp.py [--data ../shared/bench] [--samples 8] [--json out.json]

Runs :func:`redact` over every decoded string of every JSONL line of the transcript sets (Claude
Code transcripts, LoCoMo as transcripts) and over the text of the LoCoMo Markdown notes, and
:func:`redact_line` over every raw line. Prints redactions per set and per kind, and for each kind
a few hits with the text around them (what was replaced is shown between >>> <<<). None of these
sets holds a real secret, so every hit is a false positive unless the sample shows a real
credential shape (the public docs examples some transcripts quote).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "daemon"))

from recalld.ingest.sessions.redaction import redact, redact_line  # noqa: E402

TOKEN = re.compile(r"\[REDACTED:([a-z_]+)\]")
SETS = {
    "transcripts": ("transcripts", "*.jsonl"),
    "locomo-transcripts": ("locomo-transcripts", "*.jsonl"),
    "locomo": ("locomo", "*.md"),
    "tldr": ("tldr", "*.md"),  # command help full of --password / --token flags
}


def strings(value: Any) -> Iterator[str]:
    """Every string in a parsed JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def texts(folder: Path, pattern: str) -> Iterator[tuple[str, str]]:
    """(kind, text): decoded strings and raw lines of JSONL files, whole Markdown files."""
    for path in sorted(folder.rglob(pattern)):
        if pattern.endswith(".md"):
            yield "text", path.read_text(errors="replace")
            continue
        for raw in path.read_text(errors="replace").splitlines():
            yield "line", raw
            try:
                parsed = json.loads(raw)
            except ValueError:
                continue
            for text in strings(parsed):
                yield "text", text


def replaced(before: str, after: str) -> list[tuple[str, str, str]]:
    """(kind, what was replaced, context) for each token ``redact`` put into ``after``."""
    pieces = TOKEN.split(after)  # text, kind, text, kind, ..., text
    literals, kinds = pieces[0::2], pieces[1::2]
    pattern = "(.*?)".join(re.escape(lit) for lit in literals)
    m = re.fullmatch(pattern, before, re.S) if len(before) < 200_000 else None
    out = []
    for i, kind in enumerate(kinds):
        if m is None:
            out.append((kind, "?", after[:200]))
            continue
        start, end = m.span(i + 1)
        context = f"{before[max(start - 60, 0) : start]}>>>{before[start:end]}<<<"
        out.append((kind, before[start:end], context + before[end : end + 40]))
    return out


def measure(folder: Path, pattern: str) -> dict[str, Any]:
    """Counts by kind for decoded strings and raw lines, and the hits of the strings."""
    counts: dict[str, Counter[str]] = {"text": Counter(), "line": Counter()}
    seen = Counter[str]()
    hits: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for kind, text in texts(folder, pattern):
        seen[kind] += 1
        out = redact(text) if kind == "text" else redact_line(text)
        if out == text:
            continue
        if kind == "line":
            counts["line"].update(TOKEN.findall(out))
            continue
        for rule, secret, context in replaced(text, out):
            counts["text"][rule] += 1
            hits[rule].append((secret, context.replace("\n", " ")))
    return {"seen": seen, "counts": counts, "hits": hits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "bench")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rng = random.Random(14)
    report: dict[str, Any] = {}
    for name, (sub, pattern) in SETS.items():
        result = measure(args.data / sub, pattern)
        counts = result["counts"]
        print(f"\n== {name}: {dict(result['seen'])} strings/lines/files")
        print(
            f"   decoded strings: {sum(counts['text'].values())} redactions {dict(counts['text'])}"
        )
        print(
            f"   raw lines (get): {sum(counts['line'].values())} redactions {dict(counts['line'])}"
        )
        for rule, found in sorted(result["hits"].items()):
            for secret, context in rng.sample(found, min(args.samples, len(found))):
                print(f"   [{rule}] {secret[:60]!r}  ...{context[-160:]!r}")
        report[name] = {k: dict(v) for k, v in counts.items()}
        report[name]["seen"] = dict(result["seen"])
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
