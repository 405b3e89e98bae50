"""Model runs side by side: the batches of one embedding call on several threads, one core each.

The local model's onnxruntime session runs each batch on one thread; a call of many batches
runs them on ``width`` threads at once (the caller's own and ``width - 1`` helpers). One thread
per run used two cores 197-198 % of the time and embedded 18-20 % more chunks a second than one
run on onnxruntime's two intra-op threads (182 %: every operator waits for both halves), with
bit-identical vectors; a lone query runs on one core, and concurrent searches no longer queue
for onnxruntime's worker (docs/DECISIONS.md, session 12).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from recalld.cpus import usable_cores
from recalld.embedding import search_first

__all__ = ["Runner", "physical_cores"]


class Runner:
    """Runs ``job(batch)`` for every batch, up to ``width`` at a time; helpers start on demand."""

    def __init__(self, width: int) -> None:
        if width < 1:
            raise ValueError("width must be at least 1")
        self.width = width
        self._pools: dict[bool, ThreadPoolExecutor] = {}  # background or not -> helpers
        self._lock = threading.Lock()

    def run(self, batches: Sequence[list[int]], job: Callable[[list[int]], None]) -> None:
        """Every batch once, longest first (the calls' batches come shortest first, and the last
        one to finish sets the call's time); the first error stops the rest and is raised."""
        order = list(reversed(batches))
        gate = search_first.current()
        if gate is not None:
            job = _paced(job, gate)
        helpers = min(self.width, len(order)) - 1
        if helpers <= 0:
            for batch in order:
                job(batch)
            return
        todo = iter(order)
        take = threading.Lock()
        failed: list[BaseException] = []

        def work() -> None:
            if gate is not None:
                gate.lower_priority()  # a background helper (once per thread)
            while True:
                with take:
                    batch = None if failed else next(todo, None)
                if batch is None:
                    return
                try:
                    job(batch)
                except BaseException as exc:  # noqa: BLE001 - stop the others, raise it
                    with take:
                        failed.append(exc)
                    return

        pool = self._helpers(background=gate is not None)
        started: list[Future[None]] = [pool.submit(work) for _ in range(helpers)]
        work()
        for future in started:
            future.result()  # a helper never raises: errors land in ``failed``
        if failed:
            raise failed[0]

    def close(self) -> None:
        """Let the helper threads go (they are idle between calls)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=False)

    def _helpers(self, *, background: bool) -> ThreadPoolExecutor:
        with self._lock:
            pool = self._pools.get(background)
            if pool is None:
                prefix = "recalld-embed-bg" if background else "recalld-embed"
                pool = ThreadPoolExecutor(max_workers=self.width - 1, thread_name_prefix=prefix)
                self._pools[background] = pool
            return pool


def _paced(
    job: Callable[[list[int]], None], gate: search_first.SearchFirst
) -> Callable[[list[int]], None]:
    """``job`` behind the gate: each batch first waits for the searches in flight (capped)."""

    def paced(batch: list[int]) -> None:
        gate.wait_turn()
        job(batch)

    return paced


def physical_cores() -> int:
    """Cores this process may run on, hyperthread siblings counted once (onnxruntime's own
    default): two runs on one core's siblings gain little and double the memory of the runs.
    Never more than :func:`~recalld.cpus.usable_cores` (a CPU quota)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return usable_cores()
    cores: set[str] = set()
    for cpu in allowed:
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            cores.add(siblings.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(min(len(cores), usable_cores()), 1)
