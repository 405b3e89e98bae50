"""A search's query vector, made once and shared by the channels that need it.

With the shared store on, one search has two vector channels: the local one (on the engine's
executor) and the shared one (on the shared channel's thread), and each embedded the query for
itself: two model calls for one vector, on a machine where the model is most of a search's cost.
:class:`QueryVector` lets the first caller embed it and the others wait for that vector. A vector
is kept only a moment after it is made (``KEEP_S``): enough for the other channel of the same
search to find it, not a cache that repeated searches would be measured against.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from recalld.embedding.base import Embedder, Vectors

#: Seconds a made vector stays for the other channel of the same search.
KEEP_S = 2.0
#: Vectors kept at most (searches at once, a few each).
MAX_KEPT = 64


@dataclass
class _Entry:
    ready: threading.Event = field(default_factory=threading.Event)
    vector: Vectors | None = None
    error: BaseException | None = None
    made_at: float = 0.0


class QueryVector:
    """Query vectors being made or just made, by vector space and text."""

    def __init__(self, keep_s: float = KEEP_S) -> None:
        self.keep_s = keep_s
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}
        self.made = 0  # model calls (a test counts them)

    def get(self, embedder: Embedder, text: str) -> Vectors:
        """The query vector of ``text`` (one row of ``embedder.embed([text], query=True)``)."""
        key = (embedder.key, text)
        now = time.monotonic()
        with self._lock:
            self._forget_old(now)
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
            with self._lock:  # a failure is not kept: the next search tries again
                self._entries.pop(key, None)
            raise
        finally:
            entry.made_at = time.monotonic()
            entry.ready.set()
        return entry.vector

    def _forget_old(self, now: float) -> None:
        """Drop vectors older than ``keep_s`` (and the oldest past MAX_KEPT); under the lock."""
        old = [
            k
            for k, e in self._entries.items()
            if e.ready.is_set() and now - e.made_at > self.keep_s
        ]
        for k in old:
            del self._entries[k]
        while len(self._entries) > MAX_KEPT:
            done = [k for k, e in self._entries.items() if e.ready.is_set()]
            if not done:
                break
            del self._entries[done[0]]


#: The daemon's one registry: the local and shared channels of a search meet here.
QUERY_VECTORS = QueryVector()


def query_vector(embedder: Embedder, text: str) -> Vectors:
    """``text``'s query vector, embedded once for all channels of a search."""
    return QUERY_VECTORS.get(embedder, text)
