"""The socket server on real Unix sockets: hostile input, limits, single instance, shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld import errors
from recalld.serve.server import AlreadyRunning, Handler, Server, ServerThread, StreamHandler
from recalld_client.protocol import HEADER, PROTOCOL_VERSION, read_frame, request, write_frame

pytestmark = pytest.mark.timeout(60)


def _slow(params: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(params.get("s", 0.3)))
    return {"slept": params.get("s", 0.3)}


def _raise_forbidden(params: dict[str, Any]) -> dict[str, Any]:
    raise errors.Forbidden("outside the roots")


def _crash(params: dict[str, Any]) -> dict[str, Any]:
    raise ZeroDivisionError("boom")


HANDLERS: dict[str, Handler] = {
    "echo": lambda p: p,
    "slow": _slow,
    "forbidden": _raise_forbidden,
    "crash": _crash,
    "not_a_dict": lambda p: [1, 2],  # type: ignore[dict-item,return-value]
    "huge": lambda p: {"blob": b"x" * 5000},
}


@pytest.fixture
def tmp() -> Iterator[Path]:
    # AF_UNIX paths are short (107 bytes): pytest's tmp_path can be too long.
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="rcd"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _server(path: Path, streams: dict[str, StreamHandler] | None = None, **kw: Any) -> Server:
    return Server(HANDLERS, streams or {}, path, **kw)


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def _rpc(sock: socket.socket, req_id: int, method: str, **params: Any) -> dict[str, Any]:
    write_frame(sock, request(req_id, method, params))
    return read_frame(sock)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_hello_and_capabilities(tmp: Path) -> None:
    with ServerThread(_server(tmp / "s.sock")), _connect(tmp / "s.sock") as sock:
        msg = _rpc(sock, 1, "hello")
    assert msg["id"] == 1
    hello = msg["result"]
    assert hello["protocol"] == PROTOCOL_VERSION
    assert hello["pid"] == os.getpid()
    assert {"hello", "shutdown", "echo"} <= set(hello["capabilities"])


def test_permissions_lock_and_cleanup(tmp: Path) -> None:
    run = tmp / "run"
    run.mkdir(mode=0o755)
    os.chmod(run, 0o755)
    path = run / "recalld.sock"
    with ServerThread(_server(path)):
        assert stat.S_IMODE(os.stat(run).st_mode) == 0o700
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert (run / "recalld.lock").read_text().strip() == str(os.getpid())
    assert not path.exists()
    with ServerThread(_server(path)), _connect(path) as sock:  # the lock was released
        assert _rpc(sock, 1, "echo", a=1)["result"] == {"a": 1}


def test_second_server_is_refused(tmp: Path) -> None:
    path = tmp / "s.sock"
    with ServerThread(_server(path)):
        with pytest.raises(AlreadyRunning, match=f"pid {os.getpid()}") as info:
            ServerThread(_server(path)).start()
        assert info.value.code == "unavailable"
        assert "recalld status" in str(info.value)
        with _connect(path) as sock:  # the first one is untouched
            assert _rpc(sock, 1, "echo", x=2)["result"] == {"x": 2}


def test_stale_socket_is_replaced(tmp: Path) -> None:
    path = tmp / "s.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens
    assert path.exists()
    with ServerThread(_server(path)), _connect(path) as sock:
        assert _rpc(sock, 1, "echo")["result"] == {}


def test_listening_socket_without_lock_is_not_stolen(tmp: Path) -> None:
    path = tmp / "s.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as squatter:
        squatter.bind(str(path))
        squatter.listen()
        with pytest.raises(AlreadyRunning):
            ServerThread(_server(path)).start()
        assert path.exists()


def test_path_that_is_not_a_socket_is_left_alone(tmp: Path) -> None:
    path = tmp / "s.sock"
    path.write_text("precious")
    with pytest.raises(errors.ConfigError, match="not a socket"):
        ServerThread(_server(path)).start()
    assert path.read_text() == "precious"


def test_socket_path_too_long(tmp: Path) -> None:
    path = tmp / ("d" * 120) / "s.sock"
    with pytest.raises(errors.ConfigError, match="RECALLD_HOME"):
        ServerThread(_server(path)).start()


def test_many_requests_on_one_connection(tmp: Path) -> None:
    with ServerThread(_server(tmp / "s.sock")), _connect(tmp / "s.sock") as sock:
        for i in range(300):
            assert _rpc(sock, i, "echo", i=i) == {"id": i, "result": {"i": i}}


def test_requests_on_one_connection_run_concurrently(tmp: Path) -> None:
    with ServerThread(_server(tmp / "s.sock")), _connect(tmp / "s.sock") as sock:
        write_frame(sock, request(1, "slow", {"s": 0.5}))
        write_frame(sock, request(2, "echo", {"fast": True}))
        assert read_frame(sock)["id"] == 2  # answered while 1 still runs
        assert read_frame(sock) == {"id": 1, "result": {"slept": 0.5}}


def test_inflight_cap_serializes(tmp: Path) -> None:
    with ServerThread(_server(tmp / "s.sock", max_inflight=1)), _connect(tmp / "s.sock") as sock:
        write_frame(sock, request(1, "slow", {"s": 0.3}))
        write_frame(sock, request(2, "echo", {}))
        assert [read_frame(sock)["id"], read_frame(sock)["id"]] == [1, 2]


def test_errors_are_mapped_and_the_server_survives(
    tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="recalld.serve.server")
    with ServerThread(_server(tmp / "s.sock")), _connect(tmp / "s.sock") as sock:
        err = _rpc(sock, 1, "forbidden")["error"]
        assert err == {"code": "forbidden", "message": "outside the roots"}
        err = _rpc(sock, 2, "crash")["error"]
        assert err["code"] == "internal" and "ZeroDivisionError" in err["message"]
        assert _rpc(sock, 3, "not_a_dict")["error"]["code"] == "internal"
        assert _rpc(sock, 4, "nope")["error"]["code"] == "bad_request"
        assert _rpc(sock, 5, "echo", ok=1)["result"] == {"ok": 1}
    crash = [r for r in caplog.records if r.exc_info and "crash" in r.getMessage()]
    assert crash and crash[0].exc_info is not None
    assert crash[0].exc_info[0] is ZeroDivisionError


def test_bad_envelopes_keep_the_connection(tmp: Path) -> None:
    with ServerThread(_server(tmp / "s.sock")), _connect(tmp / "s.sock") as sock:
        write_frame(sock, {"v": 1, "method": "echo"})
        assert read_frame(sock) == {
            "id": None,
            "error": {"code": "bad_request", "message": "a request needs an integer id"},
        }
        write_frame(sock, {"v": 1, "id": 2, "params": {}})
        assert read_frame(sock)["error"]["code"] == "bad_request"
        write_frame(sock, {"v": 1, "id": 3, "method": "echo", "params": [1]})
        assert read_frame(sock)["error"]["code"] == "bad_request"
        write_frame(sock, {"v": 1, "id": 4, "method": ["echo"], "params": {}})
        assert read_frame(sock)["error"]["code"] == "bad_request"
        write_frame(sock, {"id": 4, "method": "echo"})  # no v, no params: lenient
        assert read_frame(sock) == {"id": 4, "result": {}}


def test_newer_protocol_version_is_refused_except_hello(tmp: Path) -> None:
    with ServerThread(_server(tmp / "s.sock")), _connect(tmp / "s.sock") as sock:
        write_frame(sock, {"v": PROTOCOL_VERSION + 1, "id": 1, "method": "echo", "params": {}})
        err = read_frame(sock)["error"]
        assert err["code"] == "version" and "upgrade" in err["message"]
        write_frame(sock, {"v": PROTOCOL_VERSION + 1, "id": 2, "method": "hello", "params": {}})
        assert read_frame(sock)["result"]["protocol"] == PROTOCOL_VERSION


@pytest.mark.parametrize(
    "garbage",
    [
        HEADER.pack(3) + b"\xc1\xc1\xc1",  # invalid msgpack
        HEADER.pack(3) + b"\x92\x01\x02",  # an array, not a map
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a length of ~1.2 GB
    ],
)
def test_garbage_gets_an_error_frame_and_the_server_serves_others(
    tmp: Path, garbage: bytes
) -> None:
    path = tmp / "s.sock"
    with ServerThread(_server(path)):
        with _connect(path) as bad:
            bad.sendall(garbage)
            msg = read_frame(bad)
            assert msg["id"] is None
            assert msg["error"]["code"] in {"protocol", "too_large"}
            assert _closed(bad)
        with _connect(path) as good:
            assert _rpc(good, 1, "echo", still="up")["result"] == {"still": "up"}


def test_oversized_length_is_refused_without_reading_the_body(tmp: Path) -> None:
    path = tmp / "s.sock"
    with ServerThread(_server(path, max_frame=1024)):
        with _connect(path) as bad:
            bad.sendall(HEADER.pack(1025))  # and never any body
            msg = read_frame(bad)
            assert msg["id"] is None and msg["error"]["code"] == "too_large"
            assert _closed(bad)
        with _connect(path) as good:
            assert _rpc(good, 1, "echo")["result"] == {}
            # An answer over the cap is refused, the connection lives on.
            assert _rpc(good, 2, "huge")["error"]["code"] == "too_large"
            assert _rpc(good, 3, "echo", a=1)["result"] == {"a": 1}


def test_connection_cap(tmp: Path) -> None:
    path = tmp / "s.sock"
    with ServerThread(_server(path, max_connections=2)):
        with _connect(path) as a, _connect(path) as b:
            assert _rpc(a, 1, "hello")["result"]
            assert _rpc(b, 1, "hello")["result"]
            with _connect(path) as c:
                msg = read_frame(c)
                assert msg["error"]["code"] == "too_many_connections"
                assert "too many connections" in msg["error"]["message"]
        with _connect(path) as d:  # slots are given back
            assert _rpc(d, 1, "hello")["result"]


def test_other_uid_is_refused(tmp: Path) -> None:
    path = tmp / "s.sock"
    server = _server(path)
    with ServerThread(server):
        server._uid = os.getuid() + 1  # pretend the daemon belongs to someone else
        with _connect(path) as sock:
            msg = read_frame(sock)
            assert msg["error"]["code"] == "forbidden"
            assert _closed(sock)


def _events(n: int | None, stopped: threading.Event | None = None) -> StreamHandler:
    async def stream(params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        try:
            i = 0
            while n is None or i < n:
                yield {"seq": i, "state": "ready"}
                i += 1
                await asyncio.sleep(0.01)
        finally:
            if stopped is not None:
                stopped.set()

    return stream


def test_stream_events_then_a_result(tmp: Path) -> None:
    path = tmp / "s.sock"
    with ServerThread(_server(path, streams={"watch": _events(3)})), _connect(path) as sock:
        write_frame(sock, request(9, "watch"))
        frames = [read_frame(sock) for _ in range(4)]
        assert [f.get("event") for f in frames[:3]] == [
            {"seq": i, "state": "ready"} for i in range(3)
        ]
        assert frames[3] == {"id": 9, "result": {"events": 3}}
        assert _rpc(sock, 10, "echo")["result"] == {}  # the connection is still usable


def test_stream_is_closed_when_the_watcher_leaves(tmp: Path) -> None:
    path = tmp / "s.sock"
    stopped = threading.Event()
    with ServerThread(_server(path, streams={"watch": _events(None, stopped)})):
        with _connect(path) as sock:
            write_frame(sock, request(1, "watch"))
            assert read_frame(sock)["event"]["seq"] == 0
        assert stopped.wait(5)


def test_shutdown_lets_inflight_requests_finish(tmp: Path) -> None:
    path = tmp / "s.sock"
    thread = ServerThread(_server(path, streams={"watch": _events(None)}))
    thread.start()
    with _connect(path) as slow, _connect(path) as watcher, _connect(path) as admin:
        write_frame(watcher, request(1, "watch"))
        assert "event" in read_frame(watcher)
        write_frame(slow, request(1, "slow", {"s": 0.5}))
        time.sleep(0.1)
        assert _rpc(admin, 1, "shutdown")["result"]["stopping"] is True
        assert read_frame(slow) == {"id": 1, "result": {"slept": 0.5}}
        thread._thread.join(10)
        assert not thread._thread.is_alive()
        while (frame := _read_or_none(watcher)) is not None:  # events, then the end
            assert "event" in frame
    assert not path.exists()
    with pytest.raises(OSError):
        _connect(path)


def _read_or_none(sock: socket.socket) -> dict[str, Any] | None:
    try:
        return read_frame(sock)
    except Exception:  # noqa: BLE001 - any failure to read means the server closed or refused
        return None


def test_server_rejects_builtin_names(tmp: Path) -> None:
    with pytest.raises(ValueError):
        Server({"hello": lambda p: p}, {}, tmp / "s.sock")
    with pytest.raises(ValueError):
        Server({"watch": lambda p: p}, {"watch": _events(1)}, tmp / "s.sock")
