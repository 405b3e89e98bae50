"""A quick restart: a daemon stopped 10 s after its start, then started again (issue 40).

Before the saved matrix outlived a quick stop, the stopped daemon exited before it had saved
the vector matrix (and had removed the saved copy's meta.json at its load), so the next start
read vec0 again: at 1M, 22-27 s instead of 7-11, after every quick restart. The figure is the
second start's time to its first answered search, over the plain cold start of the same run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.daemonproc import Daemon

QUICK_STOP_S = 10.0  # from the first start's spawn to its stop


def quick_restart(sheet: Any, home: Path, tag: str, query: str) -> None:
    """Start, stop ``QUICK_STOP_S`` after the spawn, start again: the second start's cold
    start (``cold_start_s_<tag>_after_quick_restart``) and where its matrix came from."""
    spawned = time.perf_counter()
    d = Daemon(home).start(timeout=900)
    try:
        time.sleep(max(0.0, QUICK_STOP_S - (time.perf_counter() - spawned)))
    finally:
        d.stop()
    t = time.perf_counter()
    d = Daemon(home).start(timeout=900)
    try:
        with d.client(timeout=900) as c:
            first = c.search(query)
            took = time.perf_counter() - t
            matrix: Any = dict(c.status()).get("vector_matrix") or {}
    finally:
        d.stop()
    if first.get("degraded"):
        sheet.errors[f"quick_restart_{tag}"] = f"degraded first search: {first['degraded']}"
    sheet.put(f"cold_start_s_{tag}_after_quick_restart", took, 2)
    sheet.put(f"vector_loaded_from_after_quick_restart_{tag}", matrix.get("loaded_from"))
    cold = sheet.metrics.get(f"cold_start_s_{tag}")
    if cold:
        sheet.put(f"cold_start_after_quick_restart_over_cold_start_{tag}", took / cold, 3)
