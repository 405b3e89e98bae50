"""Read-only connections to one index file, and the lock that lets a rebuild swap the file.

Searches and gets take a pooled connection under the swap lock's shared side; a rebuild's swap
(or a damaged index started over) takes the exclusive side, closes every pooled connection, puts
the new file in place, and the next reader opens it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from recalld.errors import RecalldError
from recalld.index.rwlock import ReadWriteLock
from recalld.index.store import Store

SwapLock = ReadWriteLock  # many searches at once, or one index swap


class ReaderPool:
    """Pooled read-only connections of one index file, and its swap lock."""

    def __init__(self, index_path: Path, tune: Callable[[Store], None]) -> None:
        self.index_path = index_path
        self.tune = tune  # what a pooled connection is set up with (its memory map)
        self.swap = SwapLock()
        # Idle pooled readers, the most recently used last: taken last-in first-out, so one
        # connection does the work of a lone client, its page cache and its map of the index
        # warm. First-in first-out had every search on the next connection: each one filled its
        # own page cache and mapped the same pages again (RSS counts a page once per mapping).
        self._idle: list[Store] = []
        self._all: list[Store] = []
        self._lock = threading.Lock()

    @contextmanager
    def reader(self) -> Iterator[Store]:
        """A pooled read-only connection (held under the swap lock's shared side)."""
        with self.swap.shared():
            with self._lock:
                store = self._idle.pop() if self._idle else None
            if store is None:
                store = Store(self.index_path, readonly=True)
                self.tune(store)
                with self._lock:
                    self._all.append(store)
            try:
                yield store
            finally:
                with self._lock:
                    self._idle.append(store)

    @contextmanager
    def scan_reader(self) -> Iterator[Store]:
        """A read-only connection of its own for one bulk read (closed after, not pooled),
        under the swap lock's shared side."""
        with self.swap.shared(), self.own_connection() as store:
            yield store

    @contextmanager
    def own_connection(self) -> Iterator[Store]:
        """A read-only connection for one bulk read, closed after; the caller holds the swap
        lock (a reader, or :meth:`scan_reader`).

        Start-up's loads, counting rows and the keyword read-ahead read much of the file once.
        Through a pooled reader's map of the index those pages would stay in the daemon's RSS
        for its lifetime (and the kernel maps the cached pages around each one touched): 68 MB
        of a 72 MB index, per such reader. Plain reads leave them to the page cache, shared and
        reclaimable.
        """
        store = Store(self.index_path, readonly=True)
        try:
            yield store
        finally:
            store.close()

    def stored_space(self, writer: Store | None) -> tuple[str, int] | None:
        """(provider key, dims) of the vector space the index was built with, or None (none
        recorded, or the index cannot be read); read through ``writer`` when there is one."""
        try:
            if writer is not None:
                identity = writer.identity()
            else:
                with self.reader() as store:
                    identity = store.identity()
        except RecalldError:
            return None
        return None if identity is None else (identity.provider_key, identity.dims)

    def close(self) -> None:
        """Close every pooled connection (the next reader opens the file again)."""
        with self._lock:
            for store in self._all:
                store.close()
            self._all.clear()
            self._idle.clear()


def load_side_by_side(
    swap: SwapLock,
    loaders: Sequence[tuple[Callable[[], object], str]],
    foreground: Callable[[], object] | None,
) -> None:
    """Run each loader on a thread of its own under the swap lock's shared side while
    ``foreground`` runs here (a model load is CPU, a matrix load mostly I/O and copies: side by
    side they take the time of the longest); the first failure is raised here."""
    failed: list[BaseException] = []

    def load(what: Callable[[], object]) -> None:
        try:
            with swap.shared():
                what()
        except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
            failed.append(exc)

    threads = [
        threading.Thread(target=load, args=(what,), name=name, daemon=True)
        for what, name in loaders
    ]
    for thread in threads:
        thread.start()
    try:
        if foreground is not None:
            foreground()
    finally:
        for thread in threads:
            thread.join()
    if failed:
        raise failed[0]
