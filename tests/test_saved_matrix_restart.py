"""A real daemon stopped soon after its start keeps the saved vector matrix for the next one.

Before, the saved matrix's meta.json was removed at the load and written again only at a clean
close: a daemon that exited before (a quick stop while its writer was busy, ``kill -9``) left
none, and every next start read vec0 again (22-27 s at 1M instead of 7-11).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import write
from daemon_process import DaemonProcess, wait_for
from recalld.index.store import Store
from recalld.index.vector_files import FORMAT

QUERIES = ("lentil soup with cumin", "sailing boat", "garden tomatoes")
TOPICS = ("lentil soup", "sailing", "tomatoes", "bicycle repair", "sourdough", "chess", "jazz")


def _home(home: Path) -> Path:
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n")
    for i in range(28):
        topic = TOPICS[i % len(TOPICS)]
        write(home / "memory" / f"n{i}.md", f"# Note {i}\n\nA note on {topic}, number {i}.\n")
    return home / "index.sqlite.vectors" / "meta.json"


def _answers(d: DaemonProcess) -> tuple[list[Any], str]:
    """The hybrid results of QUERIES and where the matrix was loaded from."""
    with d.client(timeout=60) as c:
        got = []
        for q in QUERIES:
            res = c.search(q)
            assert not res.get("degraded"), res
            got.append([(r["path"], r["start_line"], r["scores"]) for r in res["results"]])
        matrix = c.status()["vector_matrix"]
    assert matrix is not None
    return got, str(matrix["loaded_from"])


def _indexed(home: Path) -> tuple[DaemonProcess, list[Any]]:
    """A daemon that indexed the notes with their vectors, and its answers."""
    d = DaemonProcess(home).start()
    d.wait_idle()
    with d.client() as c:
        wait_for(lambda: c.status()["vectors"]["vectors_pending"] == 0, timeout=120)
    want, _ = _answers(d)
    assert all(want), want
    return d, want


def _started_answers(home: Path, loaded_from: str, want: list[Any]) -> None:
    """A new daemon on ``home`` loads its matrix from ``loaded_from`` and answers ``want``."""
    d = DaemonProcess(home).start()
    try:
        got, source = _answers(d)
        assert (source, got) == (loaded_from, want)
    finally:
        d.stop()


@pytest.mark.slow
def test_a_quick_stop_keeps_the_saved_matrix(home: Path) -> None:
    meta = _home(home)
    d, want = _indexed(home)
    d.stop()  # clean: saved
    assert meta.exists()
    for _ in range(2):  # started, answered, killed at once: no close, no save
        d = DaemonProcess(home).start()
        got, loaded_from = _answers(d)
        assert loaded_from == "saved files", d.log_tail()
        assert got == want
        d.kill9()
        assert meta.exists()
    _started_answers(home, "saved files", want)


@pytest.mark.slow
def test_a_matrix_read_from_the_index_is_saved_at_once(home: Path) -> None:
    meta = _home(home)
    d, want = _indexed(home)
    d.stop()
    meta.unlink()  # as after a crash: the next start reads vec0
    d = DaemonProcess(home).start()
    got, loaded_from = _answers(d)
    assert (loaded_from, got) == ("index", want)
    wait_for(meta.exists, timeout=60)  # saved in the background, no stop needed
    d.kill9()
    _started_answers(home, "saved files", want)


@pytest.mark.slow
def test_a_matrix_saved_in_an_older_format_is_used_and_saved_anew(home: Path) -> None:
    """Format 3 (before issue 40) is read as it is, then written again in the background."""
    meta = _home(home)
    d, want = _indexed(home)
    d.stop()
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "format": 3}))
    d = DaemonProcess(home).start()
    got, loaded_from = _answers(d)
    assert (loaded_from, got) == ("saved files", want)
    wait_for(lambda: json.loads(meta.read_text())["format"] == FORMAT, timeout=60)
    d.kill9()
    _started_answers(home, "saved files", want)


@pytest.mark.slow
def test_kill9_during_the_save_still_answers_correctly(home: Path) -> None:
    meta = _home(home)
    d, want = _indexed(home)
    d.stop()
    meta.unlink()
    phases = home / "phases"
    env = {"RECALLD_TEST_PHASE_LOG": str(phases), "RECALLD_TEST_PAUSE_AT": "vectors-saving"}
    d = DaemonProcess(home, env=env).start()
    wait_for(lambda: phases.exists() and "vectors-saving" in phases.read_text(), timeout=60)
    d.kill9()  # the rows and ids written, the rest and meta.json not
    assert not meta.exists()
    _started_answers(home, "index", want)


@pytest.mark.slow
def test_a_stop_during_the_start_sync_closes_cleanly(home: Path) -> None:
    """SIGTERM while the start's sync runs: the sync ends early, the index is closed cleanly
    (no check before the next start serves) and the next start indexes the rest."""
    meta = _home(home)
    d, _ = _indexed(home)
    d.stop()
    many = 3000
    for i in range(many):
        write(home / "memory" / "many" / f"m{i}.md", f"# Many {i}\n\nFiller note {i} of {many}.\n")
    d = DaemonProcess(home).start()
    with d.client() as c:  # the sync is under way
        wait_for(lambda: (c.status()["counts"].get("memory_files") or 0) > 28, timeout=60)
    started = time.monotonic()
    d.stop()
    took = time.monotonic() - started
    log = d.log_tail(20_000)
    assert "still indexing" not in log and took < 15, (took, log)
    # exit status 0: an embedding call in flight at the exit once ended in SIGABRT (-6)
    assert d.proc is not None and d.proc.returncode == 0, (d.proc and d.proc.returncode, log)
    assert "terminate called" not in log
    assert (home / "index.sqlite.closed-cleanly").exists()
    assert meta.exists()  # keyword rows only so far: the matrix did not change
    with Store(home / "index.sqlite", readonly=True) as store:
        (indexed,) = store.conn.execute("SELECT count(*) FROM files").fetchone()
    assert indexed < many + 28  # cut short, not finished before the stop
    d = DaemonProcess(home).start()
    try:
        d.wait_idle(timeout=300)
        with d.client() as c:
            assert c.status()["counts"]["memory_files"] == many + 28
    finally:
        d.stop()
