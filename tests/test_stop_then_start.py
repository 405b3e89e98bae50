"""A stop is over when the daemon has let go of the index, and a start right after it works.

A daemon that has closed its socket still finishes its batch and closes the index (1-2 s in a
first sync here). ``recalld stop`` used to say "recalld stopped" as soon as the socket went, so
a ``recalld start`` right after failed with "already running"; and a second daemon opened,
checked and could write the index before it found the first one's lock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, wait_for
from recalld.serve.instance import LOCK_NAME, lock_holder, take_lock
from recalld_client import Client

NOTES = 3000  # enough that a stop meets the first sync in the middle of a batch


@pytest.fixture
def busy_home(home: Path) -> Iterator[Path]:
    """A home of a few thousand notes and its runtime folder inside it."""
    words = [
        "lighthouse",
        "keeper",
        "storeroom",
        "inventory",
        "harbour",
        "ledger",
        "tide",
        "beacon",
    ]
    for i in range(NOTES):
        body = " ".join(words[(i + k) % len(words)] for k in range(40))
        write(home / "memory" / f"n{i:05}.md", f"# Note {i}\n\n{body} {i}\n")
    (home / "config.toml").write_text(
        f'[memory]\npaths = ["{home}/memory"]\n[sessions]\npaths = []\n', encoding="utf-8"
    )
    yield home


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = env_for(home)
    env["XDG_RUNTIME_DIR"] = str(home / "run")
    return subprocess.run(
        [sys.executable, "-m", "recalld", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _pid(home: Path) -> int:
    with Client(home / "run" / "recalld.sock", timeout=10.0) as c:
        return int(c.hello()["pid"])


def _syncing(home: Path) -> bool:
    with Client(home / "run" / "recalld.sock", timeout=10.0) as c:
        return bool(c.status()["progress"].get("files_done"))


@pytest.mark.slow
def test_stop_returns_once_the_daemon_has_let_go_and_a_start_right_after_works(
    busy_home: Path,
) -> None:
    lock = busy_home / "run" / LOCK_NAME
    pids: list[int] = []
    try:
        started = _cli(busy_home, "start")
        assert started.returncode == 0, started.stdout + started.stderr
        pids.append(_pid(busy_home))
        wait_for(lambda: _syncing(busy_home), timeout=60, step=0.05)

        stopped = _cli(busy_home, "stop")
        assert stopped.returncode == 0 and "recalld stopped" in stopped.stdout, stopped.stderr
        assert lock_holder(lock) is None  # let go when it says so, not a moment later

        again = _cli(busy_home, "start")  # right after: not "already running"
        assert again.returncode == 0, again.stdout + again.stderr
        assert "recalld is running" in again.stdout
        pids.append(_pid(busy_home))
        assert pids[1] != pids[0]
        assert lock_holder(lock) == pids[1]
        assert _cli(busy_home, "stop").returncode == 0
        assert lock_holder(lock) is None
    finally:
        for pid in pids:  # a failed check must not leave a daemon behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_daemon_started_while_the_last_one_closes_waits_for_it(busy_home: Path) -> None:
    first = DaemonProcess(busy_home).start()
    second = DaemonProcess(busy_home, log=busy_home / "second.log")
    try:
        wait_for(lambda: _syncing(busy_home), timeout=60, step=0.05)
        assert first.proc is not None
        first.proc.terminate()  # SIGTERM, as a service manager's restart sends it
        wait_for(lambda: not first.socket.exists(), timeout=30, step=0.01)
        second.start(timeout=60)  # waits for the lock the first still holds while it closes
        # The first lets go of the lock once its index is closed, then logs and exits: under
        # load that exit can come a moment after the second answers (seen in a loaded CI run).
        assert first.proc.wait(timeout=30) == 0, first.log_tail()
        with second.client() as c:
            assert c.hello()["pid"] == second.proc.pid  # type: ignore[union-attr]
        with second.client() as c:  # and it goes on with the sync the first one left
            wait_for(lambda: c.status()["counts"]["memory_files"] == NOTES, timeout=120)
    finally:
        second.stop()
        first.stop()


def test_a_lock_that_answers_is_refused_at_once_one_that_does_not_is_waited_for(
    tmp_path: Path,
) -> None:
    lock, sock = tmp_path / LOCK_NAME, tmp_path / "none.sock"
    assert lock_holder(lock) is None  # no file yet
    fd = take_lock(lock, sock)
    try:
        assert lock_holder(lock) == os.getpid()
        # Nothing answers on the socket: the holder is closing, so the lock is waited for
        # (here in vain: it is this process's own) and refused after ``wait_s``.
        waited = wait_for(lambda: _refused(lock, sock, 0.3), timeout=10)
        assert waited >= 0.3
    finally:
        os.close(fd)
    assert lock_holder(lock) is None
    os.close(take_lock(lock, sock))


def _refused(lock: Path, sock: Path, wait_s: float) -> bool:
    from recalld.serve.instance import AlreadyRunning

    try:
        os.close(take_lock(lock, sock, wait_s=wait_s))
    except AlreadyRunning as exc:
        return exc.pid == os.getpid()
    return False
