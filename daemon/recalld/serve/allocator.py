"""The C allocator of a long-running daemon: fixed thresholds, freed memory given back when idle.

glibc's defaults move: its mmap threshold rises each time a large block is freed, after which
large blocks come from the heap and per-thread arenas, which keep the memory after ``free``. A
daemon that once decoded a 1 MiB request in each worker thread, or loaded a model, would keep
tens of MB it no longer uses.

An earlier fix served every block of 128 KiB or more with its own mmap. That returned the
memory, but every search then mapped, faulted in and unmapped its temporaries (the scan's
scores, the rows it rescores: 0.5-12 MB), and each unmap flushed the other core's TLB: 24 ms of
CPU a search at 100k chunks against 17.5 ms without it (docs/DECISIONS.md, session 15). So the
thresholds are now high and fixed (blocks up to 32 MiB are reused, the heap's top is not
trimmed below 64 MiB), there are as many arenas as cores (glibc makes eight a core: more
arenas than threads that run at once only hold more freed memory, in more pieces: after a
barrage of 10,000 malformed requests, 15 MB against 33-61 MB with glibc's count, and no
slower), and :class:`IdleTrim` hands the free memory of every arena back with
``malloc_trim`` once the daemon has been quiet for ``QUIET_S``: a busy daemon reuses its
memory, an idle one holds only what it uses.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable

from recalld.cpus import usable_cores

__all__ = ["QUIET_S", "IdleTrim", "note_activity", "trim", "tune_allocator"]

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest fixed mmap threshold on 64-bit
TRIM_THRESHOLD = 64 * 1024 * 1024
QUIET_S = 0.3  # trimmed this long after the last request or write
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

_trimmer: IdleTrim | None = None


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt  # noqa: B018 - glibc only (musl has neither)
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocator(
    mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD
) -> bool:
    """Fix glibc's thresholds and start the idle trim (Linux with glibc only; else False).

    Called once, before the model loads.
    """
    global _trimmer
    libc = _libc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold))
    ok = bool(libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold)) and ok
    ok = bool(libc.mallopt(_M_ARENA_MAX, max(2, usable_cores()))) and ok
    if ok and _trimmer is None:
        _trimmer = IdleTrim(trim)
        _trimmer.start()
    return ok


def trim() -> bool:
    """Give the free memory of every arena back to the system; whether any was."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def note_activity() -> None:
    """A request was answered or a write done: trim once the daemon is quiet again."""
    trimmer = _trimmer
    if trimmer is not None:
        trimmer.touch()


class IdleTrim:
    """Calls ``trim`` once after each burst of activity, ``quiet_s`` after its last ``touch``.

    Sleeps while nothing happens (no timer wakes an idle daemon); ``touch`` costs an event set.
    """

    def __init__(self, trim: Callable[[], object], quiet_s: float = QUIET_S) -> None:
        self._trim = trim
        self.quiet_s = quiet_s
        self._active = threading.Event()
        self._stop = threading.Event()
        self.trims = 0
        self._thread = threading.Thread(target=self._run, name="recalld-trim", daemon=True)

    def start(self) -> None:
        """Start the thread that waits for quiet."""
        self._thread.start()

    def stop(self) -> None:
        """Let the thread end (tests; the daemon's ends with the process)."""
        self._stop.set()
        self._active.set()
        self._thread.join(5)

    def touch(self) -> None:
        """Something ran: the next trim is ``quiet_s`` after the last touch."""
        self._active.set()

    def _run(self) -> None:
        while True:
            self._active.wait()
            # Wait until a whole quiet period passes without a touch.
            while self._active.is_set() and not self._stop.is_set():
                self._active.clear()
                self._stop.wait(self.quiet_s)
            if self._stop.is_set():
                return
            self._trim()
            self.trims += 1
