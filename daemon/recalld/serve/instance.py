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
import time
from pathlib import Path

from recalld.errors import ConfigError, Unavailable

if sys.platform != "win32":
    import fcntl

LOCK_NAME = "recalld.lock"
# How long a starting daemon waits for the lock of one that no longer answers: a daemon that
# has closed its socket still finishes its batch and closes the index before it lets go.
EXIT_WAIT_S = 15.0


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


def take_lock(path: Path, socket_path: Path, wait_s: float = 0.0) -> int:
    """Take the exclusive single-instance lock and write our pid in it; the fd holds the lock.

    A holder that no longer answers on ``socket_path`` is on its way out (or still starting):
    its lock is waited for up to ``wait_s`` seconds; one that answers is refused at once.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _lock(path)
        except AlreadyRunning as busy:
            if time.monotonic() >= deadline or answers(socket_path):
                raise AlreadyRunning(busy.pid, socket_path) from None
        time.sleep(0.05)


def lock_holder(path: Path) -> int | None:
    """The pid holding the lock at ``path`` (-1 when unreadable), None when nobody holds it."""
    try:
        fd = os.open(path, os.O_RDONLY if sys.platform != "win32" else os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        if _try_lock(fd, shared=True):
            return None
        return _read_pid(fd) or -1
    finally:
        os.close(fd)  # releases the probe's own lock, if it took it


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        taken = _try_lock(fd, shared=False)
    except OSError:
        os.close(fd)
        raise
    if not taken:
        pid = _read_pid(fd)
        os.close(fd)
        raise AlreadyRunning(pid, path)
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _try_lock(fd: int, shared: bool) -> bool:
    """Lock ``fd`` without waiting: False when another process holds the lock."""
    try:
        if sys.platform == "win32":
            import msvcrt

            os.lseek(fd, 1 << 20, os.SEEK_SET)  # lock a byte past the pid, which stays readable
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES, errno.EDEADLK):
            return False
        raise
    return True


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
