"""The transcript needle set end to end: real transcript lines, a real engine, rank 1."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from conftest import BENCH, make_config, needs_bench
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import transcript_needles as tn  # noqa: E402

SPOTTER = BENCH / "transcripts" / "spotter"
# Two small sessions, one with a subagent file: a few hundred real lines.
FILES = (
    "short.jsonl",
    "tool_heavy.jsonl",
    "ae4a77f8-aedd-4bc1-888f-c94edc91af04/subagents/agent-aac57f5.jsonl",
)

pytestmark = needs_bench("transcripts", "spotter")


def _copy(dest: Path) -> None:
    for rel in FILES:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SPOTTER / rel, dest / rel)


def _escaped_tool_result(dest: Path) -> str:
    """A tool_result line of real shape whose output is JSON text: a path glued to ``\\n``."""
    path = dest / "short.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        rec = json.loads(line)
        content = rec.get("message", {}).get("content")
        if rec.get("type") == "user" and isinstance(content, list):
            block = next((b for b in content if b.get("type") == "tool_result"), None)
            if block is not None:
                block["content"] = '{"out":"ok\\nlib\\/quill_web\\/pane_grid_live.ex:12"}'
                rec.pop("toolUseResult", None)
                lines[i] = json.dumps(rec)
                path.write_text("\n".join(lines) + "\n", encoding="utf-8")
                return "lib/quill_web/pane_grid_live.ex"
    raise AssertionError("no tool_result line in short.jsonl")


def _rank(engine: Engine, root: Path, query: str, rows: tuple[tuple[str, int], ...]) -> int:
    res = engine.searcher.search(
        {"query": query, "max_results": 10, "min_score": 0.0, "mode": "keyword"}
    )
    for rank, hit in enumerate(res["results"], 1):
        rel = str(Path(hit["path"]).relative_to(root))
        if any(rel == r and hit["start_line"] <= n <= hit["end_line"] for r, n in rows):
            return rank
    return 0


def test_needles_from_real_lines_rank_first(home: Path) -> None:
    root = home / "transcripts"
    _copy(root)
    glued = _escaped_tool_result(root)
    lines = tn.load_lines(root)
    needles = tn.build(lines, n=24, seed=7)
    assert len(needles) == 24
    assert len({nd.location for nd in needles}) >= 2 and len({nd.shape for nd in needles}) >= 3
    glued_rows = tuple((x.rel, x.number) for x in lines if tn.boundary(glued).search(x.text))
    assert len(glued_rows) == 1  # the needle reader decodes it like any other
    config = make_config(home, sessions__paths=[str(root / "**" / "*.jsonl")])
    engine = Engine(config, choice=ProviderChoice(None, "keyword only (test)"))
    try:
        engine.sync()
        ranks = {nd.text: _rank(engine, root, nd.text, nd.rows) for nd in needles}
        ranks[glued] = _rank(engine, root, glued, glued_rows)
    finally:
        engine.close()
    assert ranks[glued] == 1  # the JSON-escaped path inside a tool result
    missed = {text: r for text, r in ranks.items() if r != 1}
    assert len(missed) <= 2, missed
