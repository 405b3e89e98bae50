"""The search helper process in a real daemon: started when searches overlap, fed every
write, never a loss.

A real daemon with the real local model; concurrency from client threads. Every answer given
while the helper runs is compared with the answer a lone search gives (the helper's and the
daemon's engines must agree exactly), and writes made while it runs must show in every answer.
A killed, stuck or rebuilt-away helper is replaced, and the helper goes with its daemon.
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

import pytest

from conftest import write
from daemon_process import DaemonProcess, wait_for
from recalld_client.types import Mode
from search_helper_support import _alive, _notes

pytestmark = pytest.mark.slow  # real daemons, one per test: minutes here (make test runs them)

QUERIES = [
    "how do we deploy the service",
    "what did Sam say about the budget",
    "kilo lima notes",
    "rollback procedure for the database",
]


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


def test_switching_it_off_in_a_live_config_edit(daemon: DaemonProcess, home: Path) -> None:
    pid = _until_ready(daemon, QUERIES)["pid"]
    _config(home, "[search]\nhelper_process = false\n")
    wait_for(lambda: _helper(daemon)["state"] == "off", timeout=30)
    wait_for(lambda: not _alive(pid), timeout=15)
    started = _helper(daemon)["started"]
    _hammer(daemon, QUERIES, 1.5, lambda q, r: None)
    assert _helper(daemon)["started"] == started and _helper(daemon)["state"] == "off"
