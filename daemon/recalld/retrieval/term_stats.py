"""Document frequencies of query terms and the chunk count, counted once until the next write.

Three steps of a search need how many chunks hold a term: the common-term cut of the keyword
channel (``common_terms``), the idf of the rare terms (``coordination``) and the feedback words
(``prf``). Each is a ``count(*)`` of FTS5 matches that walks the term's whole doclist, and the
chunk count is a walk of a table: at 1M chunks a search spent more time counting than ranking.
The same words come back query after query (names, "said", a project's vocabulary), so an
engine keeps the counts in one ``TermStats`` until its writer changes the index. A count begun
before a write and finished after it is returned but not kept (the generation moved), so a kept
count is never older than the last write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import apsw

__all__ = ["MAX_REMEMBERED", "TermCounts", "TermStats"]

#: A term's document frequency when known without FTS5 (None: count it).
Held = Callable[[str], "int | None"]
#: Expressions whose frequency is remembered (cleared when full: a cache, not a vocabulary).
MAX_REMEMBERED = 50_000


class TermStats:
    """The counts of one index, shared by the searches of an engine; ``invalidate`` on writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._df: dict[str, int] = {}
        self._total: int | None = None
        self._generation = 0

    def invalidate(self) -> None:
        """The index changed: forget every count."""
        with self._lock:
            self._df.clear()
            self._total = None
            self._generation += 1

    def on(self, conn: apsw.Connection, held: Held | None = None) -> TermCounts:
        """The counts read on ``conn`` (one search's connection) through this cache; ``held``
        knows some terms' counts without FTS5 (the keyword channel's held postings)."""
        return TermCounts(conn, self, held)

    def _get(self, key: str | None) -> tuple[int | None, int]:
        with self._lock:
            value = self._total if key is None else self._df.get(key)
            return value, self._generation

    def _keep(self, key: str | None, value: int, generation: int) -> None:
        with self._lock:
            if generation != self._generation:
                return  # a write came in while counting: the count may predate it
            if key is None:
                self._total = value
                return
            if len(self._df) >= MAX_REMEMBERED:
                self._df.clear()
            self._df[key] = value


class TermCounts:
    """Counts on one connection; cached in ``shared`` when given, else counted every time."""

    def __init__(
        self, conn: apsw.Connection, shared: TermStats | None = None, held: Held | None = None
    ) -> None:
        self.conn = conn
        self._shared = shared
        self._held = held

    def total(self) -> int:
        """Chunks in the index."""
        return self._counted(None, "SELECT count(*) FROM chunks", ())

    def df(self, expr: str) -> int:
        """Chunks matching the FTS5 expression ``expr`` (a quoted term or phrase)."""
        if self._held is not None:
            known = self._held(expr)
            if known is not None:
                return known
        sql = "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?"
        return self._counted(expr, sql, (expr,))

    def _counted(self, key: str | None, sql: str, args: tuple[str, ...]) -> int:
        generation = 0
        if self._shared is not None:
            known, generation = self._shared._get(key)
            if known is not None:
                return known
        row = self.conn.execute(sql, args).fetchone()
        value = int(row[0]) if row else 0
        if self._shared is not None:
            self._shared._keep(key, value, generation)
        return value
