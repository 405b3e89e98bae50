"""Searches first: background embedding steps aside while a search is in flight.

A first sync, the vector back-fill and transcript deltas keep the local model busy on every core
for minutes, and a search arriving meanwhile shared the cores with it: hybrid p50/p95 were
3-4x those of the same daemon idle (issue 40). So searches enter and leave a
:class:`SearchFirst` gate (a counter and a condition) and background embedding passes it before
each model batch: while a search is in flight it waits, at most :data:`WAIT_CAP_S` a batch, so
that back-to-back searches slow it down but never starve it. Searches never wait on the gate.

Background work marks itself with :func:`background` (a context variable: the model's own
helper threads see it through :func:`current`); its threads also lower their priority
(``embedding.background_nice``), so that the batch in flight when a search arrives, and the
indexing around it, yield the cores to the search.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from recalld.config import Config
from recalld.cpus import lower_thread_priority

__all__ = ["WAIT_CAP_S", "SearchFirst", "background", "current"]

#: Longest a background batch waits for the searches in flight (then it runs anyway).
WAIT_CAP_S = 0.5

_current: ContextVar[SearchFirst | None] = ContextVar("recalld_background", default=None)


class SearchFirst:
    """The gate: searches :meth:`enter` and :meth:`leave`; background batches :meth:`wait_turn`."""

    def __init__(self, *, enabled: bool = True, nice: int = 10, cap_s: float = WAIT_CAP_S) -> None:
        self.enabled = enabled
        self.nice = nice  # how much background threads lower their priority (0: not at all)
        self.cap_s = cap_s
        self._searches = 0
        self._cond = threading.Condition()
        # What the gate did, for status and the bench: waits, the ones the cap ended, seconds.
        self.waits = 0
        self.capped = 0
        self.waited_s = 0.0

    def configure(self, config: Config) -> None:
        """Take ``embedding.search_first`` and ``embedding.background_nice`` from ``config``."""
        self.enabled = config.bool("embedding.search_first")
        self.nice = config.int("embedding.background_nice")

    @property
    def searches(self) -> int:
        """Searches in flight now."""
        with self._cond:
            return self._searches

    def enter(self) -> None:
        """A search starts."""
        with self._cond:
            self._searches += 1

    def leave(self) -> None:
        """A search ended: background batches waiting for it go on when none is left."""
        with self._cond:
            self._searches -= 1
            if self._searches <= 0:
                self._searches = 0
                self._cond.notify_all()

    def wait_turn(self) -> float:
        """Before a background batch: wait while a search is in flight, at most ``cap_s``;
        the seconds waited."""
        if not self.enabled:
            return 0.0
        with self._cond:
            if self._searches == 0:
                return 0.0
            start = time.monotonic()
            deadline = start + self.cap_s
            while self._searches and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            waited = time.monotonic() - start
            self.waits += 1
            self.capped += self._searches > 0
            self.waited_s += waited
            return waited

    def lower_priority(self) -> bool:
        """Lower the calling (background) thread's priority by ``nice``; whether it is lowered."""
        return lower_thread_priority(self.nice)

    def as_dict(self) -> dict[str, float | int | bool]:
        """What ``status`` and the bench show."""
        return {
            "enabled": self.enabled,
            "nice": self.nice,
            "waits": self.waits,
            "capped": self.capped,
            "waited_s": round(self.waited_s, 3),
        }


@contextmanager
def background(gate: SearchFirst | None) -> Iterator[None]:
    """Run the block as background work that yields to searches through ``gate`` (None: as
    foreground work); the calling thread's priority is lowered for good."""
    if gate is None:
        yield
        return
    gate.lower_priority()
    token = _current.set(gate)
    try:
        yield
    finally:
        _current.reset(token)


def current() -> SearchFirst | None:
    """The gate of the background work this thread runs, or None (foreground: a search)."""
    return _current.get()
