"""Byte transports to the daemon: a Unix socket, or a named pipe on Windows.

A transport moves bytes and translates the platform's errors into the client's exceptions
(:class:`DaemonNotRunning`, :class:`ConnectionLost`, :class:`Timeout`); framing lives in
:mod:`recalld_client.protocol`.
"""

from __future__ import annotations

import _socket  # socket.py's enums of constants cost ~3 ms of `recalld search` start-up
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

from recalld_client import locations
from recalld_client.errors import ConnectionLost, DaemonNotRunning, Timeout, TooManyConnections

# Not typing.TYPE_CHECKING: importing typing costs `recalld search` ~3 ms of start-up. mypy
# takes any TYPE_CHECKING as true and checks these classes as protocols; at run time they are
# plain classes, which nothing instantiates or tests with isinstance.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object

_PIPE_PREFIX = "\\\\.\\pipe\\"


class Transport(Protocol):
    """A blocking, connected byte stream to the daemon."""

    def connect(self, timeout: float | None) -> None:
        """Connect; :class:`DaemonNotRunning` if nothing listens, :class:`Timeout` if slow."""

    def settimeout(self, timeout: float | None) -> None:
        """Timeout of each later :meth:`send` / :meth:`recv` (None waits forever)."""

    def send(self, data: bytes) -> None:
        """Send all of ``data``."""

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` once the daemon closed the connection."""
        ...

    def close(self) -> None:
        """Close; idempotent."""


def _connect_unix(sock: _socket.socket, path: str, timeout: float | None) -> None:
    """Connect; a full listen queue (EAGAIN: the daemon runs, a flood of clients fills it) is
    waited out until ``timeout``, then raised as :class:`BlockingIOError`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class UnixTransport:
    """A Unix domain socket (Linux, macOS, BSD)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._sock: _socket.socket | None = None

    def connect(self, timeout: float | None) -> None:
        """Connect to the daemon's socket."""
        self.close()
        # (typeshed has no AF_UNIX for Windows; this class is not used there)
        family = _socket.AF_UNIX  # type: ignore[attr-defined,unused-ignore]
        sock = _socket.socket(family, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            _connect_unix(sock, str(self.path), timeout)
        except BlockingIOError as exc:
            sock.close()
            raise TooManyConnections(
                f"the daemon at {self.path} runs but its queue of new connections stayed full "
                f"for {timeout} s (a flood of clients?): retry in a moment"
            ) from exc
        except TimeoutError as exc:
            sock.close()
            raise Timeout(
                f"the daemon at {self.path} did not accept a connection within {timeout} s"
            ) from exc
        except OSError as exc:
            sock.close()
            raise DaemonNotRunning(
                f"no recalld daemon is listening at {self.path} ({exc.strerror or exc}): "
                "start it with `recalld serve` (or the service)"
            ) from exc
        self._sock = sock

    def settimeout(self, timeout: float | None) -> None:
        """Timeout of later sends and receives."""
        self._connected().settimeout(timeout)

    def send(self, data: bytes) -> None:
        """Send all of ``data``."""
        try:
            self._connected().sendall(data)
        except TimeoutError as exc:
            raise Timeout("the daemon did not read the request in time") from exc
        except OSError as exc:
            raise ConnectionLost(f"connection to the daemon lost while sending: {exc}") from exc

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes, ``b""`` at end of stream."""
        try:
            return self._connected().recv(n)
        except TimeoutError as exc:
            raise Timeout("the daemon did not answer in time") from exc
        except OSError as exc:
            raise ConnectionLost(f"connection to the daemon lost: {exc}") from exc

    def close(self) -> None:
        """Close the socket."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connected(self) -> _socket.socket:
        if self._sock is None:
            raise ConnectionLost("not connected")
        return self._sock


class PipeHandle(Protocol):
    """An open pipe end, as :class:`NamedPipeTransport` needs it (injectable for tests)."""

    def write(self, data: bytes, timeout: float | None) -> None:
        """Write all of ``data``; ``TimeoutError`` when the peer does not read in time."""

    def read(self, n: int, timeout: float | None) -> bytes:
        """Up to ``n`` bytes as soon as some are there; ``b""`` at EOF; ``TimeoutError``."""
        ...

    def close(self) -> None:
        """Close the handle."""


PipeOpener = Callable[[str, float | None], PipeHandle]


class NamedPipeTransport:
    """A Windows named pipe in byte mode.

    ``opener(name, timeout)`` opens the pipe; the default uses overlapped I/O through
    ``_winapi`` because a pipe opened with plain ``open()`` serializes reads and writes and
    cannot time out.
    """

    def __init__(self, name: str, *, opener: PipeOpener | None = None) -> None:
        self.name = name
        self._opener = opener
        self._pipe: PipeHandle | None = None
        self._timeout: float | None = None

    def connect(self, timeout: float | None) -> None:
        """Open the pipe, waiting up to ``timeout`` while all its instances are busy."""
        self.close()
        opener = self._opener or _default_opener()
        try:
            self._pipe = opener(self.name, timeout)
        except TimeoutError as exc:
            raise Timeout(f"the daemon's pipe {self.name} stayed busy for {timeout} s") from exc
        except OSError as exc:
            raise DaemonNotRunning(
                f"no recalld daemon is listening at {self.name} ({exc}): "
                "start it with `recalld serve` (or the service)"
            ) from exc
        self._timeout = timeout

    def settimeout(self, timeout: float | None) -> None:
        """Timeout of later writes and reads."""
        self._timeout = timeout

    def send(self, data: bytes) -> None:
        """Write all of ``data``."""
        try:
            self._connected().write(data, self._timeout)
        except TimeoutError as exc:
            raise Timeout("the daemon did not read the request in time") from exc
        except OSError as exc:
            raise ConnectionLost(f"connection to the daemon lost while sending: {exc}") from exc

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes, ``b""`` at end of stream."""
        try:
            return self._connected().read(n, self._timeout)
        except TimeoutError as exc:
            raise Timeout("the daemon did not answer in time") from exc
        except BrokenPipeError:
            return b""
        except OSError as exc:
            raise ConnectionLost(f"connection to the daemon lost: {exc}") from exc

    def close(self) -> None:
        """Close the pipe handle."""
        if self._pipe is not None:
            pipe, self._pipe = self._pipe, None
            pipe.close()

    def _connected(self) -> PipeHandle:
        if self._pipe is None:
            raise ConnectionLost("not connected")
        return self._pipe


def pipe_name_for(address: str | Path | None = None) -> str:
    """The Windows pipe of a socket path (a pipe name is kept as it is)."""
    if address is None:
        return locations.pipe_name()
    if str(address).startswith(_PIPE_PREFIX):
        return str(address)
    import hashlib  # lazily: only Windows needs it, and it costs a few ms to import

    # Same derivation as locations.pipe_name(), for an explicit path.
    digest = hashlib.sha256(str(Path(address)).encode()).hexdigest()[:16]
    user = locations.env("USERNAME") or "user"
    return rf"\\.\pipe\recalld-{user}-{digest}"


def default_transport(address: str | Path | None = None) -> Transport:
    """The platform's transport to the daemon at ``address`` (default: this home's socket)."""
    if sys.platform == "win32":
        return NamedPipeTransport(pipe_name_for(address))
    return UnixTransport(address if address is not None else locations.socket_path())


def _default_opener() -> PipeOpener:
    if sys.platform == "win32":
        return _open_overlapped_pipe
    raise DaemonNotRunning("named pipes exist only on Windows: use UnixTransport here")


if sys.platform == "win32":
    import _winapi

    # Don't let the pipe's server impersonate us beyond identifying who we are.
    _SECURITY_SQOS_PRESENT = 0x00100000
    _SECURITY_IDENTIFICATION = 0x00010000
    _WAIT_TIMEOUT = 0x102

    def _millis(timeout: float | None) -> int:
        return _winapi.INFINITE if timeout is None else max(0, int(timeout * 1000))

    class _OverlappedPipe:
        """A client pipe handle opened for overlapped I/O, so reads and writes can time out."""

        def __init__(self, handle: int) -> None:
            self._handle = handle

        def _wait(self, ov: _winapi.Overlapped, err: int, timeout: float | None) -> int:
            try:
                if err == _winapi.ERROR_IO_PENDING:
                    res = _winapi.WaitForMultipleObjects([ov.event], False, _millis(timeout))
                    if res == _WAIT_TIMEOUT:
                        ov.cancel()
            except BaseException:
                ov.cancel()
                raise
            finally:
                done, err = ov.GetOverlappedResult(True)
            if err == _winapi.ERROR_OPERATION_ABORTED:
                raise TimeoutError("pipe operation timed out")
            return done

        def write(self, data: bytes, timeout: float | None) -> None:
            view = memoryview(data)
            while view:
                ov, err = _winapi.WriteFile(self._handle, view, overlapped=True)
                done = self._wait(ov, err, timeout)
                view = view[done:]

        def read(self, n: int, timeout: float | None) -> bytes:
            try:
                ov, err = _winapi.ReadFile(self._handle, n, overlapped=True)
                self._wait(ov, err, timeout)
            except BrokenPipeError:
                return b""
            return ov.getbuffer() or b""

        def close(self) -> None:
            if self._handle:
                handle, self._handle = self._handle, 0
                _winapi.CloseHandle(handle)

    def _open_overlapped_pipe(name: str, timeout: float | None) -> PipeHandle:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                handle = _winapi.CreateFile(
                    name,
                    _winapi.GENERIC_READ | _winapi.GENERIC_WRITE,
                    0,
                    _winapi.NULL,
                    _winapi.OPEN_EXISTING,
                    _winapi.FILE_FLAG_OVERLAPPED
                    | _SECURITY_SQOS_PRESENT
                    | _SECURITY_IDENTIFICATION,
                    _winapi.NULL,
                )
                return _OverlappedPipe(handle)
            except OSError as exc:
                if exc.winerror not in (_winapi.ERROR_PIPE_BUSY, _winapi.ERROR_SEM_TIMEOUT):
                    raise
            # Every instance is serving someone: wait for the server to offer a new one.
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"pipe {name} busy")
            with contextlib.suppress(OSError):  # timed out or vanished: CreateFile tells which
                _winapi.WaitNamedPipe(name, min(_millis(left), 1000))
