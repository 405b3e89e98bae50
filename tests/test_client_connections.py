"""The client's connections (threads and subprocesses): one shared connection, many
clients and threads, timeouts, no daemon running, the default socket, reconnecting after a
restart, and a shutdown sent once."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import recalld_client
from client_support import HANDLERS
from client_support import sock_path as sock_path  # a fixture
from client_support import tmp as tmp  # a fixture
from recalld.serve.server import Server, ServerThread
from recalld_client import Client, ConnectionLost, DaemonNotRunning, is_running, locations
from recalld_client.transport import Transport, UnixTransport

pytestmark = pytest.mark.timeout(60)


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
