"""The client's watch stream against a real server: events then the end, the stream's
error raised, and the end when the daemon stops."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import recalld_client
from client_support import sock_path as sock_path  # a fixture
from client_support import tmp as tmp  # a fixture
from recalld import errors as daemon_errors
from recalld.serve.server import Server, ServerThread
from recalld_client import Client

pytestmark = pytest.mark.timeout(60)


async def _forever(params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    i = 0
    while True:
        yield {"seq": i}
        i += 1
        await asyncio.sleep(0.02)


def test_watch_delivers_events_then_ends(sock_path: Path) -> None:
    with Client(sock_path) as c:
        events = list(c.watch())
        assert [e["seq"] for e in events] == [0, 1, 2]
        assert events[-1]["state"] == "ready"
        assert c.hello()  # the shared connection was not involved


def test_watch_raises_the_stream_error(tmp: Path) -> None:
    async def failing(params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        yield {"seq": 0}
        raise daemon_errors.Unavailable("index is being swapped")

    path = tmp / "w.sock"
    with ServerThread(Server({}, {"watch": failing}, path)):
        stream = Client(path).watch()
        assert next(stream) == {"seq": 0}
        with pytest.raises(recalld_client.Unavailable, match="swapped"):
            next(stream)


def test_watch_ends_when_the_daemon_stops(tmp: Path) -> None:
    path = tmp / "w.sock"
    thread = ServerThread(Server({}, {"watch": _forever}, path))
    thread.start()
    seen = []
    for event in Client(path).watch():
        seen.append(event)
        if len(seen) == 3:
            threading.Thread(target=thread.stop).start()
    assert len(seen) >= 3
