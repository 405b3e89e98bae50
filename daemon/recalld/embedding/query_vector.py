"""A search's query vector, made once and shared by the channels that need it.

With the shared store on, one search has two vector channels: the local one (on the engine's
executor) and the shared one (on the shared channel's thread), and each embedded the query for
itself: two model calls for one vector, on a machine where the model is most of a search's cost.
:class:`QueryVector` lets the first caller embed it and the others wait for that vector. A made
vector is kept only while a search that asked for it to be shared is running (:meth:`sharing`):
the other channel of that search finds it however late it asks, and no later search does (this
is not a cache that repeated searches would be measured against).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from recalld.embedding.base import Embedder, Vectors


@dataclass
class _Entry:
    ready: threading.Event = field(default_factory=threading.Event)
    vector: Vectors | None = None
    error: BaseException | None = None


class QueryVector:
    """Query vectors being made, or made for a search still running, by vector space and text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._shared: Counter[str] = Counter()  # text -> searches sharing its vector
        self.made = 0  # model calls (a test counts them)

    @contextmanager
    def sharing(self, text: str) -> Iterator[None]:
        """While this runs, a vector made for ``text`` is kept for every channel that asks."""
        with self._lock:
            self._shared[text] += 1
        try:
            yield
        finally:
            with self._lock:
                self._shared[text] -= 1
                if self._shared[text] <= 0:
                    del self._shared[text]
                    for key in [k for k, e in self._entries.items() if k[1] == text]:
                        if self._entries[key].ready.is_set():
                            del self._entries[key]

    def get(self, embedder: Embedder, text: str) -> Vectors:
        """The query vector of ``text`` (one row of ``embedder.embed([text], query=True)``)."""
        key = (embedder.key, text)
        with self._lock:
            entry = self._entries.get(key)
            mine = entry is None
            if entry is None:
                entry = self._entries[key] = _Entry()
        if not mine:
            entry.ready.wait()
            if entry.error is not None:
                raise entry.error
            assert entry.vector is not None
            return entry.vector
        try:
            entry.vector = embedder.embed([text], query=True)[0]
            self.made += 1
        except BaseException as exc:
            entry.error = exc
            raise
        finally:
            with self._lock:  # kept only for a search sharing it, and never a failure
                if entry.error is not None or text not in self._shared:
                    self._entries.pop(key, None)
            entry.ready.set()
        return entry.vector


#: The daemon's one registry: the local and shared channels of a search meet here.
QUERY_VECTORS = QueryVector()


def query_vector(embedder: Embedder, text: str) -> Vectors:
    """``text``'s query vector, embedded once for all channels of a search."""
    return QUERY_VECTORS.get(embedder, text)
