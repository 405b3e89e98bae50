"""Whole transcripts through a real engine: identifiers only in tool content or subagents, kinds.

A real Claude Code session from ``../shared/bench/transcripts`` (read in place, never copied into
the repository) is synced by a real engine; each identifier below occurs on a single JSONL line
of that session, in the place its test names, and must come back first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import BENCH, env_for, make_engine, needs_bench
from recalld.engine import Engine
from recalld.ingest.sessions.formats import parse_file
from recalld.surfaces.mcp_server import format_search, get_params, search_params

SPOTTER = BENCH / "transcripts" / "spotter"
SESSION_ID = "ae4a77f8-aedd-4bc1-888f-c94edc91af04"
SESSION = SPOTTER / f"{SESSION_ID}.jsonl"
SUBAGENT = SPOTTER / SESSION_ID / "subagents" / "agent-aac57f5.jsonl"
GLOBS = [str(SPOTTER / f"{SESSION_ID}*.jsonl"), str(SPOTTER / SESSION_ID / "**" / "*.jsonl")]

pytestmark = [needs_bench("transcripts", "spotter", SESSION.name), pytest.mark.slow]

# (query, file, JSONL line, kind of the hit, where it lives)
NEEDLES = [
    # only deep inside a Read result (offset ~3900 of the output; the old index kept 400 chars)
    ("server_headers_sort_fn", SESSION, 229, "tool_output", "tool result"),
    # only in an Edit's new_string (the old one-line summary showed the file path alone)
    ("set_span_attributes", SESSION, 1859, "tool_call", "edit new string"),
    # only in the subagent session next to the main one
    ("lib/opentelemetry_ecto.ex", SUBAGENT, 20, "tool_output", "subagent"),
    # only after a JSON "\n" escape: raw FTS would index "ndeps" for it
    ("deps/opentelemetry_api/hex_metadata.conf", SESSION, 238, None, "escaped path"),
    # only in the summary a compacted session went on from (isCompactSummary)
    (
        f"-home-USER-projects-spotter-worktrees-spotter-4te/{SESSION_ID}.jsonl",
        SESSION,
        1482,
        "message",
        "compaction summary",
    ),
]


def _raw_line(path: Path, line: int) -> str:
    return path.read_text(encoding="utf-8").split("\n")[line - 1]


def test_needles_are_where_the_tests_say() -> None:
    """Guards the data: each needle is in one message of the parsed session (tool results'
    ``toolUseResult`` echoes are metadata), of the kind the test says."""
    files = [SESSION, *sorted((SPOTTER / SESSION_ID).rglob("*.jsonl"))]
    parsed = {f: parse_file(f, redact=False)[0] for f in files}
    kinds = {"tool_output": "tool_result", "tool_call": "tool_call", "message": "text"}
    for query, path, line, kind, where in NEEDLES:
        holders = {(f, m.line, m.kind) for f, ms in parsed.items() for m in ms if query in m.text}
        assert {(f, n) for f, n, _ in holders} == {(path, line)}, (query, holders)
        if kind is not None:
            assert {k for _, _, k in holders} == {kinds[kind]}
        if where == "escaped path":
            assert "\\n" + query in _raw_line(path, line)


@pytest.fixture(scope="module")
def keyword_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    home = tmp_path_factory.mktemp("kw")
    (home / "memory").mkdir()
    eng = make_engine(home, None, sessions__paths=GLOBS)
    eng.sync()
    yield eng
    eng.close()


def _top(eng: Engine, query: str, **params: Any) -> dict[str, Any]:
    res = eng.searcher.search({"query": query, "max_results": 10, **params})
    assert res["results"], (query, res)
    return dict(res["results"][0])


@pytest.mark.parametrize("needle", NEEDLES, ids=[n[4] for n in NEEDLES])
def test_found_first_by_keyword(keyword_engine: Engine, needle: tuple[Any, ...]) -> None:
    query, path, line, kind, _ = needle
    top = _top(keyword_engine, query, mode="keyword")
    assert top["path"] == str(path) and top["start_line"] <= line <= top["end_line"], top
    if kind is not None:
        assert top["kind"] == kind
    assert query.lower() in top["snippet"].lower()  # centred on the match, not the line's head


def test_results_say_what_they_are(keyword_engine: Engine) -> None:
    top = _top(keyword_engine, "server_headers_sort_fn", mode="keyword")
    assert (top["kind"], top["tool"]) == ("tool_output", "Read")
    edit = _top(keyword_engine, "set_span_attributes", mode="keyword")
    assert (edit["kind"], edit["tool"]) == ("tool_call", "Edit")
    talk = keyword_engine.searcher.search({"query": "opentelemetry", "kinds": ["message"]})
    assert talk["results"] and all(r["kind"] == "message" for r in talk["results"])
    assert all("tool" not in r for r in talk["results"])
    # The kind filter drops a needle that lives in another kind.
    only_calls = keyword_engine.searcher.search(
        {"query": "server_headers_sort_fn", "kinds": ["tool_call"]}
    )
    assert all(r["kind"] == "tool_call" for r in only_calls["results"])
    assert not any(r["start_line"] == 229 for r in only_calls["results"])


def test_bad_kinds_are_refused(keyword_engine: Engine) -> None:
    from recalld.errors import BadRequest

    with pytest.raises(BadRequest, match="kinds must be a list of"):
        keyword_engine.searcher.search({"query": "x", "kinds": ["tool_result"]})


def test_get_decoded_returns_the_readable_redacted_text(keyword_engine: Engine) -> None:
    raw = keyword_engine.searcher.get({"path": f"{SESSION}:229-229"})
    assert raw["text"].startswith("{") and json.loads(raw["text"])["type"] == "user"
    got = keyword_engine.searcher.get({"path": f"{SESSION}:229-229", "decoded": True})
    assert (got["start_line"], got["end_line"]) == (229, 229)
    assert got["text"].startswith("tool output")
    assert "server_headers_sort_fn" in got["text"] and got["text"].count("\n") > 20
    assert "\u2192" not in got["text"]  # the Read tool's line-number gutter is gone
    edit = keyword_engine.searcher.get(
        {"path": str(SESSION), "from_line": 1859, "lines": 1, "decoded": True}
    )
    assert "tool: Edit" in edit["text"] and "new_string: " in edit["text"]
    with pytest.raises(Exception, match="decoded must be true or false"):
        keyword_engine.searcher.get({"path": str(SESSION), "decoded": "yes"})


def test_kinds_and_decoded_through_the_mcp_arguments(keyword_engine: Engine) -> None:
    params = search_params({"query": "server_headers_sort_fn", "kinds": ["tool_output"]})
    assert params["kinds"] == ["tool_output"]
    body = json.loads(format_search(keyword_engine.searcher.search(params)))
    assert body["results"][0]["kind"] == "tool_output" and body["results"][0]["tool"] == "Read"
    assert "#L229-L229" in body["results"][0]["citation"]
    got = get_params({"path": f"{SESSION}#L229-L229", "decoded": True})
    assert got == {"path": str(SESSION), "from_line": 229, "lines": 1, "decoded": True}
    from recalld.surfaces.mcp_server import ToolError

    with pytest.raises(ToolError, match="kinds must be a list"):
        search_params({"query": "x", "kinds": ["chat"]})


def test_kind_filter_and_decoded_get_through_the_cli(home: Path) -> None:
    globs = ", ".join(json.dumps(g) for g in GLOBS)
    (home / "config.toml").write_text(
        f'[sessions]\npaths = [{globs}]\n[embedding]\nprovider = "none"\n'
    )

    def run(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "recalld.surfaces.cli", *args],
            env=env_for(home),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    run("sync")
    res = json.loads(run("search", "set_span_attributes", "--kind", "tool_call", "--json"))
    assert res["results"] and res["results"][0]["start_line"] == 1859
    assert {r["kind"] for r in res["results"]} == {"tool_call"}
    none = json.loads(run("search", "set_span_attributes", "--kind", "message", "--json"))
    assert not any(r["start_line"] == 1859 for r in none["results"])
    human = run("search", "set_span_attributes", "--kind", "tool_call", "--kind", "tool_output")
    assert "[sessions tool_call Edit]" in human
    decoded = run("get", f"{SESSION}:1859-1859", "--decoded")
    assert decoded.startswith("tool: Edit") and "set_span_attributes" in decoded


@pytest.fixture(scope="module")
def hybrid_engine(tmp_path_factory: pytest.TempPathFactory, local_embedder: Any) -> Iterator[Any]:
    home = tmp_path_factory.mktemp("hy")
    (home / "memory").mkdir()
    eng = make_engine(home, local_embedder, sessions__paths=GLOBS)
    eng.sync()
    yield eng
    eng.close()


@pytest.mark.parametrize("needle", NEEDLES, ids=[n[4] for n in NEEDLES])
def test_found_first_by_hybrid(hybrid_engine: Engine, needle: tuple[Any, ...]) -> None:
    query, path, line, _, _ = needle
    res = hybrid_engine.searcher.search({"query": query, "max_results": 10})
    assert res["mode"] == "hybrid"
    top = res["results"][0]
    assert top["path"] == str(path) and top["start_line"] <= line <= top["end_line"], top


def test_keyword_only_chunks_are_not_pending_vectors(hybrid_engine: Engine) -> None:
    counts = hybrid_engine.status()["counts"]
    assert counts["keyword_only_chunks"] > 0
    assert counts["vectors"] + counts["keyword_only_chunks"] == counts["chunks"]
