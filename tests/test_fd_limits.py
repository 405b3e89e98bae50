"""File descriptors under a flood of clients (issue 41 item 5), on a real daemon.

Before: under a soft limit of 1,024, 3,000 connections in 0.1 s took every descriptor; the log
filled with tracebacks, clients were told "not running", and a note written meanwhile was never
indexed. Here the daemon runs under a low limit (set in the child before it starts), is flooded,
and a note written meanwhile must be found; and a note that could not be read for want of
descriptors (the limit cut on the running daemon) must be indexed once they are back.
"""

from __future__ import annotations

import resource
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import write
from daemon_process import DaemonProcess, wait_for
from recalld_client import Client, TooManyConnections

pytestmark = pytest.mark.timeout(300)

FLOOD = 1500
HOLD = 260  # connections held open: more than a 256-descriptor daemon can serve


def _limit(soft: int, hard: int) -> Any:
    """A preexec_fn setting the child's open files limit (async-signal-safe enough: one call)."""

    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return set_limit


def _home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="rcd-fd-", dir="/tmp"))
    (home / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n'
    )
    for i in range(5):
        write(home / "memory" / f"n{i}.md", f"# Note {i}\n\nThe ferry {i} leaves at dawn.\n")
    return home


def _start(home: Path, soft: int | None = None, hard: int | None = None) -> DaemonProcess:
    preexec = _limit(soft, hard) if soft is not None and hard is not None else None
    d = DaemonProcess(home, preexec_fn=preexec).start()
    d.wait_idle()
    return d


@pytest.fixture()
def fd_home() -> Iterator[Path]:
    path = _home()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _found(d: DaemonProcess, word: str) -> bool:
    with d.client(timeout=10) as c:
        return bool(c.search(word, mode="keyword")["results"])


class Flood(threading.Thread):
    """Opens ``count`` connections as fast as it can and holds them; counts what happened."""

    def __init__(self, sock_path: Path, count: int) -> None:
        super().__init__(daemon=True)
        self.sock_path, self.count = sock_path, count
        self.socks: list[socket.socket] = []
        self.full = 0  # the listen queue was full (EAGAIN)
        self.failed: list[str] = []

    def run(self) -> None:
        for _ in range(self.count):
            self._connect()
        # On a loaded machine the daemon may accept so few of the burst (62 of 1,500 at load 8,
        # the rest found the queue full) that it never reaches its cap: keep knocking, paced,
        # until more are held than 256 descriptors allow, so the cap is always put to the test.
        deadline = time.monotonic() + 30
        while len(self.socks) < HOLD and time.monotonic() < deadline:
            if not self._connect():
                time.sleep(0.005)

    def _connect(self) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(str(self.sock_path))
        except BlockingIOError:
            self.full += 1
            s.close()
            return False
        except OSError as exc:
            self.failed.append(repr(exc))
            s.close()
            return False
        self.socks.append(s)
        return True

    def close(self) -> None:
        for s in self.socks:
            s.close()


def test_a_flood_of_connections_under_a_low_limit_loses_no_note(fd_home: Path) -> None:
    home = fd_home
    d = _start(home, soft=256, hard=256)  # a limit the daemon cannot raise
    try:
        assert d.proc is not None
        pid = d.proc.pid
        before = _fds(pid)
        flood = Flood(d.socket, FLOOD)
        peak = [before]
        answers: dict[str, int] = {"ok": 0, "full": 0}
        other: list[str] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _fds(pid))
                time.sleep(0.005)

        def ask() -> None:  # a real client meanwhile: answered, or told the daemon is full
            while not stop.is_set():
                try:
                    with Client(d.socket, timeout=10, connect_timeout=2) as c:
                        c.status()
                    answers["ok"] += 1
                except TooManyConnections:
                    answers["full"] += 1
                except Exception as exc:  # noqa: BLE001 - reported below
                    other.append(repr(exc))
                time.sleep(0.02)

        threads = [threading.Thread(target=f, daemon=True) for f in (sample, ask)]
        for t in threads:
            t.start()
        flood.start()
        note = write(
            home / "memory" / "flood.md", "# Flood\n\nThe zanzibarite note of the flood.\n"
        )
        flood.join(60)
        time.sleep(1.5)  # the flood held open while the note is read
        stop.set()
        for t in threads:
            t.join(15)
        held = len(flood.socks)
        flood.close()
        print(
            f"\nflood of {FLOOD} under 256 fds: {held} held open, {flood.full} found the queue "
            f"full; daemon fds {before} -> peak {peak[0]}; client meanwhile {answers}"
        )
        assert not flood.failed, flood.failed[:3]
        assert not other, other[:3]  # never "not running"
        assert answers["ok"] + answers["full"] > 0, answers
        assert peak[0] <= 256 - 48, f"clients took the reserve: {peak[0]} fds open"
        wait_for(lambda: _found(d, "zanzibarite"), timeout=30)
        with d.client(timeout=10) as c:
            conns = c.status()["daemon"]["connections"]
        assert conns["fds_limit"] == 256 and conns["refused"] > 0, conns
        log = d.log.read_text(errors="replace")
        assert "Traceback" not in log and "Too many open files" not in log, log[-3000:]
        assert log.count("connection refused") <= 3, log.count("connection refused")
        note.unlink()
    finally:
        d.stop()


def test_the_soft_limit_is_raised_to_the_hard_one(fd_home: Path) -> None:
    home = fd_home
    d = _start(home, soft=256, hard=4096)
    try:
        with d.client(timeout=10) as c:
            conns = c.status()["daemon"]["connections"]
        assert conns["fds_limit"] == 4096, conns
        assert "open files limit raised from 256 to 4096" in d.log.read_text()
    finally:
        d.stop()


@pytest.mark.slow
def test_a_note_not_read_for_want_of_fds_is_indexed_once_they_are_back(fd_home: Path) -> None:
    home = fd_home
    d = _start(home)
    try:
        assert d.proc is not None
        pid = d.proc.pid
        limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, limits[1]))  # no descriptor to spare
        try:
            write(home / "memory" / "late.md", "# Late\n\nThe quillwort note came late.\n")
            wait_for(lambda: "cannot read: Too many open files" in d.log.read_text(), timeout=30)
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
        wait_for(lambda: _found(d, "quillwort"), timeout=60)  # the retry read it
    finally:
        d.stop()
