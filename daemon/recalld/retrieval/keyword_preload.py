"""Reading the postings of the index's most common words before any search asks for them.

Why: a word's first use reads its postings from FTS5 at ~0.35 us per instance, so a word in
tens of thousands of chunks ("what", "said", a person's name) costs its first search tens of
milliseconds, and on agent memory nearly every query has such words (Zipf: a few hundred words
are most of the text). Words in fewer than :data:`MIN_ROWS` chunks read in about a millisecond
and are left for their first use. Which words are common is estimated from a random sample of
rows (their tokens from FTS5's tokenizer), a cost that does not grow with the index.

The daemon runs this in the background once its writer is idle, after the start-up sync and
again after anything that makes the cache forget (a rebuild's swap, a flood of changes).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import apsw
import numpy as np
import numpy.typing as npt

from recalld.index import fts_postings
from recalld.index.store import Store
from recalld.retrieval.keyword_postings import PostingsCache

__all__ = ["MIN_ROWS", "SAMPLE_ROWS", "Preloader", "frequent_words", "preload"]

log = logging.getLogger(__name__)

#: A word in fewer chunks than this reads from FTS5 in about a millisecond: not worth holding
#: before it is used.
MIN_ROWS = 2_000
#: Rows tokenized to estimate document frequencies (~0.1 s per 1,000 rows).
SAMPLE_ROWS = 3_000


def frequent_words(
    conn: apsw.Connection, lengths: npt.NDArray[np.float64], sample: int = SAMPLE_ROWS
) -> list[str]:
    """The indexed tokens estimated to be in at least :data:`MIN_ROWS` rows, most common
    first, from the tokens of ``sample`` random rows (``lengths``: tokens per row id)."""
    ids = np.flatnonzero(lengths)
    if len(ids) < MIN_ROWS:
        return []
    take = min(sample, len(ids))
    rows = np.sort(np.random.default_rng(0).choice(ids, take, replace=False))
    docs = collections.Counter[str]()
    for columns in fts_postings.row_tokens(conn, rows.tolist()).values():
        docs.update(set().union(*columns))
    scale = len(ids) / take
    return [token for token, k in docs.most_common() if k * scale >= MIN_ROWS]


def preload(
    cache: PostingsCache,
    reader: Callable[[], AbstractContextManager[Store]],
    stop: threading.Event | None = None,
) -> int:
    """Read the common words' postings into ``cache`` (up to its read-ahead share), each under
    a reader of its own so that a rebuild's swap is never held up; the words read."""
    started = time.perf_counter()
    with reader() as store:
        begun = cache.begin_preload(store.conn)
        if begun is None:
            return 0
        generation, lengths = begun
        words = frequent_words(store.conn, lengths)
    done = 0
    for token in words:
        if stop is not None and stop.is_set():
            return done  # not marked done: due again
        with reader() as store:
            if not cache.preload(store.conn, token, generation):
                break
        done += 1
    cache.end_preload(generation)
    log.info(
        "read ahead the postings of %d common words (of %d found) in %.2f s: %.1f MB held",
        done,
        len(words),
        time.perf_counter() - started,
        cache.nbytes / 1e6,
    )
    return done


class Preloader:
    """Runs :func:`preload` on a background thread when asked, one run at a time."""

    def __init__(
        self, cache: PostingsCache, reader: Callable[[], AbstractContextManager[Store]]
    ) -> None:
        self.cache = cache
        self.reader = reader
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.failed = 0

    def start(self) -> None:
        """Read ahead in the background if it is due for this index and not running."""
        with self._lock:
            if self._stop.is_set() or self.running or not self.cache.preload_due:
                return
            self._thread = threading.Thread(target=self._run, name="recalld-preload", daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            preload(self.cache, self.reader, self._stop)
        except Exception:  # a search reads the word itself; say it in the log and status
            self.failed += 1
            if not self._stop.is_set():
                log.warning("reading common words' postings ahead failed", exc_info=True)

    def stop(self, timeout: float = 5.0) -> None:
        """No more runs; wait (a while) for the current one to finish its word."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def as_dict(self) -> dict[str, int | bool]:
        """For ``status``: running now, failed runs."""
        return {"preloading": self.running, "preload_failed": self.failed}
