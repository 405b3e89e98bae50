"""``recalld mcp`` answers each request it read before stdin closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import write
from daemon_process import wait_for
from recalld_client import Client
from test_mcp import shutdown_daemon

pytest.importorskip("mcp")

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "sh", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _call(id_: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}


@pytest.mark.timeout(120)
def test_requests_piped_then_closed_are_all_answered(home: Path) -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n")
    write(home / "memory" / "deploy.md", "# Deploy\n\nThe wombat-42 deploy runs every night.\n")
    lines = [
        INIT,
        INITIALIZED,
        _call(2, "memory_search", {"query": "wombat-42 deploy"}),
        _call(3, "memory_get", {"path": str(home / "memory" / "deploy.md")}),
    ]
    stdin = "".join(json.dumps(m) + "\n" for m in lines)
    try:
        # The daemon is not running: the first call starts it, after stdin has closed.
        first = _piped(home, stdin)
        assert sorted(first) == [1, 2, 3]
        assert not first[2]["result"].get("isError"), first[2]  # it may still be indexing
        assert "wombat-42" in first[3]["result"]["content"][0]["text"]
        with Client(home / "run" / "recalld.sock", timeout=30) as c:
            wait_for(lambda: c.status()["state"] == "idle", timeout=60)
        again = _piped(home, stdin)  # the daemon running, the note indexed
        assert "deploy.md#L" in again[2]["result"]["content"][0]["text"]
    finally:
        shutdown_daemon(home)


def _piped(home: Path, stdin: str) -> dict[int, Any]:
    """``recalld mcp`` fed ``stdin`` and its end: the answers by request id."""
    env = {**os.environ, "RECALLD_HOME": str(home)}
    env.pop("RECALLD_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", "mcp"],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    return {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}


def _drain(messages: list[Any], run: Any, limit: float) -> tuple[list[Any], float]:
    """``draining`` over memory streams: what reached the client, and how long it took."""
    import anyio

    from recalld.surfaces.mcp_drain import draining

    out: list[Any] = []

    async def scenario() -> float:
        client_send, server_in = anyio.create_memory_object_stream[Any](16)
        server_out, client_recv = anyio.create_memory_object_stream[Any](16)
        async with client_send:
            for m in messages:
                await client_send.send(m)

        async def collect() -> None:
            async for m in client_recv:
                out.append(m)

        t = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            with anyio.fail_after(limit):
                await draining(server_in, server_out, run)
        return time.monotonic() - t

    took = anyio.run(scenario)
    return out, took


class _Msg:
    def __init__(self, **fields: Any) -> None:
        self.message = type("M", (), fields)()


def test_a_call_never_answered_is_left_after_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    import anyio

    from recalld.surfaces import mcp_drain

    monkeypatch.setattr(mcp_drain, "MAX_DRAIN_S", 0.5)

    async def run(read: Any, write: Any) -> None:
        async for m in read:  # answers request 1, never request 2
            if getattr(m.message, "id", None) == 1:
                await write.send(_Msg(id=1, result={}))
        await anyio.sleep(0)

    out, took = _drain([_Msg(id=1, method="a"), _Msg(id=2, method="b")], run, 10)
    assert [m.message.id for m in out] == [1]
    assert 0.4 < took < 5


def test_a_cancelled_call_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from recalld.surfaces import mcp_drain

    monkeypatch.setattr(mcp_drain, "MAX_DRAIN_S", 30.0)

    async def run(read: Any, write: Any) -> None:
        async for _ in read:  # answers nothing
            pass

    cancel = _Msg(method="notifications/cancelled", params={"requestId": 7})
    out, took = _drain([_Msg(id=7, method="tools/call"), cancel], run, 10)
    assert out == [] and took < 5
