"""Times the watcher missed events, and the reconcile with the disk that each one asks for.

inotify drops events when its kernel queue overflows (``fs.inotify.max_queued_events``, 16,384
by default: a 20,000-file rename storm, a parallel ``sed -i`` over thousands of notes, or a
daemon stalled for a moment). watchdog then only logs a warning and rebuilds its watches; it
does not tell its handlers. :class:`OverflowLog` listens for that warning and
:class:`MissedEvents` counts it (and a watcher thread that died), asks the owner to reconcile
the memory folders with the disk once the burst has settled, and says so in ``status`` until a
full sync that began after the last miss has finished.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

SETTLE_S = 1.0  # a reconcile waits for this much calm after the last miss (a storm goes on)
EPISODE_S = 1.0  # overflow warnings this close together are one overflow (watchdog logs several)

OVERFLOW = "overflow"
THREAD_DIED = "thread_died"
_WHAT = {
    OVERFLOW: "the kernel's inotify event queue overflowed",
    THREAD_DIED: "the folder watcher's thread stopped",
}


class MissedEvents:
    """Counts of missed events and the reconciles they asked for (thread-safe).

    Generations: every miss wants one more reconcile (``_wanted``); :meth:`due` hands it out
    once calm (``_asked``); the owner reports a full sync that started at generation ``g`` as
    done with :meth:`caught_up` (``_done``). "Reconciling" means a miss not yet caught up.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {OVERFLOW: 0, THREAD_DIED: 0}
        self._last: dict[str, float] = {}  # kind: wall time of the last one
        self._last_mono = 0.0
        self._wanted = self._asked = self._done = 0
        self._caught_up_at: float | None = None

    def note(self, kind: str) -> None:
        """Events were missed (``OVERFLOW`` or ``THREAD_DIED``)."""
        now = time.monotonic()
        with self._lock:
            same_episode = kind == OVERFLOW and now - self._last_mono < EPISODE_S
            if not (same_episode and self._wanted > self._asked):
                self._counts[kind] = self._counts.get(kind, 0) + 1
            self._last[kind] = time.time()
            self._last_mono = now
            self._wanted = self._asked + 1

    def due(self, settle_s: float = SETTLE_S) -> bool:
        """Whether a reconcile should start now (then it counts as asked for)."""
        with self._lock:
            if self._wanted <= self._asked or time.monotonic() - self._last_mono < settle_s:
                return False
            self._asked = self._wanted
            return True

    @property
    def asked(self) -> int:
        """The generation a full sync starting now covers."""
        with self._lock:
            return self._asked

    def caught_up(self, generation: int) -> None:
        """A full sync that started at ``generation`` has finished without error."""
        with self._lock:
            if generation > self._done:
                self._done = generation
                if self._done >= self._wanted:
                    self._caught_up_at = time.time()

    def reconciling(self) -> bool:
        """Whether a miss has not been caught up by a full sync yet."""
        with self._lock:
            return self._wanted > self._done

    def status(self) -> dict[str, Any]:
        """The ``daemon.missed_events`` block of ``status``."""
        with self._lock:
            return {
                "overflows": self._counts[OVERFLOW],
                "last_overflow": self._last.get(OVERFLOW),
                "watcher_restarts": self._counts[THREAD_DIED],
                "last_watcher_restart": self._last.get(THREAD_DIED),
                "reconciling": self._wanted > self._done,
                "last_reconciled": self._caught_up_at,
            }

    def warnings(self) -> list[str]:
        """A line for ``status.warnings`` while a miss is not caught up."""
        with self._lock:
            if self._wanted <= self._done or not self._last:
                return []
            kind = max(self._last, key=lambda k: self._last[k])
            at = time.strftime("%H:%M:%S", time.localtime(self._last[kind]))
            count = self._counts[kind]
        times = "once" if count == 1 else f"{count} times so far"
        hint = " (a larger fs.inotify.max_queued_events makes it rarer)" if kind == OVERFLOW else ""
        return [
            f"{_WHAT[kind]} at {at} ({times}): changes made then were not seen, so the memory "
            f"folders are being reconciled with the disk (a full sync){hint}"
        ]


class OverflowLog(logging.Handler):
    """Hears watchdog's "Inotify queue overflowed" warning and tells every listener.

    watchdog (7.1) reports an overflow only in its log; one handler on the ``watchdog`` logger
    serves every watcher of the process (the listeners), whichever thread logs it.
    """

    LOGGER = "watchdog"
    _installed: OverflowLog | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._listeners: list[Callable[[], None]] = []
        self._listeners_lock = threading.Lock()

    @classmethod
    def listen(cls, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from watchdog's thread: it must be quick) on every overflow."""
        with cls._guard:
            if cls._installed is None:
                cls._installed = cls()
                logger = logging.getLogger(cls.LOGGER)
                logger.addHandler(cls._installed)
                if not logger.isEnabledFor(logging.WARNING):
                    logger.setLevel(logging.WARNING)  # the warning is how overflows are heard
            handler = cls._installed
        with handler._listeners_lock:
            handler._listeners.append(listener)

    @classmethod
    def forget(cls, listener: Callable[[], None]) -> None:
        """Stop calling ``listener``."""
        handler = cls._installed
        if handler is None:
            return
        with handler._listeners_lock:
            if listener in handler._listeners:
                handler._listeners.remove(listener)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is not ours
            return
        if "queue overflow" not in message.lower():
            return
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:  # one watcher's failure must not stop the others
                logging.getLogger(__name__).exception("an overflow listener failed")
