"""The Windows named pipe transport, driven through injected fake pipes: framing,
errors, a client over it, and which transport is chosen."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

import recalld_client
from client_support import sock_path as sock_path  # a fixture
from client_support import tmp as tmp  # a fixture
from recalld_client import Client, ConnectionLost, DaemonNotRunning, locations
from recalld_client.protocol import encode_frame, read_frame, request
from recalld_client.transport import (
    NamedPipeTransport,
    Transport,
    UnixTransport,
    default_transport,
    pipe_name_for,
)

pytestmark = pytest.mark.timeout(60)


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
