"""``memory_write`` and ``memory_forget`` over MCP stdio: the SDK's client, a real daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import env_for, mcp_stdio_params
from test_mcp import shutdown_daemon, text_of

pytest.importorskip("mcp")


@pytest.mark.timeout(180)
def test_mcp_write_then_search_then_forget(home: Path) -> None:
    import anyio
    import jsonschema
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    (home / "config.toml").write_text('[sessions]\npaths = []\n[embedding]\nprovider = "none"\n')
    server = mcp_stdio_params(home)

    async def scenario() -> None:
        async with stdio_client(server) as (read, write_), ClientSession(read, write_) as session:
            init = await session.initialize()
            assert "memory_write" in (init.instructions or "")
            tools = {t.name: t for t in (await session.list_tools()).tools}
            write_tool, forget_tool = tools["memory_write"], tools["memory_forget"]
            assert write_tool.input_schema["required"] == ["text"]
            assert "Never write secrets" in (write_tool.description or "")
            assert set(forget_tool.input_schema["properties"]) == {"citation", "session", "undo"}
            assert forget_tool.annotations is not None and forget_tool.annotations.destructive_hint

            wrote = await session.call_tool(
                "memory_write",
                {"text": "Deploys happen on Tuesdays zqxmcp1", "tags": ["process"],
                 "note": "team.md"},
            )  # fmt: skip
            assert not wrote.is_error, text_of(wrote)
            typed = wrote.structured_content
            jsonschema.validate(typed, write_tool.output_schema)
            assert typed["path"] == str(home / "memory" / "team.md") and not typed["duplicate"]
            assert text_of(wrote) == f"written: {typed['citation']}"

            found = await session.call_tool("memory_search", {"query": "zqxmcp1"})
            hits = json.loads(text_of(found))["results"]
            assert [h["citation"].split("#")[0] for h in hits] == [typed["path"]]

            again = await session.call_tool(
                "memory_write",
                {"text": "Deploys happen on Tuesdays zqxmcp1", "tags": ["process"],
                 "note": "team.md"},
            )  # fmt: skip
            assert again.structured_content["duplicate"] is True

            fuzzy = await session.call_tool("memory_forget", {"citation": typed["path"]})
            assert fuzzy.is_error and "exact 'path#Lx-Ly'" in text_of(fuzzy)
            both = await session.call_tool(
                "memory_forget", {"citation": typed["citation"], "session": "x"}
            )
            assert both.is_error and "exactly one" in text_of(both)

            forgot = await session.call_tool("memory_forget", {"citation": typed["citation"]})
            assert not forgot.is_error, text_of(forgot)
            jsonschema.validate(forgot.structured_content, forget_tool.output_schema)
            assert forgot.structured_content["linesRemoved"] == 2
            gone = await session.call_tool("memory_search", {"query": "zqxmcp1"})
            assert json.loads(text_of(gone))["results"] == []
            assert "zqxmcp1" not in (home / "memory" / "team.md").read_text()

            # Refusals the agent can act on: said for this tool, not for memory_get.
            escape = await session.call_tool("memory_write", {"text": "x", "note": "../x.md"})
            assert escape.is_error and "'..'" in text_of(escape)
            assert "memory_write writes notes only inside" in text_of(escape)
            assert "memory_get" not in text_of(escape)
            kept = await session.call_tool("memory_write", {"text": "a", "note": "old/a.md"})
            assert not kept.is_error, text_of(kept)
            forget = [sys.executable, "-m", "recalld.surfaces.cli", "forget", "old"]
            subprocess.run(forget, env=env_for(home), check=True, timeout=60)
            into = await session.call_tool("memory_write", {"text": "zqxmcp3", "note": "old/b.md"})
            assert into.is_error and "is forgotten" in text_of(into), text_of(into)
            assert f"recalld forget {home / 'memory' / 'old'} --undo" in text_of(into)
            assert not (home / "memory" / "old" / "b.md").exists()
            huge = await session.call_tool("memory_write", {"text": "y" * 2_000_000})
            assert huge.is_error and "too long for one request" in text_of(huge), text_of(huge)

    try:
        anyio.run(scenario)
    finally:
        shutdown_daemon(home)
