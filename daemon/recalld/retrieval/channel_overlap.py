"""When a search runs its two channels side by side: only while it is the only search running.

The vector channel (the query embedding, the scan) can run on an executor thread while the
keyword channel runs in the handler. That buys a lone search little and costs every search CPU:
both channels are partly Python, and two threads of one search hand the GIL back and forth.
Measured on the 100k scale home (2 cores, alternating daemons, 4 s per rate):

- channels side by side (the vector channel, or only the query embedding, on the executor):
  14.7-15.1 ms of daemon CPU a search, 73.7-75.3 searches/s from one client, 105-108 from four;
- one after the other: 12.8-13.6 ms a search, 72.3-72.9 from one client, 120-129 from four.

So a search overlaps its channels only when no other search is in flight: an idle daemon answers
a lone query as fast as it can, a busy one spends its cores on more searches rather than on
hand-offs inside each.

The count also feeds the engine's search-first gate (:mod:`recalld.embedding.search_first`):
background embedding waits while a search is in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from recalld.embedding.search_first import SearchFirst

__all__ = ["InFlight"]


class InFlight:
    """Counts the searches running in one engine."""

    def __init__(self, gate: SearchFirst | None = None) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._gate = gate  # told of every search, here or handed to the search helper

    @property
    def running(self) -> int:
        """Searches in flight now."""
        with self._lock:
            return self._running

    @contextmanager
    def search(self) -> Iterator[bool]:
        """Count one search while the block runs; yields whether it is the only one."""
        with self._lock:
            self._running += 1
            alone = self._running == 1
        if self._gate is not None:
            self._gate.enter()
        try:
            yield alone
        finally:
            if self._gate is not None:
                self._gate.leave()
            with self._lock:
                self._running -= 1
