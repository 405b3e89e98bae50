"""The last full run's sheet, read back from BENCHMARKS.json and BENCHMARKS.md.

``--update`` re-measures some parts over the last full run's sheet, which ``bench/out/`` keeps
(gitignored). A new machine has no ``bench/out/``: without this, re-measuring one part meant a
full run of more than an hour. Everything the report shows comes back: the metrics, notes and
quality tables from the JSON; the load average at the end, the stage times, the earlier
re-measurements and the profile tables from the Markdown the same run wrote.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from bench.common import Sheet

__all__ = ["restore"]

_TABLES = ("quality", "quality_meta", "ablation", "transcript_needles")
_NOT_METRICS = frozenset({"machine", "run", "wall_s", "targets", "notes", "errors", *_TABLES})
_UPDATE = re.compile(
    r"^- re-measured after it, replacing its figures of those parts: (?P<parts>.+?) on "
    r"(?P<date>\S+) at commit `(?P<commit>[^`]+)` \(source hash `(?P<source_hash>[^`]+)`; "
    r"load average at start / end (?P<start>\[[^\]]*\]) / (?P<end>\[[^\]]*\])\)$",
    re.M,
)
_LOAD_END = re.compile(r"^- load average at start / end: \[[^\]]*\] / (\[[^\]]*\]|None)", re.M)
_STAGES = re.compile(r"^Stage times \(s\): (.*)$", re.M)
_SECTION = re.compile(r"^### (\S+)\n\n```\n(.*?)\n```$", re.M | re.S)


def restore(json_path: Path, md_path: Path) -> tuple[Sheet, dict[str, Any]]:
    """(sheet, meta) of the run that wrote both files, as ``Sheet.dump`` would have kept them."""
    data = json.loads(json_path.read_text(encoding="utf-8"))
    md = md_path.read_text(encoding="utf-8")
    metrics = {k: v for k, v in data.items() if k not in _NOT_METRICS}
    tables: dict[str, Any] = {k: data[k] for k in _TABLES if data.get(k) is not None}
    for name, body in _SECTION.findall(md):
        if name.startswith("profile_"):
            tables[name] = body
        elif name.endswith("_ms"):
            tables[name] = ast.literal_eval(body)
    meta: dict[str, Any] = {
        "machine": data["machine"],
        "run": data["run"],
        "wall_s": data["wall_s"],
    }
    end = _LOAD_END.search(md)
    meta["loadavg_end"] = ast.literal_eval(end.group(1)) if end else None
    stages = _STAGES.search(md)
    meta["stages"] = (
        {
            name: float(value)
            for name, value in (s.rsplit(" ", 1) for s in stages.group(1).split(", "))
        }
        if stages
        else {}
    )
    meta["updates"] = [
        {
            "parts": u["parts"].split(", "),
            "date": u["date"],
            "commit": u["commit"],
            "source_hash": u["source_hash"],
            "loadavg": [ast.literal_eval(u["start"]), ast.literal_eval(u["end"])],
        }
        for u in _UPDATE.finditer(md)
    ]
    return Sheet(
        metrics, dict(data.get("notes") or {}), tables, dict(data.get("errors") or {})
    ), meta
