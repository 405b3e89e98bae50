"""The search helper process: started when searches overlap, fed every write, never a loss.

A real daemon with the real local model; concurrency from client threads. Every answer given
while the helper runs is compared with the answer a lone search gives (the helper's and the
daemon's engines must agree exactly), and writes made while it runs must show in every answer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import write
from daemon_process import DaemonProcess, wait_for
from recalld.index.store import FileChange
from recalld.serve.helper_wire import change_from_wire, change_to_wire
from recalld_client.types import Mode

pytestmark = pytest.mark.slow  # real daemons, one per test: minutes here (make test runs them)

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]
QUERIES = [
    "how do we deploy the service",
    "what did Sam say about the budget",
    "kilo lima notes",
    "rollback procedure for the database",
]


def _notes(root: Path, n: int = 40) -> None:
    for i in range(n):
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 5 + 3) % len(WORDS)]
        write(
            root / f"note-{i:02d}.md",
            f"# Note {i}\n\nThe {a} team wrote about {b} on day {i}.\n\n"
            f"Deploy steps for service {i}: build, test, ship. Sam said the budget is {i * 10}.\n"
            f"Rollback: restore the database snapshot {i}.\n",
        )


def _config(home: Path, extra: str = "") -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n" + extra)


@pytest.fixture
def daemon(home: Path) -> Iterator[DaemonProcess]:
    _config(home)
    _notes(home / "memory")
    d = DaemonProcess(home).start()
    d.wait_idle()
    yield d
    d.stop()


def _shape(result: Any) -> list[tuple[Any, ...]]:
    """What must be identical between two engines: every result's place, lines and score."""
    return [
        (r["path"], r["start_line"], r["end_line"], round(r["score"], 6)) for r in result["results"]
    ]


def _helper(d: DaemonProcess) -> dict[str, Any]:
    with d.client() as c:
        return dict(c.status()["daemon"]["search_helper"])


def _hammer(
    d: DaemonProcess,
    queries: list[str],
    seconds: float,
    check: Callable[[str, Any], None],
    mode: Mode | None = None,
) -> int:
    """Four clients searching back to back; ``check(query, result)`` on every answer."""
    stop = time.monotonic() + seconds
    errors: list[BaseException] = []
    done = [0]

    def loop(i: int) -> None:
        try:
            with d.client(timeout=60) as c:
                j = i
                while time.monotonic() < stop:
                    q = queries[j % len(queries)]
                    check(q, c.search(q, mode=mode))
                    done[0] += 1
                    j += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return done[0]


def _until_ready(d: DaemonProcess, queries: list[str]) -> dict[str, Any]:
    """Overlapping searches until the helper is ready and has answered some."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        _hammer(d, queries, 1.0, lambda q, r: None)
        state = _helper(d)
        if state["state"] == "ready" and state["searches"] > 0:
            return state
    raise AssertionError(f"the helper never answered: {_helper(d)}\n{d.log_tail()}")


def test_wire_round_trip_of_a_change() -> None:
    vec = (np.arange(384) / 384).astype(np.float32)
    change = FileChange([3, 4], [(7, vec), (9, -vec)], 12, [7, 9, 11])
    back = change_from_wire(change_to_wire(change))
    assert back.removed == [3, 4] and back.generation == 12 and back.inserted == [7, 9, 11]
    assert [i for i, _ in back.added] == [7, 9]
    assert np.array_equal(back.added[0][1], vec) and np.array_equal(back.added[1][1], -vec)
    assert change_from_wire(change_to_wire(FileChange([1], []))).generation is None


def test_a_lone_search_starts_no_helper(daemon: DaemonProcess) -> None:
    with daemon.client() as c:
        for q in QUERIES * 3:
            c.search(q)
    state = _helper(daemon)
    assert state["state"] == "idle" and state["started"] == 0, state
    assert state["why"].startswith("starts when 8 searches arrive while others run"), state


def test_why_no_helper_starts_is_said(home: Path) -> None:
    """Issue 41 item 11: under 4 clients a keyword-only daemon never started a helper, and
    nothing said why. The reason is in status (and once in the log)."""
    _config(home, '[embedding]\nprovider = "none"\n')
    _notes(home / "memory", 20)
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        deadline = time.monotonic() + 60  # searches overlap for as long as it takes to last
        while "no search helper may start" not in d.log_tail(20000):
            assert time.monotonic() < deadline, d.log_tail()
            _hammer(d, QUERIES, 1.0, lambda q, r: None)
        state = _helper(d)
        assert state["state"] == "idle" and state["started"] == 0, state
        assert state["why"] == "may not start: searches do not use the local model now", state
    finally:
        d.stop()


def test_helper_answers_exactly_as_the_daemon(daemon: DaemonProcess) -> None:
    with daemon.client() as c:
        alone = {q: _shape(c.search(q)) for q in QUERIES}
    assert all(alone.values())
    state = _until_ready(daemon, QUERIES)
    pid = state["pid"]
    assert pid and pid != daemon.proc.pid  # type: ignore[union-attr]
    before = state["searches"]

    def same(q: str, result: Any) -> None:
        assert _shape(result) == alone[q], q
        assert result["vectors_pending"] == 0 and not result.get("degraded")

    answered = _hammer(daemon, QUERIES, 3.0, same)
    after = _helper(daemon)
    assert after["searches"] - before > answered // 5  # a real share went through the helper
    assert after["fallbacks"] == 0 and after["last_error"] is None


def test_writes_reach_the_helper_in_order(daemon: DaemonProcess, home: Path) -> None:
    _until_ready(daemon, QUERIES)
    note = write(home / "memory" / "zebra.md", "# Zebra\n\nThe quokkaflux zebra crossing plan.\n")
    wait_for(lambda: _found(daemon, "quokkaflux"), timeout=30)
    with daemon.client() as c:
        # Keyword-searchable comes first; the vector follows (later still while searches run,
        # which go first): wait for it, then the helper's matrix must hold it too.
        wait_for(lambda: c.status()["vectors"]["vectors_pending"] == 0, timeout=60)
        # The vector channel alone: the helper's matrix must hold the new vector too.
        vec_alone = _shape(c.search("zebra crossing plan", mode="vector"))
    assert any(p.endswith("zebra.md") for p, *_ in vec_alone)

    def has_zebra(q: str, result: Any) -> None:
        paths = [r["path"] for r in result["results"]]
        assert any(p.endswith("zebra.md") for p in paths), (q, paths)

    before = _helper(daemon)["searches"]
    _hammer(daemon, ["quokkaflux", "quokkaflux zebra"], 2.0, has_zebra)
    assert _helper(daemon)["searches"] > before
    # The vector channel alone through four clients: every answer is the lone search's.
    lone = {"zebra crossing plan": vec_alone}
    answered = _hammer(daemon, list(lone), 2.0, lambda q, r: _check_same(lone, q, r), mode="vector")
    assert answered > 0

    note.unlink()
    wait_for(lambda: not _found(daemon, "quokkaflux"), timeout=30)
    daemon.wait_idle()

    def no_zebra(q: str, result: Any) -> None:
        assert not any(r["path"].endswith("zebra.md") for r in result["results"]), q

    before = _helper(daemon)["searches"]
    _hammer(daemon, ["quokkaflux", "zebra crossing plan"], 2.0, no_zebra)
    _hammer(daemon, ["zebra crossing plan"], 2.0, no_zebra, mode="vector")
    assert _helper(daemon)["searches"] > before


def _found(d: DaemonProcess, word: str) -> bool:
    with d.client() as c:
        return bool(c.search(word, mode="keyword")["results"])


def test_a_killed_helper_costs_no_search(daemon: DaemonProcess) -> None:
    pid = _until_ready(daemon, QUERIES)["pid"]
    os.kill(pid, signal.SIGKILL)
    with daemon.client() as c:
        alone = {q: _shape(c.search(q)) for q in QUERIES}
    # Every answer right, none an error, from the kill on; a new helper starts meanwhile.
    _hammer(daemon, QUERIES, 2.0, lambda q, r: _check_same(alone, q, r))
    state = _until_ready(daemon, QUERIES)
    assert state["pid"] != pid and state["started"] == 2
    assert "status -9" in (state["last_error"] or ""), state


def test_a_stuck_helper_costs_one_wait_then_is_replaced(daemon: DaemonProcess) -> None:
    from recalld.serve.search_helper import ANSWER_S

    pid = _until_ready(daemon, QUERIES)["pid"]
    with daemon.client() as c:
        alone = {q: _shape(c.search(q)) for q in QUERIES}
    os.kill(pid, signal.SIGSTOP)  # alive, holding its socket, answering nothing
    try:
        # Every answer right: the one handed to the stuck helper too, after ANSWER_S.
        _hammer(daemon, QUERIES, ANSWER_S + 2.0, lambda q, r: _check_same(alone, q, r))
        state = _helper(daemon)
        assert state["last_error"] == f"no answer within {ANSWER_S:g} s", state
        assert state["fallbacks"] >= 1
        wait_for(lambda: not _alive(pid), timeout=15)  # stopped, then killed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    state = _until_ready(daemon, QUERIES)
    assert state["pid"] != pid and state["started"] == 2


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


def test_the_helper_goes_with_the_daemon(daemon: DaemonProcess) -> None:
    pid = _until_ready(daemon, QUERIES)["pid"]
    daemon.stop()
    wait_for(lambda: not _alive(pid), timeout=15)


def test_the_helper_goes_when_the_daemon_is_killed(daemon: DaemonProcess) -> None:
    pid = _until_ready(daemon, QUERIES)["pid"]
    daemon.kill9()
    wait_for(lambda: not _alive(pid), timeout=15)


def test_a_rebuild_retires_the_helper(daemon: DaemonProcess) -> None:
    pid = _until_ready(daemon, QUERIES)["pid"]
    with daemon.client(timeout=120) as c:
        c.reindex(wait=True)
    wait_for(lambda: not _alive(pid), timeout=15)
    with daemon.client() as c:
        alone = {q: _shape(c.search(q)) for q in QUERIES}
    state = _until_ready(daemon, QUERIES)
    assert state["pid"] != pid and state["started"] == 2
    _hammer(daemon, QUERIES, 1.5, lambda q, r: _check_same(alone, q, r))


def _check_same(alone: dict[str, Any], q: str, result: Any) -> None:
    assert _shape(result) == alone[q], q


def test_switched_off_in_the_config(home: Path) -> None:
    _config(home, "[search]\nhelper_process = false\n")
    _notes(home / "memory", 10)
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        _hammer(d, QUERIES, 1.5, lambda q, r: None)
        assert _helper(d) == {**_helper(d), "state": "off", "started": 0, "searches": 0}
    finally:
        d.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (its parent, the daemon, may not have reaped it yet).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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


def test_switching_it_off_in_a_live_config_edit(daemon: DaemonProcess, home: Path) -> None:
    pid = _until_ready(daemon, QUERIES)["pid"]
    _config(home, "[search]\nhelper_process = false\n")
    wait_for(lambda: _helper(daemon)["state"] == "off", timeout=30)
    wait_for(lambda: not _alive(pid), timeout=15)
    started = _helper(daemon)["started"]
    _hammer(daemon, QUERIES, 1.5, lambda q, r: None)
    assert _helper(daemon)["started"] == started and _helper(daemon)["state"] == "off"


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
