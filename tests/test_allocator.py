"""The daemon's allocator settings: temporaries are reused, freed memory goes back when idle."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from recalld.serve.allocator import IdleTrim

DAEMON = Path(__file__).resolve().parents[1] / "daemon"


def _wait(cond: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_idle_trim_runs_once_after_each_burst_and_never_while_busy() -> None:
    calls: list[float] = []
    trimmer = IdleTrim(lambda: calls.append(time.monotonic()), quiet_s=0.1)
    trimmer.start()
    try:
        time.sleep(0.3)
        assert calls == []  # nothing happened: nothing to give back
        busy_until = time.monotonic() + 0.5
        while time.monotonic() < busy_until:  # a burst longer than the quiet period
            trimmer.touch()
            time.sleep(0.02)
        assert calls == []  # never in the middle of a burst
        assert _wait(lambda: len(calls) == 1)
        assert calls[0] - busy_until >= 0.09  # a whole quiet period after the last touch
        time.sleep(0.3)
        assert len(calls) == 1  # once per burst
        trimmer.touch()
        assert _wait(lambda: len(calls) == 2)
    finally:
        trimmer.stop()


def test_idle_trim_touch_is_safe_from_many_threads() -> None:
    count = [0]
    trimmer = IdleTrim(lambda: count.__setitem__(0, count[0] + 1), quiet_s=0.05)
    trimmer.start()
    try:
        threads = [
            threading.Thread(target=lambda: [trimmer.touch() for _ in range(10_000)])
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert _wait(lambda: count[0] >= 1)
        time.sleep(0.2)
        assert count[0] <= 2  # a burst, not one trim a touch
    finally:
        trimmer.stop()


# Run in a process of its own: the settings are process-wide and must come before threads start.
_PROBE = r"""
import json, resource, sys, threading, time
import numpy as np
from recalld.serve import allocator

mode = sys.argv[1]
if mode == "old":  # the setting before: every block of 128 KiB or more mapped on its own
    import ctypes
    tuned = bool(ctypes.CDLL(None).mallopt(-3, 128 * 1024))
else:
    tuned = allocator.tune_allocator()

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

def search_like():
    # A scan's temporaries at 100k chunks: scores, their ranks, the rescored rows.
    scores = np.ones(100_000, dtype=np.float32)
    order = np.argpartition(scores, 99_000)
    rows = np.ones((2_000, 384), dtype=np.float32)
    return float(rows.sum()) + float(order[0])

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

results = []
worker = threading.Thread(target=lambda: [search_like() for _ in range(5)])
worker.start(); worker.join()
before = faults()
worker = threading.Thread(target=lambda: [search_like() for _ in range(50)])
worker.start(); worker.join()
per_search = (faults() - before) / 50

kept = []

def churn():  # requests of up to 1 MiB decoded by a handler thread, between longer-lived values
    held = []
    for _ in range(150):
        block = bytearray(1024 * 1024)
        block[::4096] = b"x" * len(block[::4096])
        held.append(block)
        kept.append(bytearray(4096))  # stays: the freed blocks around it are holes, not a top
    del held

base = rss_mb()
worker = threading.Thread(target=churn)
worker.start(); worker.join()
if mode != "quiet-unseen":
    allocator.note_activity()
time.sleep(allocator.QUIET_S * 3)
print(json.dumps({"tuned": tuned, "faults_per_search": per_search,
                  "rss_after_idle_mb": rss_mb() - base}))
"""


def _probe(mode: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(DAEMON), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, float] = json.loads(out.stdout)
    return result


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_allocator_reuses_temporaries_and_returns_freed_memory_when_quiet() -> None:
    tuned = _probe("tuned")
    assert tuned["tuned"] is True
    # ~1,100 pages of temporaries a search: mapped and faulted in afresh every time with a low
    # mmap threshold (the old setting), reused in place now.
    assert tuned["faults_per_search"] < 50, tuned
    # 150 MiB freed by a worker thread is back with the system once the daemon is quiet.
    assert tuned["rss_after_idle_mb"] < 30, tuned
    # The probe can tell: the old setting faulted every search's temporaries in afresh, and
    # without the trim the freed blocks stay.
    old = _probe("old")
    assert old["faults_per_search"] > 500, old
    kept = _probe("quiet-unseen")
    assert kept["rss_after_idle_mb"] > 100, kept
