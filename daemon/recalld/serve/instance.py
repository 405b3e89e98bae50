"""One daemon per home: the runtime folder, the single-instance lock, and a stale socket's probe.

The lock is an exclusive ``flock`` on ``<runtime dir>/recalld.lock`` (which also holds the pid),
taken for the daemon's life; the runtime folder is 0700 and must belong to the daemon's user.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import sys
from pathlib import Path

from recalld.errors import ConfigError, Unavailable

if sys.platform != "win32":
    import fcntl

LOCK_NAME = "recalld.lock"


class AlreadyRunning(Unavailable):
    """Another daemon holds this home's lock."""

    def __init__(self, pid: int | None, socket_path: Path) -> None:
        who = f"pid {pid}" if pid else "pid unknown"
        super().__init__(
            f"a recalld daemon is already running for this home ({who}, socket {socket_path}): "
            "use `recalld status` or stop it first"
        )
        self.pid = pid
        self.socket_path = socket_path


def private_dir(path: Path) -> None:
    """Create the runtime dir 0700, tighten it if looser, refuse one owned by someone else."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if sys.platform == "win32":
        return  # per-user folders are private by their ACL
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise ConfigError(
            f"runtime folder {path} belongs to uid {st.st_uid}, not to you: "
            "remove it or set RECALLD_HOME"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)


def take_lock(path: Path, socket_path: Path) -> int:
    """Take the exclusive single-instance lock and write our pid in it; the fd holds the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if sys.platform == "win32":
            import msvcrt

            os.lseek(fd, 1 << 20, os.SEEK_SET)  # lock a byte past the pid, which stays readable
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        pid = _read_pid(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES, errno.EDEADLK):
            raise AlreadyRunning(pid, socket_path) from None
        raise
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        os.lseek(fd, 0, os.SEEK_SET)
        return int(os.read(fd, 32).decode().strip())
    return None


def answers(path: Path) -> bool:
    """Whether something accepts connections on the socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
