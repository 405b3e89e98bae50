"""Resources under bad clients (issue 14, items 10, 13 and 14's SIGTERM), on a real daemon.

- A client that pipelines big ``get`` requests and never reads: the daemon's VmRSS stays within
  a bound while another client keeps being answered (it grew by ~500 MB before back-pressure).
- 300 idle connections: ``recalld status`` says "too many connections", not "not running".
- SIGTERM with busy clients (searches, big gets, a client that does not read) exits in seconds
  and removes the socket.

The daemon runs keyword-only (``embedding.provider = "none"``): the server is under test, and
the model would only cost the shared CPU time.
"""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgpack
import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess
from recalld.serve.server import MAX_CONNECTIONS
from recalld.surfaces.cli import EXIT_UNAVAILABLE
from recalld_client import Client, TooManyConnections, is_running
from recalld_client.protocol import HEADER

pytestmark = pytest.mark.timeout(300)

RSS_BOUND_MB = 64
WIDE_LINES = 5000  # a get answers at most 5,000 lines ...
WIDE_CHARS = 790  # ... of which these make a ~4 MB answer, the most one get returns


def rss_mb(pid: int) -> float:
    """VmRSS of ``pid`` in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def get_frame(req_id: int, path: Path) -> bytes:
    body = msgpack.packb({"v": 1, "id": req_id, "method": "get", "params": {"path": str(path)}})
    return HEADER.pack(len(body)) + body


@contextmanager
def running_daemon(*, wide: bool) -> Iterator[DaemonProcess]:
    """A daemon over a few notes and (with ``wide``) a file whose ``get`` answer is ~4 MB."""
    home = Path(tempfile.mkdtemp(prefix="rcd-res-", dir="/tmp"))
    (home / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n'
    )
    if wide:
        row = ("the harbour ferry leaves at dawn with supplies " * 20)[:WIDE_CHARS]
        write(home / "memory" / "wide.md", "".join(f"w{i} {row}\n" for i in range(WIDE_LINES)))
    for i in range(5):
        write(home / "memory" / f"n{i}.md", f"# Note {i}\n\nThe ferry {i} leaves at dawn.\n")
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        yield d
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def daemon() -> Iterator[DaemonProcess]:
    with running_daemon(wide=True) as d:
        yield d


@pytest.fixture()
def small_daemon() -> Iterator[DaemonProcess]:
    with running_daemon(wide=False) as d:
        yield d


class NonReader:
    """A raw socket that sends ``get`` requests of a big file for a while and never reads."""

    def __init__(self, sock_path: Path, target: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(sock_path))
        self.sock.setblocking(False)
        self.target = target
        self.sent = 0

    def pump(self, seconds: float, on_tick: object = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                self.sock.send(get_frame(self.sent + 1, self.target))
                self.sent += 1
            except BlockingIOError:  # the daemon stopped reading: that is the point
                time.sleep(0.02)
            if callable(on_tick):
                on_tick()

    def close(self) -> None:
        self.sock.close()


class Prober(threading.Thread):
    """Another client asking small gets meanwhile; records each answer's latency."""

    def __init__(self, sock_path: Path, target: Path) -> None:
        super().__init__(daemon=True)
        self.sock_path, self.target = sock_path, target
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with Client(self.sock_path, timeout=10) as c:
            while not self.stop.is_set():
                start = time.monotonic()
                try:
                    got = c.get(self.target, 1, 3)
                    assert got["text"].startswith("w0 ")
                except Exception as exc:  # noqa: BLE001 - reported by the test
                    self.errors.append(repr(exc))
                self.latencies.append(time.monotonic() - start)
                time.sleep(0.1)


@pytest.mark.slow
def test_a_client_that_never_reads_keeps_the_daemon_bounded(daemon: DaemonProcess) -> None:
    assert daemon.proc is not None
    pid = daemon.proc.pid
    wide = daemon.home / "memory" / "wide.md"
    base = rss_mb(pid)
    peak = [base]
    # The other client's latency alone first, on the same daemon and machine: the bound below is
    # relative to it, so a machine loaded by other work does not fail the test (issue 38).
    alone = Prober(daemon.socket, wide)
    alone.start()
    time.sleep(3.0)
    alone.stop.set()
    alone.join(15)
    assert not alone.errors and alone.latencies, alone.errors[:3]
    quiet = statistics.median(alone.latencies)
    prober = Prober(daemon.socket, wide)
    prober.start()
    reader = NonReader(daemon.socket, wide)
    ticks = [0]

    def sample() -> None:
        ticks[0] += 1
        if ticks[0] % 20 == 0:
            peak[0] = max(peak[0], rss_mb(pid))

    try:
        reader.pump(10.0, sample)
        # At least 20 answers to the other client while the flood goes on (on a loaded machine
        # 10 s may hold fewer): the flood continues until then, for at most 50 s more.
        until = time.monotonic() + 50
        while len(prober.latencies) < 20 and time.monotonic() < until:
            reader.pump(1.0, sample)
        peak[0] = max(peak[0], rss_mb(pid))
    finally:
        prober.stop.set()
        prober.join(15)
    grown = peak[0] - base
    print(
        f"\nnon-reading client: {reader.sent} gets sent in 10 s; VmRSS {base:.0f} -> peak "
        f"{peak[0]:.0f} MB (+{grown:.0f}); other client: {len(prober.latencies)} gets, max "
        f"{max(prober.latencies) * 1000:.0f} ms, median "
        f"{statistics.median(prober.latencies) * 1000:.0f} ms (alone: median {quiet * 1000:.0f} ms)"
    )
    assert reader.sent > 100, "the non-reading client could not even send"
    assert grown < RSS_BOUND_MB, f"daemon grew by {grown:.0f} MB under a non-reading client"
    assert not prober.errors, prober.errors[:3]
    assert len(prober.latencies) >= 20
    # Not starved: each answer within 2 s as on a quiet machine, or, where the machine is so
    # loaded that the client alone already waits, within 10x its slowest answer alone.
    assert max(prober.latencies) < max(2.0, 10 * max(alone.latencies))
    reader.close()
    with daemon.client(timeout=10) as c:  # the daemon is fine after the client is gone
        assert c.get(wide, 2, 1)["text"].startswith("w1 ")


@pytest.mark.slow
def test_idle_connections_beyond_the_cap_get_too_many_connections(
    small_daemon: DaemonProcess,
) -> None:
    daemon = small_daemon
    idle: list[socket.socket] = []
    try:
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(daemon.socket))
            idle.append(s)
        time.sleep(0.5)  # let the daemon accept them all
        assert is_running(daemon.socket), "a full daemon still runs"
        with pytest.raises(TooManyConnections, match="too many connections"), daemon.client() as c:
            c.status()
        done = subprocess.run(
            [sys.executable, "-m", "recalld.surfaces.cli", "status"],
            env=env_for(daemon.home),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == EXIT_UNAVAILABLE, done.stdout + done.stderr
        assert "too many connections" in done.stderr
        assert f"maximum of {MAX_CONNECTIONS}" in done.stderr
        assert "not running" not in done.stdout + done.stderr
        assert "Traceback" not in done.stderr
    finally:
        for s in idle:
            s.close()
    time.sleep(0.5)
    with daemon.client(timeout=10) as c:  # slots are given back
        assert c.status()["daemon"]["pid"] == daemon.proc.pid  # type: ignore[union-attr]


@pytest.mark.slow
def test_sigterm_with_busy_clients_exits_in_seconds(daemon: DaemonProcess) -> None:
    assert daemon.proc is not None
    wide = daemon.home / "memory" / "wide.md"
    stop = threading.Event()
    failures: list[str] = []

    def busy(kind: str) -> None:
        try:
            with Client(daemon.socket, timeout=30, reconnect=False) as c:
                while not stop.is_set():
                    if kind == "search":
                        c.search("ferry dawn", mode="keyword")
                    else:
                        c.get(wide)
        except Exception as exc:  # noqa: BLE001 - the daemon going away ends the loop
            failures.append(type(exc).__name__)

    threads = [threading.Thread(target=busy, args=(k,), daemon=True) for k in ("search", "get")]
    threads += [threading.Thread(target=busy, args=("get",), daemon=True)]
    for t in threads:
        t.start()
    reader = NonReader(daemon.socket, wide)
    reader.pump(2.0)  # its answers pile up unread
    start = time.monotonic()
    daemon.proc.terminate()
    try:
        daemon.proc.wait(20)
    finally:
        stop.set()
        reader.close()
    took = time.monotonic() - start
    print(f"\nSIGTERM with 3 busy clients and a non-reading one: exited in {took:.2f} s")
    # The daemon's own bounds: 3 s of grace for running requests, then at most 2 s for the
    # writer's batch (STOP_WAIT_S); the rest is slack for a loaded machine (5.9 s seen with
    # the suite at nice 19 beside `make bench`). Waiting on the clients would be 20 s and more.
    assert took < 8.0, f"SIGTERM took {took:.1f} s; log: {daemon.log_tail()}"
    assert daemon.proc.returncode == 0
    assert not daemon.socket.exists(), "the socket file was left behind"
    assert "Traceback" not in daemon.log_tail(100_000)


def test_the_tray_says_full_not_offline_when_refused() -> None:
    from recalld.surfaces.tray import view_for

    full = view_for(None, offline_reason="too many connections: the daemon (pid 7) runs but ...")
    assert "too many connections" in full.title and "not running" not in full.title
    gone = view_for(None, offline_reason="no recalld daemon is listening at /x")
    assert "not running" in gone.title
