"""Where the daemon listens: binding its Unix socket (or Windows pipe) and checking who connects.

The runtime dir is 0700 and the socket 0600; on Linux the peer's uid is also checked with
``SO_PEERCRED``. A stale socket left by a dead daemon is removed, one that still answers is
not (the lock is ours, yet something listens), and on close only our own socket is removed,
never a successor's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import struct
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from recalld.errors import ConfigError
from recalld.serve.instance import AlreadyRunning, answers

# The server's logger: one place to read (and test) what the socket server says.
logger = logging.getLogger("recalld.serve.server")

CHUNK = 1 << 16
# AF_UNIX paths: 108 bytes with the NUL on Linux, 104 on the BSDs and macOS.
_MAX_SOCKET_PATH = 107 if sys.platform.startswith("linux") else 103

OnConnection = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
SocketId = tuple[int, int]


class Listener(Protocol):
    """An asyncio server, or a Windows pipe server (which lacks ``wait_closed``)."""

    def close(self) -> None: ...


def bind_socket(path: Path) -> tuple[socket.socket, SocketId]:
    """A non-blocking socket bound at ``path`` (0600), and its (device, inode) to remove it by."""
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        raise ConfigError(
            f"socket path {path} is longer than the {_MAX_SOCKET_PATH} bytes a Unix socket "
            "allows: set RECALLD_HOME to a shorter folder"
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise ConfigError(f"{path} exists and is not a socket: move it away")
        if answers(path):  # the lock is ours, yet something listens: don't steal it
            raise AlreadyRunning(None, path)
        logger.info("removing stale socket %s", path)
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o600)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    st = os.stat(path)
    return sock, (st.st_dev, st.st_ino)


async def listen_pipe(path: Path, on_connection: OnConnection) -> list[Listener]:
    """Windows: serve the home's named pipe (the pipe's default DACL admits only its owner
    as a writer). Not exercised by the test suite, which runs on Linux."""
    if sys.platform != "win32":
        raise RuntimeError("named pipes are Windows only")
    from recalld_client.transport import pipe_name_for

    loop = asyncio.get_running_loop()
    assert isinstance(loop, asyncio.ProactorEventLoop)  # the default loop on Windows

    def protocol() -> asyncio.StreamReaderProtocol:
        reader = asyncio.StreamReader(limit=CHUNK)
        return asyncio.StreamReaderProtocol(reader, on_connection)

    servers = await loop.start_serving_pipe(protocol, pipe_name_for(path))
    return list(servers)


def remove_socket(path: Path, socket_id: SocketId | None) -> None:
    """Remove the socket at ``path`` if it is still the one we bound (not a successor's)."""
    if socket_id is None:
        return
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == socket_id:
            path.unlink()


def peer_refusal(writer: asyncio.StreamWriter, uid: int | None) -> str | None:
    """Why this peer may not talk to a daemon of ``uid`` (Linux: another uid), or None."""
    if not sys.platform.startswith("linux"):
        return None  # elsewhere the 0700 runtime dir is the guard
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError as exc:
        return f"cannot check the connecting user ({exc})"
    pid, peer_uid, _gid = struct.unpack("3i", creds)
    if peer_uid != uid:
        return f"this daemon serves uid {uid} only; the client (pid {pid}) is uid {peer_uid}"
    return None
