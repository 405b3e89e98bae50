"""Search filters and freshness end to end: a real daemon, the client, the CLI and MCP stdio.

One daemon (real model, real socket) serves the notes and transcript of test_search_filters;
its debounce is long, so an edited note stays unindexed (stale) until a test syncs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, mcp_stdio_params
from daemon_process import DaemonProcess
from recalld_client import BadRequest
from test_search_filters import CWD, SESSION_ID, populate

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    home = Path(tempfile.mkdtemp(prefix="rcd-", dir="/tmp"))
    (home / "memory").mkdir()
    populate(home)
    glob = json.dumps(str(home / "sessions" / "**" / "*.jsonl"))
    (home / "config.toml").write_text(f"[sessions]\npaths = [{glob}]\n[sync]\ndebounce_s = 60\n")
    proc = DaemonProcess(home).start()
    try:
        proc.wait_idle()
        yield proc
    finally:
        try:
            with proc.client(timeout=10) as c:
                c.shutdown()
            assert proc.proc is not None
            proc.proc.wait(30)
        finally:
            shutil.rmtree(home, ignore_errors=True)


def names(res: Any) -> set[str]:
    return {Path(r["path"]).name for r in res["results"]}


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", *args],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_client_filters_through_the_daemon(daemon: DaemonProcess) -> None:
    with daemon.client() as c:

        def search(**kw: Any) -> Any:
            return c.search("invoice signing key", min_score=0.0, max_results=20, **kw)

        assert names(search(tags="decision")) == {"decisions.md"}
        assert names(search(tags=["security"])) == {"runbook.md"}
        recent = search(since="7d")
        assert recent["results"] and {r["source"] for r in recent["results"]} == {"sessions"}
        assert names(search(until="2025-01-31")) >= {"decisions.md"}
        assert "2025-02-03.md" not in names(search(until="2025-01-31"))
        assert names(search(project="billing")) == {"decisions.md"}
        by_cwd = search(project=CWD)
        assert by_cwd["results"] and {r["source"] for r in by_cwd["results"]} == {"sessions"}
        assert names(search(session=SESSION_ID)) == names(by_cwd)
        for r in search()["results"]:
            assert r["stale"] is False and r["date"] and r["modified"] and r["indexed"]
        with pytest.raises(BadRequest, match="since must be an ISO date"):
            search(since="yesterday")
        with pytest.raises(BadRequest, match="tags must be a list of strings"):
            c.call("search", {"query": "invoice", "tags": {"a": 1}})


def test_cli_filters_and_stale_note(daemon: DaemonProcess) -> None:
    home = daemon.home
    tagged = cli(home, "search", "invoice", "signing", "--tag", "decision", "--json")
    assert tagged.returncode == 0, tagged.stderr
    assert names(json.loads(tagged.stdout)) == {"decisions.md"}
    both = cli(home, "search", "invoice", "--tag", "decision", "--tag", "security", "--json")
    assert names(json.loads(both.stdout)) == {"decisions.md", "runbook.md"}
    dated = cli(home, "search", "invoice", "key", "--since", "2025-02-01", "--until", "2025-02-03")
    assert dated.returncode == 0, dated.stderr
    assert "2025-02-03.md" in dated.stdout and "decisions.md" not in dated.stdout
    assert " 2025-02-03" in dated.stdout  # each hit's date
    by_session = cli(home, "search", "signing key", "--session", SESSION_ID, "--json")
    assert {r["source"] for r in json.loads(by_session.stdout)["results"]} == {"sessions"}
    by_project = cli(home, "search", "signing key", "--project", "billing-api", "--json")
    assert {r["source"] for r in json.loads(by_project.stdout)["results"]} == {"sessions"}
    bad = cli(home, "search", "invoice", "--until", "soon")
    assert bad.returncode == 2 and "until must be an ISO date" in bad.stderr
    # The console script's fast path parses the same flags (repeated --tag included).
    fast = subprocess.run(
        [str(Path(sys.executable).parent / "recalld"), "search", "invoice", "--tag", "nope",
         "--tag", "security", "--since", "2000-01-01", "--project", "ops", "--json"],
        env=env_for(home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert fast.returncode == 0, fast.stderr
    assert names(json.loads(fast.stdout)) == {"runbook.md"}

    note = home / "memory" / "billing" / "decisions.md"
    note.write_text(note.read_text() + "\nAlso: the invoice signing key is rotated yearly.\n")
    stale = cli(home, "search", "invoice", "signing", "--tag", "decision")
    assert stale.returncode == 0, stale.stderr
    assert "(changed since indexed)" in stale.stdout
    with daemon.client() as c:
        c.sync(wait=True)
    fresh = cli(home, "search", "invoice", "signing", "--tag", "decision")
    assert "decisions.md" in fresh.stdout and "(changed since indexed)" not in fresh.stdout


def test_mcp_filters_over_stdio(daemon: DaemonProcess) -> None:
    import anyio
    import jsonschema
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    home = daemon.home
    server = mcp_stdio_params(home)

    async def scenario() -> None:
        async with stdio_client(server) as (read, write_), ClientSession(read, write_) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            props = tools["memory_search"].input_schema["properties"]
            assert {"tags", "since", "until", "project", "session"} <= set(props)
            out_schema = tools["memory_search"].output_schema

            async def search(**args: Any) -> dict[str, Any]:
                res = await session.call_tool(
                    "memory_search", {"query": "invoice signing key", "minScore": 0, **args}
                )
                text = "".join(getattr(b, "text", "") for b in res.content)
                assert not res.is_error, text
                jsonschema.validate(res.structured_content, out_schema)
                return dict(json.loads(text))

            def files(body: dict[str, Any]) -> set[str]:
                return {Path(r["citation"].split("#")[0]).name for r in body["results"]}

            assert files(await search(tags=["decision"])) == {"decisions.md"}
            assert files(await search(tag="security")) == {"runbook.md"}  # alias
            assert files(await search(project="billing")) == {"decisions.md"}
            recent = await search(since="7d", session=SESSION_ID)
            assert recent["results"] and all(r["source"] == "sessions" for r in recent["results"])
            assert all(r["date"] >= "2000" for r in recent["results"])
            bad = await session.call_tool("memory_search", {"query": "x", "until": "later"})
            assert bad.is_error
            said = "".join(getattr(b, "text", "") for b in bad.content)
            assert "until must be an ISO date" in said

            note = home / "memory" / "ops" / "runbook.md"
            note.write_text(note.read_text() + "\nThe invoice signing key has a backup.\n")
            stale = await search(tags=["security"])
            assert stale["results"]
            assert all(r["changed"] == "(changed since indexed)" for r in stale["results"])
            others = await search(tags=["decision"])
            assert all("changed" not in r for r in others["results"])

    anyio.run(scenario)
    with daemon.client() as c:
        c.sync(wait=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with daemon.client() as c:
            res = c.search("invoice signing key", tags="security", min_score=0.0)
        if res["results"] and not any(r["stale"] for r in res["results"]):
            break
        time.sleep(0.2)
    assert res["results"] and not any(r["stale"] for r in res["results"])
