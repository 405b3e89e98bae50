"""The full sync that follows a failed or incomplete one, with backoff (2, 4, 8, 16, then 30 s)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("recalld.serve.daemon")  # the daemon's log lines, as before the split

RETRY_DELAYS_S = (2.0, 4.0, 8.0, 16.0, 30.0)  # full sync after a failed or incomplete one


class RetrySchedule:
    """At most one pending retry; each failure in a row waits longer, a clean full sync resets."""

    def __init__(self, retry: Callable[[], None], stopping: Callable[[], bool]) -> None:
        self._retry = retry  # queues the full sync (nothing when the daemon is stopping)
        self._stopping = stopping
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._at: float | None = None
        self._failures = 0

    def schedule(self) -> None:
        """Retry after the next delay of the backoff, unless one is already due."""
        with self._lock:
            if self._stopping() or self._timer is not None:
                return
            delay = RETRY_DELAYS_S[min(self._failures, len(RETRY_DELAYS_S) - 1)]
            self._failures += 1
            self._at = time.time() + delay
            timer = threading.Timer(delay, self._retry_now)
            timer.daemon = True
            self._timer = timer
            timer.start()
        log.info("sync incomplete; retrying in %g s", delay)

    def succeeded(self) -> None:
        """A full sync or rebuild went through: the next failure starts the backoff over."""
        with self._lock:
            self._failures = 0

    def cancel(self) -> None:
        """The daemon stops: no retry fires any more."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def retry_in(self) -> float | None:
        """Seconds until the scheduled retry, or None."""
        with self._lock:
            at = self._at
        return None if at is None else round(max(at - time.time(), 0.0), 1)

    def _retry_now(self) -> None:
        with self._lock:
            self._timer, self._at = None, None
        self._retry()
