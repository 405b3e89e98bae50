"""Bad input on the socket (issue 8): stalled and oversized frames, against a real server
on a real socket with short timeouts: a client stalled in a frame is dropped, an oversized
request is told it is too large, and requests are capped below answers."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recalld.serve.server import MAX_REQUEST, Server, ServerThread
from recalld_client import Client, TooLarge
from recalld_client.protocol import HEADER
from reliability_socket_support import Wire

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="rcd"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_client_stalled_in_a_frame_is_dropped(short_tmp: Path) -> None:
    path = short_tmp / "s.sock"
    server = Server({"echo": lambda p: p}, {}, path, frame_timeout=0.5)
    with ServerThread(server), Wire(path) as idle, Wire(path) as stalled:
        stalled.send(HEADER.pack(1000) + b"\x81")  # 1 of 1000 body bytes, then silence
        started = time.monotonic()
        msg = stalled.read()
        assert msg is not None and msg["id"] is None
        assert msg["error"]["code"] == "protocol" and "incomplete" in msg["error"]["message"]
        assert stalled.read() is None  # and the slot is given back
        assert 0.4 < time.monotonic() - started < 10
        time.sleep(0.6)  # an idle connection between frames is never timed out
        assert idle.rpc({"v": 1, "id": 1, "method": "echo", "params": {"a": 1}}) == {
            "id": 1,
            "result": {"a": 1},
        }


def test_oversized_request_gets_too_large_not_a_broken_pipe(short_tmp: Path) -> None:
    """A client may encode up to 8 MiB; over the 1 MiB request cap it is told why, by name."""
    path = short_tmp / "s.sock"
    with ServerThread(Server({"echo": lambda p: p}, {}, path)), Client(path) as c:
        with pytest.raises(TooLarge, match="cap of requests"):
            c.call("echo", {"blob": "q" * (3 * MAX_REQUEST)})
        assert c.call("echo", {"ok": 1}) == {"ok": 1}  # a new connection, and served


@pytest.mark.slow
def test_requests_are_capped_below_answers(short_tmp: Path) -> None:
    """A 2 MiB request is refused from its header (requests are small; answers may not be)."""
    path = short_tmp / "s.sock"
    with ServerThread(Server({"echo": lambda p: p}, {}, path)):
        with Wire(path) as wire:
            wire.send(HEADER.pack(MAX_REQUEST + 1))  # no body is ever sent
            msg = wire.read()
            assert msg is not None and msg["error"]["code"] == "too_large"
            assert wire.read() is None
        with Wire(path) as wire:
            blob = "y" * (MAX_REQUEST - 100)
            answer = wire.rpc({"v": 1, "id": 2, "method": "echo", "params": {"b": blob}})
            assert answer == {"id": 2, "result": {"b": blob}}
            hello = wire.rpc({"v": 1, "id": 3, "method": "hello", "params": {}})
            assert hello is not None and hello["result"]["max_request"] == MAX_REQUEST
