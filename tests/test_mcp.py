"""``recalld mcp`` end to end: the SDK's stdio client, a real MCP server process, a real daemon."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import mcp_stdio_params, write
from daemon_process import wait_for
from recalld.surfaces import mcp_server
from recalld_client import Client, RecalldClientError, is_running

pytest.importorskip("mcp")

CITATION = re.compile(r"^(?P<path>/.+)#L(?P<start>\d+)-L(?P<end>\d+)$")

NOTES = {
    "decisions.md": "# Decisions\n\n"
    "## Storage\n\n"
    "On 2024-03-12 we chose SQLite with sqlite-vec over Postgres because the daemon must run\n"
    "on a laptop without a server. Decided by Priya after the latency benchmark.\n",
    "people.md": "# People\n\nMarek prefers reviews in the morning and writes tests before code.\n",
    # 25,000 lines of 12 chars, then one line of 100,000: over memory_get's cap both ways.
    "long.md": "# Long\n" + "line of text\n" * 25_000 + "x" * 100_000 + "\n",
}


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def shutdown_daemon(home: Path) -> None:
    socket = home / "run" / "recalld.sock"
    try:
        with Client(socket, timeout=10) as c:
            c.shutdown()
    except RecalldClientError:
        pass
    wait_for(lambda: not is_running(socket, timeout=0.5), timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_mcp_tools_over_stdio(home: Path) -> None:
    import anyio
    import jsonschema
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n")
    for name, text in NOTES.items():
        write(home / "memory" / name, text)
    assert not is_running(home / "run" / "recalld.sock")
    server = mcp_stdio_params(home)
    server.cwd = home  # where the agent runs it

    async def scenario() -> None:
        async with stdio_client(server) as (read, write_), ClientSession(read, write_) as session:
            init = await session.initialize()
            assert init.server_info.name == "recalld"
            assert "memory_search" in (init.instructions or "")

            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == {"memory_search", "memory_get", "memory_write", "memory_forget"}
            search_schema = tools["memory_search"].input_schema
            assert search_schema["required"] == ["query"]
            assert set(search_schema["properties"]) == {
                "query",
                "maxResults",
                "minScore",
                "source",
                "pathPrefix",
                "maxTokens",
                "kinds",
                "tags",
                "since",
                "until",
                "project",
                "session",
            }
            assert search_schema["properties"]["source"]["enum"] == ["memory", "sessions"]
            kinds = search_schema["properties"]["kinds"]["items"]["enum"]
            assert kinds == ["note", "message", "tool_call", "tool_output"]
            get_schema = tools["memory_get"].input_schema
            assert get_schema["required"] == ["path"]
            assert set(get_schema["properties"]) == {"path", "from", "lines", "decoded"}
            assert "BEFORE" in (tools["memory_search"].description or "")
            # Typed output: both tools declare an output schema (the SDK client validates every
            # successful call's structuredContent against it, and so does this test).
            out_schemas = {name: t.output_schema for name, t in tools.items()}
            assert out_schemas["memory_search"]["required"] == ["results", "mode"]
            assert set(out_schemas["memory_get"]["required"]) == {
                "path",
                "startLine",
                "endLine",
                "totalLines",
                "citation",
                "text",
            }

            # No daemon runs: the first call starts it; the index is built on start-up.
            deadline = time.monotonic() + 90
            while True:
                res = await session.call_tool(
                    "memory_search", {"query": "why did we choose sqlite-vec", "maxResults": 3}
                )
                assert not res.is_error, text_of(res)
                body = json.loads(text_of(res))
                if body["results"]:
                    break
                assert time.monotonic() < deadline, body
                await anyio.sleep(0.2)
            jsonschema.validate(res.structured_content, out_schemas["memory_search"])
            assert res.structured_content == body  # the text block is the same answer
            top = body["results"][0]
            assert top["source"] == "memory" and 0 < top["score"] <= 1
            assert "sqlite-vec" in top["snippet"]
            m = CITATION.match(top["citation"])
            assert m is not None, top["citation"]
            assert Path(m["path"]).name == "decisions.md"
            assert is_running(home / "run" / "recalld.sock")

            first, last = int(m["start"]), int(m["end"])
            got = await session.call_tool(
                "memory_get", {"path": m["path"], "from": first, "lines": last - first + 1}
            )
            assert not got.is_error, text_of(got)
            header, _, body_text = text_of(got).partition("\n")
            assert header.startswith(f"{m['path']}#L{first}-L")
            file_lines = (home / "memory" / "decisions.md").read_text().splitlines()
            assert body_text.splitlines() == file_lines[first - 1 : last]
            assert "chose SQLite with sqlite-vec" in body_text
            typed = got.structured_content
            jsonschema.validate(typed, out_schemas["memory_get"])
            assert typed["path"] == m["path"] and typed["startLine"] == first
            assert typed["text"] == body_text and typed["totalLines"] == len(file_lines)
            assert header.startswith(typed["citation"] + " ")

            # The whole citation works as a path too.
            again = await session.call_tool("memory_get", {"path": top["citation"]})
            assert text_of(again) == text_of(got)
            # A path relative to the agent's folder (the server runs in it; here the home,
            # whose memory/ is not under the memory folder itself) is read there.
            cited = Path(m["path"]).relative_to(home)
            here = await session.call_tool("memory_get", {"path": f"{cited}#L{first}-L{last}"})
            assert text_of(here) == text_of(got)

            # An answer stops at GET_CHARS, at a line's end, and says where to read on.
            long = str(home / "memory" / "long.md")
            cut = await session.call_tool("memory_get", {"path": long})
            typed = cut.structured_content
            jsonschema.validate(typed, out_schemas["memory_get"])
            assert len(typed["text"]) <= mcp_server.GET_CHARS < len(text_of(cut)) + 100
            assert typed["startLine"] == 1 and typed["endLine"] == 3_077  # "# Long" + 3,076
            assert typed["text"].splitlines()[-1] == "line of text"
            assert "from 3078" in typed["truncated"] and typed["truncated"] in text_of(cut)
            line = await session.call_tool("memory_get", {"path": long, "from": 25_002})
            assert line.structured_content["endLine"] == 25_002
            assert "line 25002 alone is 100,000 characters" in line.structured_content["truncated"]

            denied = await session.call_tool("memory_get", {"path": "/etc/passwd"})
            assert denied.is_error and denied.structured_content is None
            message = text_of(denied)
            assert "forbidden" in message and "/etc/passwd" in message
            assert "root:" not in message

            bad = await session.call_tool("memory_search", {"query": "x", "maxResults": "many"})
            assert bad.is_error and "maxResults must be an integer" in text_of(bad)
            unknown = await session.call_tool("memory_search", {"q": "x"})
            assert unknown.is_error and "unknown argument 'q'" in text_of(unknown)

            # The kind filter goes through to the daemon: notes only, or no tool output at all.
            notes = await session.call_tool(
                "memory_search", {"query": "sqlite-vec", "kinds": ["note"]}
            )
            hits = json.loads(text_of(notes))["results"]
            assert hits and {r["kind"] for r in hits} == {"note"}
            outputs = await session.call_tool(
                "memory_search", {"query": "sqlite-vec", "kinds": ["tool_output"]}
            )
            assert json.loads(text_of(outputs))["results"] == []
            wrong = await session.call_tool("memory_search", {"query": "x", "kinds": ["logs"]})
            assert wrong.is_error and "kinds must be a list" in text_of(wrong)

            # The server survived every error.
            ok = await session.call_tool(
                "memory_search", {"query": "Marek reviews", "source": "memory"}
            )
            assert not ok.is_error
            assert any("people.md" in r["citation"] for r in json.loads(text_of(ok))["results"])

    try:
        anyio.run(scenario)
    finally:
        shutdown_daemon(home)


# pure parts ---------------------------------------------------------------------------------


def test_search_params_validation_and_aliases() -> None:
    assert mcp_server.search_params(
        {
            "query": " cache ",
            "maxResults": 3,
            "minScore": 0.5,
            "source": "sessions",
            "pathPrefix": "projects/",
        }
    ) == {
        "query": "cache",
        "max_results": 3,
        "min_score": 0.5,
        "sources": "sessions",
        "path_prefix": "projects/",
    }
    assert mcp_server.search_params({"query": "x", "max_results": 2.0}) == {
        "query": "x",
        "max_results": 2,
    }
    assert mcp_server.search_params({"query": "x", "maxTokens": 500}) == {
        "query": "x",
        "max_tokens": 500,
    }
    for bad, message in [
        ({}, "missing required argument 'query'"),
        ({"query": "  "}, "query must be a non-empty string"),
        ({"query": "x", "maxResults": 0}, "maxResults must be between 1 and 50"),
        ({"query": "x", "maxResults": True}, "maxResults must be an integer"),
        ({"query": "x", "minScore": 2}, "minScore must be a number between 0 and 1"),
        ({"query": "x", "source": "web"}, "source must be 'memory' or 'sessions'"),
        ({"query": "x", "maxTokens": 10}, "maxTokens must be between 100 and 1000000"),
    ]:
        with pytest.raises(mcp_server.ToolError, match=re.escape(message)):
            mcp_server.search_params(bad)


def test_get_params_accepts_citations() -> None:
    assert mcp_server.get_params({"path": "/m/a.md#L3-L7"}) == {
        "path": "/m/a.md",
        "from_line": 3,
        "lines": 5,
    }
    assert mcp_server.get_params({"path": "/m/a.md#L3-L7", "lines": 2}) == {
        "path": "/m/a.md",
        "from_line": 3,
        "lines": 2,
    }
    assert mcp_server.get_params({"path": "/m/a.md", "from": 10}) == {
        "path": "/m/a.md",
        "from_line": 10,
    }
    with pytest.raises(mcp_server.ToolError, match="from must be at least 1"):
        mcp_server.get_params({"path": "a.md", "from": 0})


def test_format_search_carries_notes() -> None:
    text = mcp_server.format_search(
        {
            "results": [],
            "mode": "keyword",
            "degraded": "no embedding provider",
            "index": {"state": "syncing", "pending": 12, "last_sync": None},
        }
    )
    body = json.loads(text)
    assert body["degraded"] == "no embedding provider"
    assert "syncing, 12 files pending" in body["index"]
    assert body["note"] == "no matching memory"
    text = mcp_server.format_search(
        {
            "results": [
                {
                    "citation": "/m/a.md#L1-L3",
                    "source": "memory",
                    "score": 0.9,
                    "snippet": "a…",
                    "also": [{"citation": "/s/s.jsonl#L4-L4"}],
                }
            ],
            "mode": "hybrid",
            "budget": {"max_tokens": 200, "used_tokens": 150, "snippets_trimmed": 1, "dropped": 2},
        }
    )
    body = json.loads(text)
    assert body["results"][0]["also"] == ["/s/s.jsonl#L4-L4"]
    assert body["budget"] == "1 snippets trimmed, 2 results dropped to fit 200 tokens"


def test_daemon_that_cannot_start_is_a_tool_error(home: Path) -> None:
    import subprocess

    def spawn(log_path: Path) -> subprocess.Popen[bytes]:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("config error: bad key\n")
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    link = mcp_server.DaemonLink(start_timeout=10, spawn=spawn)
    with pytest.raises(mcp_server.ToolError, match=r"exited with code 3.*config error"):
        mcp_server.run_tool(link, "memory_search", {"query": "anything"})
    message = mcp_server.describe_error(mcp_server.ToolError("x"))
    assert message == "x"
