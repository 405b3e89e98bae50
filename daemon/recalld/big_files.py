"""Big notes are chunked off the writer thread, so one huge file never holds up small edits.

The writer (:class:`~recalld.indexer.Indexer`) hands a note over :data:`BIG_FILE_BYTES` to
:meth:`BackgroundChunker.request` instead of chunking it, and moves on to the next job. A thread
of its own chunks it and then asks for that path to be synced again (``on_ready``); that sync
finds the chunks with :meth:`BackgroundChunker.take` (when the file's content hash still
matches: an edit made meanwhile simply asks again) and only writes them. Its vectors are
back-filled later in steps of about a second (``Indexer.backfill_slice`` chunks per call),
between other jobs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["BACKFILL_BUDGET_S", "BACKFILL_SLICE", "BIG_FILE_BYTES", "BackgroundChunker"]

log = logging.getLogger(__name__)

#: Notes larger than this are chunked in the background (a 256 KiB note chunks in ~0.3 s).
BIG_FILE_BYTES = 256 * 1024
#: Chunks per embedding call of a back-fill step (a small edit waits for at most one call).
BACKFILL_SLICE = 8
#: A back-fill step stops after its first call that ends past this many seconds.
BACKFILL_BUDGET_S = 1.0

T = TypeVar("T")


class BackgroundChunker(Generic[T]):
    """One thread that runs chunking jobs, newest request per path wins."""

    def __init__(self, on_ready: Callable[[Path], None]) -> None:
        self.on_ready = on_ready
        self._wanted: dict[str, tuple[str, Callable[[], T]]] = {}  # path -> (digest, job)
        self._ready: dict[str, tuple[str, T]] = {}  # path -> (digest, result)
        self._busy: str | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="recalld-chunker", daemon=True)
        self._thread.start()

    def take(self, key: str, digest: str) -> T | None:
        """The result for ``key`` if it was computed for content ``digest`` (then forgotten)."""
        with self._cond:
            got = self._ready.get(key)
            if got is None or got[0] != digest:
                return None
            del self._ready[key]
            return got[1]

    def request(self, key: str, digest: str, job: Callable[[], T]) -> None:
        """Run ``job`` for ``key`` in the background (replaces a queued older request)."""
        with self._cond:
            self._ready.pop(key, None)
            self._wanted[key] = (digest, job)
            self._cond.notify()

    def pending(self) -> int:
        """Files queued or being chunked (the daemon is not idle while any are)."""
        with self._cond:
            return len(self._wanted) + (self._busy is not None)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._wanted.clear()
            self._cond.notify()
        self._thread.join(timeout=1)  # a daemon thread: a long chunking job does not block exit

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                key = next(iter(self._wanted))
                digest, job = self._wanted.pop(key)
                self._busy = key
            try:
                result = job()
            except Exception:  # one bad file must not stop the thread
                log.exception("chunking %s failed", key)
                with self._cond:
                    self._busy = None
                continue
            with self._cond:
                if key not in self._wanted:  # not superseded by a newer request meanwhile
                    self._ready[key] = (digest, result)
            try:
                self.on_ready(Path(key))  # before going idle: pending() never dips to 0 early
            finally:
                with self._cond:
                    self._busy = None
