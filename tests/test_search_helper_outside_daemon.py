"""The search helper driven directly, outside a daemon: when it starts, when it is
stopped as idle or given up as never ready, a process that cannot start, the hello ahead of
early changes, the wire form of a change, and the status line naming it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daemon_process import wait_for
from recalld.index.store import FileChange
from recalld.serve.helper_wire import change_from_wire, change_to_wire
from search_helper_support import _alive, _notes

pytestmark = pytest.mark.slow  # real daemons, one per test: minutes here (make test runs them)


def test_wire_round_trip_of_a_change() -> None:
    vec = (np.arange(384) / 384).astype(np.float32)
    change = FileChange([3, 4], [(7, vec), (9, -vec)], 12, [7, 9, 11])
    back = change_from_wire(change_to_wire(change))
    assert back.removed == [3, 4] and back.generation == 12 and back.inserted == [7, 9, 11]
    assert [i for i, _ in back.added] == [7, 9]
    assert np.array_equal(back.added[0][1], vec) and np.array_equal(back.added[1][1], -vec)
    assert change_from_wire(change_to_wire(FileChange([1], []))).generation is None


def _lone_helper(home: Path, local_embedder: Any, idle_s: float) -> Any:
    """A SearchHelper over a small synced index, outside any daemon."""
    from conftest import make_config, make_engine
    from recalld.serve.search_helper import SearchHelper

    _notes(home / "memory", 10)
    engine = make_engine(home, local_embedder)
    engine.sync()
    engine.close()
    values = {**make_config(home).values(), "embedding.provider": "local"}
    hello = {
        "op": "hello",
        "config": values,
        "base_dir": str(home),
        "index": str(engine.index_path),
    }
    return SearchHelper(lambda: hello, eligible=lambda: None, idle_s=idle_s)


def test_an_idle_helper_is_stopped(home: Path, local_embedder: Any) -> None:
    """Idle time counts from the helper's last answer; the check is called here, not left to
    the watchdog's clock, so a slow machine changes nothing."""
    from recalld.serve.search_helper import START_AFTER

    helper = _lone_helper(home, local_embedder, idle_s=3600.0)
    try:
        for _ in range(START_AFTER):
            helper.search({"query": "deploy"}, running=1)
        wait_for(lambda: helper.status()["state"] == "ready", timeout=120)
        pid = helper.status()["pid"]
        answer = helper.search({"query": "rollback database snapshot"}, running=1)
        assert answer is not None and answer["results"], answer
        helper.idle_s = 0.5
        time.sleep(0.6)
        helper.check_idle()
        status = helper.status()
        assert status["state"] == "idle" and status["idle_stops"] == 1, status
        assert "starts when" in status["why"], status
        wait_for(lambda: not _alive(pid), timeout=15)
        assert status["last_error"] is None  # a planned stop is no failure
    finally:
        helper.close()


def test_a_start_slower_than_the_idle_limit_is_not_idle(home: Path, local_embedder: Any) -> None:
    """Issue 38: a start that took longer than the idle limit ended the helper while it was
    loading. A helper is only idle once ready: with a limit far below any start, it still gets
    ready (and is stopped for idleness only after that)."""
    from recalld.serve.search_helper import START_AFTER

    helper = _lone_helper(home, local_embedder, idle_s=0.2)
    try:
        for _ in range(START_AFTER):
            helper.search({"query": "deploy"}, running=1)
        assert helper.status()["state"] == "starting"
        assert helper.status()["why"].startswith("loading for")
        wait_for(lambda: helper.status()["idle_stops"] == 1, timeout=120)
        status = helper.status()
        assert status["load_s"] is not None and status["last_error"] is None, status
        assert status["started"] == 1 and status["state"] == "idle", status
    finally:
        helper.close()


def test_a_helper_that_never_gets_ready_is_a_failure(home: Path, local_embedder: Any) -> None:
    """A start is slow, never endless: one not ready after ``start_s`` is given up (here a
    stopped process; the check is called directly, not left to the watchdog's clock)."""
    from recalld.serve.search_helper import START_AFTER

    helper = _lone_helper(home, local_embedder, idle_s=3600.0)
    helper.start_s = 1.0
    try:
        for _ in range(START_AFTER):
            helper.search({"query": "deploy"}, running=1)
        pid = helper._link.process.pid
        os.kill(pid, signal.SIGSTOP)  # alive, never ready
        time.sleep(1.2)
        helper.check_idle()
        status = helper.status()
        assert status["state"] == "idle" and status["last_error"] == "not ready within 1 s", status
        assert status["idle_stops"] == 0 and status["load_s"] is None, status
        wait_for(lambda: not _alive(pid), timeout=15)  # killed after the polite stop
    finally:
        helper.close()


def test_status_line_names_a_running_or_failed_helper() -> None:
    from recalld.surfaces.cli_output import daemon_line

    base = {"pid": 10, "uptime_s": 3.0, "pending": 0}
    ready = {"state": "ready", "pid": 11, "searches": 42}
    assert daemon_line({**base, "search_helper": ready}).endswith(
        "; search helper pid 11, 42 searches"
    )
    failed = {"state": "failed", "last_error": "the helper exited with status -9"}
    assert "off after failures (the helper exited with status -9)" in daemon_line(
        {**base, "search_helper": failed}
    )
    assert "helper" not in daemon_line({**base, "search_helper": {"state": "idle"}})
    assert "helper" not in daemon_line(base)


def test_only_lasting_overlap_starts_a_helper_and_a_failed_start_is_said(tmp_path: Path) -> None:
    from recalld.serve.search_helper import START_AFTER, SearchHelper

    hello = {
        "op": "hello",
        "config": {"sessions.paths": []},
        "base_dir": str(tmp_path),
        "index": str(tmp_path / "no-such-dir" / "index.sqlite"),
    }
    helper = SearchHelper(lambda: hello, eligible=lambda: None)
    try:
        for _ in range(START_AFTER - 1):  # now and then two searches at once: no helper
            assert helper.search({"query": "x"}, running=1) is None
        assert helper.status()["started"] == 0
        assert helper.search({"query": "x"}, running=0) is None  # a lone search counts nothing
        assert helper.status()["started"] == 0
        assert helper.search({"query": "x"}, running=1) is None  # the overlap lasts: one starts
        assert helper.status()["started"] == 1
        # It cannot open that index: it says so, and the searches run in the daemon meanwhile.
        wait_for(lambda: helper.status()["last_error"] is not None, timeout=60)
        status = helper.status()
        assert status["last_error"].startswith("the helper did not start:"), status
        assert status["state"] == "idle" and status["pid"] is None
    finally:
        helper.close()


def test_a_helper_whose_process_cannot_be_started_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from recalld.serve.search_helper import START_AFTER, SearchHelper

    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    helper = SearchHelper(lambda: {"op": "hello"}, eligible=lambda: None)
    try:
        for _ in range(START_AFTER):
            assert helper.search({"query": "x"}, running=1) is None
        status = helper.status()
        assert status["started"] == 1 and status["state"] == "idle"
        assert "did not start" in (status["last_error"] or ""), status
        assert helper.search({"query": "x"}, running=1) is None  # searches go on here
    finally:
        helper.close()


def test_the_hello_goes_ahead_of_changes_sent_before_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change the writer sends while the helper is being started follows the hello."""
    import sys

    from recalld.serve.helper_link import Link

    seen = tmp_path / "seen.txt"
    child = tmp_path / "fake-python"
    child.write_text(
        f"#!{sys.executable}\n"
        "import socket, sys\n"
        "from recalld.serve.helper_wire import Channel\n"
        "ch = Channel(socket.socket(fileno=int(sys.argv[-1])))\n"
        f"with open({str(seen)!r}, 'w') as out:\n"
        "    for _ in range(3):\n"
        "        msg = ch.receive()\n"
        "        out.write((msg or {}).get('op', 'eof') + '\\n')\n"
    )
    child.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(child))
    link = Link({"op": "hello"}, lambda link, msg: None)
    try:
        link.send(change_to_wire(FileChange([1], [])))  # before the process exists
        link.start()
        link.send(change_to_wire(FileChange([2], [])))
        assert link.process is not None
        link.process.wait(30)
        assert seen.read_text().split() == ["hello", "change", "change"]
    finally:
        link.close()
