"""Files of a rebuild killed with SIGKILL go at the next start (issue 41, item 9), also when
the killed daemon is still a zombie (its parent has not reaped it) or its pid was reused."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import write
from daemon_process import DaemonProcess, wait_for
from recalld.index.index_files import remove_stale_rebuilds, writer_alive

BASE = '[embedding]\nprovider = "none"\n[sessions]\npaths = []\n[sync]\ndebounce_s = 0.2\n'


def leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in home.glob("index.sqlite.rebuild-*"))


def test_a_killed_config_rebuild_leaves_nothing_behind(home: Path) -> None:
    for i in range(40):
        write(home / "memory" / f"n{i}.md", f"# Note {i}\n\nA survey of reef number {i}.\n" * 8)
    config = home / "config.toml"
    config.write_text(BASE)
    phases = home / "phases.log"
    env = {"RECALLD_TEST_PHASE_LOG": str(phases), "RECALLD_TEST_PAUSE_AT": "rebuild-indexed"}
    first = DaemonProcess(home, env=env).start()
    try:
        first.wait_idle()
        config.write_text(BASE + "[chunking]\ntarget_tokens = 120\n")  # a config-made rebuild
        wait_for(lambda: phases.exists() and "rebuild-indexed" in phases.read_text(), 60)
        made = leftovers(home)
        assert made, "the paused rebuild should hold its temporary database"
        assert first.proc is not None
        os.kill(first.proc.pid, signal.SIGKILL)  # not reaped: a zombie while the next starts
        second = DaemonProcess(home).start()
        try:
            second.wait_idle()
            assert leftovers(home) == [], f"left behind: {leftovers(home)} (made: {made})"
            assert "left by an interrupted rebuild" in second.log_tail(100_000)
            with second.client() as c:
                assert c.search("survey of reef", mode="keyword")["results"]
        finally:
            second.stop()
    finally:
        if first.proc is not None:
            first.proc.kill()
            first.proc.wait(10)


def test_a_reused_pid_does_not_keep_a_leftover(tmp_path: Path) -> None:
    index = tmp_path / "index.sqlite"
    sleeper = subprocess.Popen(["sleep", "30"])  # a live process, started after the file
    try:
        name = f"index.sqlite.rebuild-{sleeper.pid}"
        old, fresh = tmp_path / name, tmp_path / (name + "-wal")
        old.write_bytes(b"x")
        fresh.write_bytes(b"y")
        past = time.time() - 120
        os.utime(old, (past, past))  # last written before the sleeper started: not its file
        os.utime(fresh, None)  # written after it started: it may be its writer
        assert not writer_alive(sleeper.pid, old) and writer_alive(sleeper.pid, fresh)
        remove_stale_rebuilds(index)
        assert not old.exists() and fresh.exists()
    finally:
        sleeper.kill()
        sleeper.wait(10)
    remove_stale_rebuilds(index)  # the sleeper is gone: its file goes too
    assert not fresh.exists()
