"""The index's row counts for ``status``, cached until the next write.

Counting FTS5 and vec0 rows reads most of the file, so a count is kept until a write makes it
stale; a count begun before a write is returned but not kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from recalld.index.store import Store


class RowCounts:
    """Row counts of one index, cached between writes."""

    def __init__(self, connection: Callable[[], AbstractContextManager[Store]]) -> None:
        self._connection = connection  # a bulk-read connection, not a pooled reader's map
        self._counts: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._generation = 0  # bumped by every write

    def get(self) -> dict[str, int]:
        """The counts (the caller holds the swap lock, which keeps the file being counted)."""
        with self._lock:
            if self._counts is not None:
                return dict(self._counts)
            generation = self._generation
        with self._connection() as counter:
            counts = counter.counts()  # outside the lock; a write meanwhile makes it stale:
        with self._lock:
            if generation == self._generation:  # ... then it is returned, not kept
                self._counts = counts
        return dict(counts)

    def invalidate(self) -> None:
        """A write happened."""
        with self._lock:
            self._counts = None
            self._generation += 1
