"""Which connections the server serves, and how it refuses the rest without running out of
file descriptors (issue 41 item 5).

Every connection costs a descriptor until it is closed, a refused one too. Clients together may
hold at most the soft limit less ``fd_limits.RESERVE`` and what the daemon had open at start:
notes, the index and the model always find one. Past ``max_connections`` a client is refused
with a "too many connections" frame, the connection kept open for up to a second so that it
reads why; past the descriptors clients may hold (or with many refusals under way), it is
refused at once: the frame, then the hang-up. Refusals and failed accepts are logged as one
line every ``LOG_EVERY_S`` with how many there were, never a line (or a traceback) each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final, Literal

from recalld.fd_limits import OUT_OF_RESOURCES, RESERVE, open_fds, soft_limit

log = logging.getLogger("recalld.serve.server")

LOG_EVERY_S: Final = 10.0
# Refusals that keep their connection open a moment (so the client reads why) at once; more
# are refused at once: a flood of clients must not hold a descriptor each for a second.
MAX_LINGERING: Final = 32

Verdict = Literal["serve", "refuse", "refuse_now"]


class LogEvery:
    """A log line at most every ``seconds``, saying how many events it stands for."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._last = -1e9
        self._unsaid = 0

    def log(self, message: str, *args: object) -> None:
        now = time.monotonic()
        self._unsaid += 1
        if now - self._last < self.seconds:
            return
        count, self._unsaid, self._last = self._unsaid, 0, now
        more = f" ({count - 1} more since the last such line)" if count > 1 else ""
        log.warning(message + more, *args)


class Admission:
    """Counts the connections open (served and being refused) and says what to do with one."""

    def __init__(self, max_connections: int, listen_backlog: int) -> None:
        soft, in_use = soft_limit(), open_fds()
        # Descriptors clients may hold at once (None: no limit known).
        self.fd_cap: int | None = None
        if soft is not None:
            self.fd_cap = max(16, soft - RESERVE - (in_use or 0))
        self.soft_limit = soft
        self.max_connections = max_connections
        if self.fd_cap is not None:
            # Served, refusals lingering, and one batch just accepted: all within fd_cap.
            room = self.fd_cap - MAX_LINGERING - self.backlog(listen_backlog)
            self.max_connections = min(max_connections, max(8, room))
        self.served = 0
        self.lingering = 0
        self.refused = 0
        self.accept_failures = 0
        self._refusals = LogEvery(LOG_EVERY_S)
        self._accepts = LogEvery(LOG_EVERY_S)

    def backlog(self, wanted: int) -> int:
        """The listen backlog; asyncio also accepts up to this many at once, each taking a
        descriptor before any is looked at, so it stays well within what clients may hold."""
        if self.fd_cap is None:
            return wanted
        return max(8, min(wanted, self.fd_cap // 8))

    def verdict(self) -> Verdict:
        """For a connection just accepted (it is counted by the caller afterwards)."""
        if self.served < self.max_connections:
            return "serve"
        held = self.served + self.lingering
        if self.lingering >= MAX_LINGERING or (self.fd_cap is not None and held >= self.fd_cap):
            return "refuse_now"
        return "refuse"

    def note_refusal(self, why: str) -> None:
        self.refused += 1
        self._refusals.log("connection refused: %s", why)

    def on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's exception handler: a failed accept for want of descriptors is one line
        now and then (asyncio logs a traceback each, and retries a second later)."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in OUT_OF_RESOURCES:
            self.accept_failures += 1
            self._accepts.log(
                "cannot accept a connection: %s (%s of %s descriptors open); clients wait",
                exc.strerror,
                open_fds(),
                self.soft_limit,
            )
            return
        loop.default_exception_handler(context)

    def stats(self) -> dict[str, Any]:
        """For ``status.daemon.connections``."""
        return {
            "open": self.served,
            "max": self.max_connections,
            "refused": self.refused,
            "accept_failures": self.accept_failures,
            "fds_open": open_fds(),
            "fds_limit": self.soft_limit,
        }
