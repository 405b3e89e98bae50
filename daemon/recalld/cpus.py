"""The cores this process may really use, and how its background threads give them way.

``os.cpu_count()`` is the machine's nominal count. A daemon pinned to some cores
(``taskset``, systemd's ``CPUAffinity``) or under a CPU quota (a container, systemd's
``CPUQuota``: cgroup v2 ``cpu.max``) gets fewer, and threads sized for the nominal count only
queue behind one another there (issue 40). :func:`usable_cores` is the smallest of the three.

Background work (first syncs, the vector back-fill, transcript deltas) lowers its threads'
priority with :func:`lower_thread_priority`, so that a search arriving meanwhile wins the cores.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from pathlib import Path

__all__ = ["cgroup_quota", "lower_thread_priority", "usable_cores"]

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cores() -> int:
    """Cores this process may use: the least of its CPU affinity, its cgroup v2 quota (rounded
    up) and the machine's count; at least 1."""
    counts = [os.cpu_count() or 1]
    with contextlib.suppress(AttributeError, OSError):  # macOS, Windows have no affinity
        counts.append(len(os.sched_getaffinity(0)))
    quota = cgroup_quota()
    if quota is not None:
        counts.append(math.ceil(quota))
    return max(min(counts), 1)


def cgroup_quota(root: Path = _CGROUP_ROOT, proc_cgroup: Path | None = None) -> float | None:
    """This process's cgroup v2 CPU quota in cores (``cpu.max``: quota over period), the
    tightest along its path to the root; None without a quota or without cgroup v2."""
    try:
        text = (proc_cgroup or Path("/proc/self/cgroup")).read_text()
    except OSError:
        return None
    rel = next((line[3:] for line in text.splitlines() if line.startswith("0::")), None)
    if rel is None:
        return None
    tightest: float | None = None
    folder = root / rel.strip().lstrip("/")
    while True:
        quota = _cpu_max(folder / "cpu.max")
        if quota is not None and (tightest is None or quota < tightest):
            tightest = quota
        if folder == root or root not in folder.parents:
            return tightest
        folder = folder.parent


def _cpu_max(path: Path) -> float | None:
    """Cores allowed by one ``cpu.max`` file (``max 100000`` or a missing file: None)."""
    try:
        quota, period = path.read_text().split()[:2]
        if quota == "max":
            return None
        return max(int(quota) / int(period), 0.01)
    except (OSError, ValueError):
        return None


def lower_thread_priority(by: int) -> bool:
    """Run the calling thread ``by`` nice steps below the process's main thread (Linux only:
    elsewhere the call would change the whole process); whether it runs lowered now.

    Only this thread is affected: Linux keeps a nice value per thread (``setpriority`` on its
    thread id), and a thread starts with its creator's (so the target is counted from the main
    thread, never from the thread's own value). An unprivileged thread cannot raise its priority
    again, so threads that also serve searches must never call this.
    """
    if by <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        target = min(os.getpriority(os.PRIO_PROCESS, os.getpid()) + by, 19)
        tid = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, tid) < target:
            os.setpriority(os.PRIO_PROCESS, tid, target)
    except OSError:
        return False
    return True
