"""The client against real servers on Unix sockets (threads and subprocesses)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import recalld_client
from recalld import errors as daemon_errors
from recalld.serve.server import Handler, Server, ServerThread
from recalld_client import (
    Client,
    ConnectionLost,
    DaemonNotRunning,
    errors,
    is_running,
    locations,
)
from recalld_client.protocol import encode_frame, read_frame, request
from recalld_client.transport import (
    NamedPipeTransport,
    Transport,
    UnixTransport,
    default_transport,
    pipe_name_for,
)

pytestmark = pytest.mark.timeout(60)

RAISES = {
    "bad_request": daemon_errors.BadRequest("empty query"),
    "forbidden": daemon_errors.Forbidden("outside the roots"),
    "not_found": daemon_errors.NotFound("no such file"),
    "config": daemon_errors.ConfigError("bad config"),
    "index": daemon_errors.IndexError_("mixed vector spaces"),
    "provider": daemon_errors.ProviderError("no key"),
    "unavailable": daemon_errors.Unavailable("busy"),
    "internal": daemon_errors.RecalldError("plain base error"),
}


def _raise(params: dict[str, Any]) -> dict[str, Any]:
    raise RAISES[params["code"]]


def _slow(params: dict[str, Any]) -> dict[str, Any]:
    time.sleep(params.get("s", 1.0))
    return {"slept": True}


def _crash(params: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("bug")


HANDLERS: dict[str, Handler] = {
    "search": lambda p: {"params": p},
    "get": lambda p: {"params": p},
    "status": lambda p: {"state": "ready", "pending": 0},
    "sync": lambda p: {"params": p},
    "reindex": lambda p: {"params": p},
    "echo": lambda p: p,
    "raise": _raise,
    "crash": _crash,
    "slow": _slow,
}


async def _watch(params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    for i in range(int(params.get("n", 3))):
        yield {"seq": i, "state": "syncing" if i < 2 else "ready"}
        await asyncio.sleep(0.01)


async def _forever(params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    i = 0
    while True:
        yield {"seq": i}
        i += 1
        await asyncio.sleep(0.02)


@pytest.fixture
def tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="rcc"))  # short: AF_UNIX paths max 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sock_path(tmp: Path) -> Iterator[Path]:
    path = tmp / "run" / "recalld.sock"
    with ServerThread(Server(HANDLERS, {"watch": _watch}, path)):
        yield path


def test_public_api_is_pinned() -> None:
    assert sorted(recalld_client.__all__) == sorted(
        [
            "PROTOCOL_VERSION",
            "BadRequest",
            "Client",
            "ConfigError",
            "ConnectionLost",
            "DaemonNotRunning",
            "Forbidden",
            "FrameTooLarge",
            "GetResponse",
            "Hello",
            "IndexInfo",
            "IndexUnavailable",
            "InternalError",
            "NotFound",
            "ProtocolError",
            "ProviderError",
            "RecalldClientError",
            "Scores",
            "SearchResponse",
            "SearchResult",
            "StatusResponse",
            "Timeout",
            "TooLarge",
            "TooManyConnections",
            "Unavailable",
            "VersionMismatch",
            "WrongDaemon",
            "is_running",
        ]
    )
    for name in recalld_client.__all__:
        assert getattr(recalld_client, name) is not None


def test_import_is_light() -> None:
    code = (
        "import sys, recalld_client\n"
        "heavy = {'numpy', 'onnxruntime', 'apsw', 'watchdog', 'httpx', 'recalld', 'asyncio'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_hello_and_methods(sock_path: Path) -> None:
    with Client(sock_path) as c:
        hello = c.hello()
        assert hello["protocol"] == recalld_client.PROTOCOL_VERSION
        assert hello["pid"] == os.getpid()
        assert {"search", "get", "watch", "shutdown"} <= set(hello["capabilities"])
        assert c.status() == {"state": "ready", "pending": 0}
        assert c.sync() == {"params": {"wait": False}}
        assert c.reindex(wait=True) == {"params": {"wait": True}}
        assert c.call("echo", {"x": [1, b"\x00"]}) == {"x": [1, b"\x00"]}


def test_search_and_get_omit_unset_params(sock_path: Path) -> None:
    with Client(sock_path) as c:
        assert c.search("q") == {"params": {"query": "q"}}  # type: ignore[comparison-overlap]
        res: Any = c.search(
            "E1234",
            max_results=3,
            min_score=0.2,
            sources="memory",
            path_prefix="p/",
            mode="keyword",
        )
        assert res["params"] == {
            "query": "E1234",
            "max_results": 3,
            "min_score": 0.2,
            "sources": ["memory"],
            "path_prefix": "p/",
            "mode": "keyword",
        }
        res = c.search("q", sources=("memory", "sessions"))
        assert res["params"]["sources"] == ["memory", "sessions"]
        res = c.get("notes/a.md")
        assert res["params"] == {"path": "notes/a.md", "from_line": 1}
        res = c.get(Path("notes/a.md"), from_line=12, lines=5)
        assert res["params"] == {"path": "notes/a.md", "from_line": 12, "lines": 5}


class _Counting:
    """A transport factory that counts the connections made."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0

    def __call__(self) -> Transport:
        self.count += 1
        return UnixTransport(self.path)


def test_many_requests_share_one_connection(sock_path: Path) -> None:
    factory = _Counting(sock_path)
    with Client(sock_path, transport_factory=factory) as c:
        for i in range(500):
            assert c.call("echo", {"i": i}) == {"i": i}
    assert factory.count == 1


def test_twenty_concurrent_clients(sock_path: Path) -> None:
    def work(n: int) -> None:
        with Client(sock_path) as c:
            for i in range(50):
                assert c.call("echo", {"client": n, "i": i}) == {"client": n, "i": i}

    with ThreadPoolExecutor(20) as pool:
        list(pool.map(work, range(20)))


def test_one_client_shared_by_threads(sock_path: Path) -> None:
    with Client(sock_path) as c, ThreadPoolExecutor(8) as pool:
        out = list(pool.map(lambda i: c.call("echo", {"i": i}), range(400)))
    assert out == [{"i": i} for i in range(400)]


@pytest.mark.parametrize("code", sorted(RAISES))
def test_daemon_errors_become_client_classes(sock_path: Path, code: str) -> None:
    with Client(sock_path) as c:
        with pytest.raises(errors.RecalldClientError) as info:
            c.call("raise", {"code": code})
        assert info.value.code == code
        assert str(info.value) == str(RAISES[code])
        assert c.hello()  # same client, still fine


def test_error_classes_by_name(sock_path: Path) -> None:
    with Client(sock_path) as c:
        with pytest.raises(recalld_client.Forbidden, match="outside the roots"):
            c.call("raise", {"code": "forbidden"})
        with pytest.raises(recalld_client.IndexUnavailable):
            c.call("raise", {"code": "index"})
        with pytest.raises(recalld_client.BadRequest, match="unknown method"):
            c.call("nope")


def test_plain_exception_is_internal_and_server_still_serves(sock_path: Path) -> None:
    with Client(sock_path) as c:
        with pytest.raises(recalld_client.InternalError, match="RuntimeError"):
            c.call("crash")
        assert c.status()["state"] == "ready"


def test_request_over_the_cap_is_refused_locally(sock_path: Path) -> None:
    with Client(sock_path) as c:
        with pytest.raises(recalld_client.TooLarge):
            c.call("echo", {"blob": b"x" * (9 * 1024 * 1024)})
        assert c.hello()


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


@pytest.mark.slow
def test_timeout(sock_path: Path) -> None:
    with Client(sock_path, timeout=0.2) as c:
        start = time.monotonic()
        with pytest.raises(recalld_client.Timeout):
            c.call("slow", {"s": 3.0})
        assert time.monotonic() - start < 2.0  # gave up long before the handler finished
        assert c.call("echo", {"after": 1}) == {"after": 1}  # a fresh connection
        assert c.call("slow", {"s": 0.05}, timeout=5) == {"slept": True}


def test_daemon_not_running(tmp: Path) -> None:
    with pytest.raises(DaemonNotRunning, match="recalld serve"):
        Client(tmp / "nothing.sock").hello()
    stale = tmp / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))
    with pytest.raises(DaemonNotRunning):
        Client(stale).status()
    assert not is_running(stale)
    with pytest.raises(DaemonNotRunning):
        next(Client(stale).watch())


def test_is_running(sock_path: Path) -> None:
    assert is_running(sock_path)
    assert is_running(str(sock_path), timeout=0.5)


def test_default_socket_follows_recalld_home(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALLD_HOME", str(tmp))
    assert Client().socket_path == tmp / "run" / "recalld.sock"
    assert not is_running()
    with ServerThread(Server(HANDLERS, {}, locations.socket_path())):
        assert is_running()
        with Client() as c:
            assert c.status()["state"] == "ready"


SERVER = """
import asyncio, signal, sys
from pathlib import Path
from recalld.serve.server import Server

async def main() -> None:
    server = Server({"echo": lambda p: p}, {}, Path(sys.argv[1]))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, server.request_shutdown)
    await server.serve_forever()

asyncio.run(main())
"""


def _spawn(path: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(path)])
    deadline = time.monotonic() + 20
    while not is_running(path, timeout=0.5):
        assert proc.poll() is None, "the server subprocess died"
        assert time.monotonic() < deadline, "the server subprocess did not start"
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


def test_reconnects_after_the_daemon_restarts(tmp: Path) -> None:
    path = tmp / "run" / "recalld.sock"
    first = _spawn(path)
    try:
        with Client(path) as c, Client(path, reconnect=False) as strict:
            assert c.hello()["pid"] == first.pid
            assert strict.hello()["pid"] == first.pid
            _stop(first)
            assert not path.exists()  # a clean stop removes the socket
            with pytest.raises(DaemonNotRunning):
                c.hello()
            second = _spawn(path)
            try:
                assert c.hello()["pid"] == second.pid
                with pytest.raises(ConnectionLost):
                    strict.hello()  # its old connection is dead and it may not retry
                assert strict.hello()["pid"] == second.pid  # ...but it reconnects next time
            finally:
                _stop(second)
            third = _spawn(path)
            try:
                with pytest.raises(ConnectionLost):
                    c.shutdown()  # lost with the old connection: never resent to a new daemon
                assert is_running(path)
            finally:
                _stop(third)
    finally:
        first.kill()
        first.wait()


def test_shutdown_is_sent_once_and_stops_the_daemon(tmp: Path) -> None:
    path = tmp / "run" / "recalld.sock"
    proc = _spawn(path)
    try:
        with Client(path) as c:
            assert c.shutdown()["stopping"] is True
        assert proc.wait(10) == 0
        assert not is_running(path)
    finally:
        proc.kill()
        proc.wait()


# -- the Windows named pipe transport, driven through injected fake pipes ------------------------


class _MemoryPipe:
    """An in-memory pipe end that hands out incoming bytes in random small pieces."""

    def __init__(self, incoming: bytes = b"", *, seed: int = 0) -> None:
        self.incoming = bytearray(incoming)
        self.written = bytearray()
        self.closed = False
        self.fail_read: BaseException | None = None
        self.fail_write: BaseException | None = None
        self.timeouts: list[float | None] = []
        self._rng = random.Random(seed)

    def write(self, data: bytes, timeout: float | None) -> None:
        if self.fail_write is not None:
            raise self.fail_write
        self.written += data

    def read(self, n: int, timeout: float | None) -> bytes:
        self.timeouts.append(timeout)
        if self.fail_read is not None:
            raise self.fail_read
        take = min(n, self._rng.randint(1, 7), len(self.incoming))
        out = bytes(self.incoming[:take])
        del self.incoming[:take]
        return out

    def close(self) -> None:
        self.closed = True


def test_pipe_transport_framing() -> None:
    frames = [{"id": i, "result": {"text": "é" * i, "blob": bytes(range(i))}} for i in range(40)]
    pipe = _MemoryPipe(b"".join(encode_frame(f) for f in frames))
    opened: list[tuple[str, float | None]] = []

    def opener(name: str, timeout: float | None) -> _MemoryPipe:
        opened.append((name, timeout))
        return pipe

    transport = NamedPipeTransport(r"\\.\pipe\recalld-test", opener=opener)
    transport.connect(1.5)
    assert opened == [(r"\\.\pipe\recalld-test", 1.5)]
    transport.settimeout(3.0)
    assert [read_frame(transport) for _ in frames] == frames
    assert set(pipe.timeouts) == {3.0}
    with pytest.raises(ConnectionLost):
        read_frame(transport)  # EOF
    transport.send(encode_frame(request(1, "status")))
    assert pipe.written == encode_frame(request(1, "status"))
    transport.close()
    transport.close()
    assert pipe.closed


def test_pipe_transport_errors() -> None:
    pipe = _MemoryPipe()
    transport = NamedPipeTransport("p", opener=lambda name, timeout: pipe)
    with pytest.raises(ConnectionLost):
        transport.recv(10)  # not connected yet
    transport.connect(None)
    pipe.fail_read = TimeoutError()
    with pytest.raises(recalld_client.Timeout):
        transport.recv(10)
    pipe.fail_read = BrokenPipeError()
    assert transport.recv(10) == b""  # the daemon closed its end
    pipe.fail_read = OSError("reset")
    with pytest.raises(ConnectionLost):
        transport.recv(10)
    pipe.fail_write = BrokenPipeError()
    with pytest.raises(ConnectionLost):
        transport.send(b"x")

    def missing(name: str, timeout: float | None) -> _MemoryPipe:
        raise FileNotFoundError(2, "The system cannot find the file specified")

    def busy(name: str, timeout: float | None) -> _MemoryPipe:
        raise TimeoutError

    with pytest.raises(DaemonNotRunning):
        NamedPipeTransport("p", opener=missing).connect(1.0)
    with pytest.raises(recalld_client.Timeout):
        NamedPipeTransport("p", opener=busy).connect(1.0)


class _SocketPipe:
    """A pipe end backed by a real connection, reading in random small pieces."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self._rng = random.Random(1)

    def write(self, data: bytes, timeout: float | None) -> None:
        self.sock.settimeout(timeout)
        self.sock.sendall(data)

    def read(self, n: int, timeout: float | None) -> bytes:
        self.sock.settimeout(timeout)
        return self.sock.recv(min(n, self._rng.randint(1, 9)))

    def close(self) -> None:
        self.sock.close()


def test_client_over_a_pipe_transport(sock_path: Path) -> None:
    def factory() -> Transport:
        return NamedPipeTransport("pipe", opener=lambda name, timeout: _SocketPipe(sock_path))

    with Client(sock_path, transport_factory=factory, timeout=0.3) as c:
        for i in range(50):
            assert c.call("echo", {"i": i, "s": "x" * i}) == {"i": i, "s": "x" * i}
        assert [e["seq"] for e in c.watch()] == [0, 1, 2]
        with pytest.raises(recalld_client.Timeout):
            c.call("slow", {"s": 1.0})
        assert c.hello()["protocol"] == 1


def test_transport_selection(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALLD_HOME", str(tmp))
    assert isinstance(default_transport("/tmp/x.sock"), UnixTransport)
    assert pipe_name_for(r"\\.\pipe\custom") == r"\\.\pipe\custom"
    assert pipe_name_for(None) == locations.pipe_name()
    assert pipe_name_for(locations.socket_path()) == locations.pipe_name()
    assert pipe_name_for("/a.sock") != pipe_name_for("/b.sock")
