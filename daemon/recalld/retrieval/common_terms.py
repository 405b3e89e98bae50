"""Query terms too common to rank by, and the read connections' page cache.

On agent memory (chat turns) a few words sit in a large share of all chunks: a person's name in
every turn, "said", "today". FTS5 reads and scores the whole doclist of every query term, so
such a term costs the most of a keyword search (half of it ``pread`` of doclist pages) while
BM25 gives it almost no weight: its IDF is near zero (FTS5 floors a negative IDF, a term in more
than half of the chunks, at 1e-6). An OR query drops a single-word term whose document
frequency is over ``search.max_term_df`` of the chunks, unless nothing else is left. Document
frequencies are counted once per term (a ``count(*)`` of its matches) and kept until the index
grew or shrank by a fifth.

Read connections map the index file (``index.reader_mmap_mb``, the whole file by default): the
pages are shared between connections and file-backed (reclaimable, not anonymous memory), and a
search that reads them costs no ``pread`` system call (-44 % keyword p50 on the chat mix).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from recalld.config import Config
from recalld.index.store import Store

__all__ = ["CommonTerms", "tune_reader"]

#: Terms whose document frequency is remembered (cleared when full: a cache, not a vocabulary).
MAX_REMEMBERED = 50_000
#: The chunk count is read again after this many seconds.
COUNT_TTL_S = 5.0
#: A remembered frequency is counted again once the index size moved by this fraction.
STALE_FRACTION = 0.2


def tune_reader(store: Store, config: Config) -> None:
    """Memory-map the index for a read-only connection (0 MB: plain reads)."""
    mmap_mb = config.int("index.reader_mmap_mb")
    store.conn.execute(f"PRAGMA mmap_size = {max(mmap_mb, 0) * 1024 * 1024}")


class CommonTerms:
    """Document frequencies of query terms, shared by the searches of one engine."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._df: dict[str, tuple[int, int]] = {}  # term -> (chunks holding it, chunks then)
        self._count: tuple[float, int] | None = None  # (when, chunks)

    def checker(self, store: Store, max_df: float) -> Callable[[tuple[str, ...]], bool] | None:
        """A test "too common to rank by" for the terms of one search (None: off)."""
        if max_df <= 0 or max_df >= 1:
            return None
        total = self._chunks(store)
        if total < 1000:  # a small index: every term is cheap, and each one may matter
            return None

        def common(parts: tuple[str, ...]) -> bool:
            if len(parts) != 1 or not parts[0].isascii():
                return False  # phrases (identifiers) and CJK words are rare by construction
            return self.frequency(store, parts[0], total) > max_df * total

        return common

    def frequency(self, store: Store, term: str, total: int) -> int:
        """Chunks that hold ``term`` (counted once, again when the index size moved)."""
        with self._lock:
            known = self._df.get(term)
        if known is not None and abs(known[1] - total) <= STALE_FRACTION * known[1]:
            return known[0]
        quoted = '"' + term.replace('"', '""') + '"'
        row = store.conn.execute(
            "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (quoted,)
        ).fetchone()
        df = int(row[0]) if row else 0
        with self._lock:
            if len(self._df) >= MAX_REMEMBERED:
                self._df.clear()
            self._df[term] = (df, total)
        return df

    def _chunks(self, store: Store) -> int:
        now = time.monotonic()
        with self._lock:
            cached = self._count
        if cached is not None and now - cached[0] < COUNT_TTL_S:
            return cached[1]
        row = store.conn.execute("SELECT count(*) FROM chunks").fetchone()
        total = int(row[0]) if row else 0
        with self._lock:
            self._count = (now, total)
        return total
