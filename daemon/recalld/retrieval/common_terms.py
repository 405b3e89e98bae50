"""Query terms too common to rank by, and the read connections' page cache.

On agent memory (chat turns) a few words sit in a large share of all chunks: a person's name in
every turn, "said", "today". FTS5 reads and scores the whole doclist of every query term, so
such a term costs the most of a keyword search (half of it ``pread`` of doclist pages) while
BM25 gives it almost no weight: its IDF is near zero (FTS5 floors a negative IDF, a term in more
than half of the chunks, at 1e-6). An OR query drops a single-word term whose document
frequency is over ``search.max_term_df`` of the chunks, unless nothing else is left (the counts:
``recalld.retrieval.term_stats``).

Read connections map the index file (``index.reader_mmap_mb``, the whole file by default): the
pages are shared between connections and file-backed (reclaimable, not anonymous memory), and a
search that reads them costs no ``pread`` system call (-44 % keyword p50 on the chat mix).
"""

from __future__ import annotations

from collections.abc import Callable

from recalld.config import Config
from recalld.index.store import Store
from recalld.retrieval.term_stats import TermCounts

__all__ = ["common_checker", "tune_reader"]

#: Under this many chunks every term is cheap, and each one may matter: nothing is dropped.
MIN_CHUNKS = 1000


def tune_reader(store: Store, config: Config) -> None:
    """Memory-map the index for a read-only connection (0 MB: plain reads)."""
    mmap_mb = config.int("index.reader_mmap_mb")
    store.conn.execute(f"PRAGMA mmap_size = {max(mmap_mb, 0) * 1024 * 1024}")


def common_checker(counts: TermCounts, max_df: float) -> Callable[[tuple[str, ...]], bool] | None:
    """A test "too common to rank by" for the terms of one search (None: off)."""
    if max_df <= 0 or max_df >= 1:
        return None
    total = counts.total()
    if total < MIN_CHUNKS:
        return None

    def common(parts: tuple[str, ...]) -> bool:
        if len(parts) != 1 or not parts[0].isascii():
            return False  # phrases (identifiers) and CJK words are rare by construction
        return counts.df('"' + parts[0].replace('"', '""') + '"') > max_df * total

    return common
