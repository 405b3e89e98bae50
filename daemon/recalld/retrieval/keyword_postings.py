"""The keyword channel's postings kept in memory: each queried word's rows and counts, every
row's length, kept up to date from the writer's changes.

Why: on agent memory a query's words are in thousands of chunks each ("time", a person's name),
and FTS5's ``bm25()`` costs ~1 us per matching row (it reads each row's instances and its size
record): 60-80 % of a keyword search on the chat mix. The same numbers, held as arrays, score
those rows with numpy in a fraction of that (``recalld.retrieval.keyword_scoring``).

Freshness: the writer's engine reports the chunk ids each write removed or added
(``changed``); the next search drops those rows from every held word and reads them again
(their tokens from FTS5's own tokenizer, their lengths from FTS5's size records). A rebuild's
swap forgets everything (``reset``). Words are dropped least recently used first once the
arrays pass the byte budget. Only the writer's engine keeps one: it is the one that hears of
every write.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass

import apsw
import numpy as np
import numpy.typing as npt

from recalld.index import fts_postings
from recalld.index.fts_postings import COLUMNS, Postings

__all__ = ["MAX_PENDING", "PRELOAD_SHARE", "PostingsCache", "Snapshot"]

log = logging.getLogger(__name__)

#: Past this many changed rows since the last search, forgetting is cheaper than catching up.
MAX_PENDING = 20_000
#: Words read ahead of use (``preload``) fill at most this share of the budget: the rest is
#: for the words searches ask for, which push read-ahead ones out first.
PRELOAD_SHARE = 0.5


@dataclass(frozen=True)
class Snapshot:
    """What one search scores with: immutable arrays, safe to use outside the cache's lock."""

    postings: dict[str, Postings]
    lengths: npt.NDArray[np.float64]  # tokens per row id (0: no such row)
    rows: int  # FTS5's row count (bm25's N)
    avgdl: float  # FTS5's mean row length


@dataclass(frozen=True)
class _Change:
    """One catch-up: the rows read again, and per token their new counts."""

    seq: int
    gone: npt.NDArray[np.int64]  # every changed row id, sorted
    added: dict[str, tuple[fts_postings.RowIds, fts_postings.CountArray]]
    rows: int


class PostingsCache:
    """Postings of queried words for one index, shared by an engine's searches.

    Changes are caught up once per batch into a log; a held word applies the log entries it
    has not seen when a search next uses it, so a write costs in proportion to the words used.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self._lock = threading.Lock()
        self._terms: collections.OrderedDict[str, tuple[int, Postings]] = collections.OrderedDict()
        self._bytes = 0
        self._lengths: npt.NDArray[np.float64] | None = None
        self._pending: set[int] = set()
        self._overflow = False
        self._log: list[_Change] = []
        self._seq = 0
        self._fetching = 0  # words being read from FTS5 outside the lock
        self._generation = 0  # bumped whenever everything is forgotten
        self._preloaded_generation = -1  # the generation read ahead for (recalld...preload)
        self.stats = collections.Counter[str]()

    # the writer's side ------------------------------------------------------------------------

    def changed(self, ids: list[int]) -> None:
        """Rows removed or (re)written by a committed write: read them again before next use."""
        if not ids:
            return
        with self._lock:
            if self._overflow:
                return
            self._pending.update(ids)
            if len(self._pending) > MAX_PENDING:
                self._overflow = True
                self._pending.clear()

    def reset(self) -> None:
        """The index was replaced (a rebuild's swap, a fresh start): forget everything."""
        with self._lock:
            self._forget()

    def _forget(self) -> None:
        self._generation += 1
        self._terms.clear()
        self._bytes = 0
        self._lengths = None
        self._pending.clear()
        self._overflow = False
        self._log.clear()

    # the searches' side -----------------------------------------------------------------------

    def snapshot(self, conn: apsw.Connection, tokens: list[str]) -> Snapshot:
        """The postings of ``tokens`` (indexed tokens) and the row lengths, as of now.

        Words not held are read from FTS5 outside the lock (other searches go on meanwhile),
        stamped with the log position from before the read: a change logged since is applied
        to them again, which is harmless (its rows are dropped and read back).
        """
        wanted = list(dict.fromkeys(tokens))
        with self._lock:
            self._prepare(conn)
            missing = [t for t in wanted if not self._usable(t)]
            before = self._seq
            self._fetching += 1
        try:
            fetched = {t: fts_postings.term_postings(conn, t) for t in missing}
        finally:
            with self._lock:
                self._fetching -= 1
        with self._lock:
            self._prepare(conn)
            for token, post in fetched.items():
                if not self._usable(token):  # another search may have read it meanwhile
                    self.stats["fetched"] += 1
                    self._store(token, before, post)
            held = {token: self._current(conn, token) for token in wanted}
            assert self._lengths is not None
            self._lengths = _cover(conn, self._lengths, held)
            self._evict(keep=held)
            lengths = self._lengths
        rows, tokens_total = fts_postings.averages(conn)
        avgdl = tokens_total / rows if rows else 1.0
        return Snapshot(held, lengths, rows, avgdl)

    def _prepare(self, conn: apsw.Connection) -> None:
        """Forget after a flood, read the lengths if unknown, log the pending changes."""
        if self._overflow:
            self.stats["forgotten"] += 1
            self._forget()
        if self._lengths is None:
            self._lengths = _load_lengths(conn)
        if self._pending:
            self._catch_up(conn)

    def _usable(self, token: str) -> bool:
        """Held, and the log still has every change since it was read."""
        entry = self._terms.get(token)
        oldest = self._log[0].seq if self._log else self._seq + 1
        return entry is not None and (entry[0] >= self._seq or entry[0] + 1 >= oldest)

    def _store(self, token: str, seq: int, post: Postings) -> None:
        if token in self._terms:
            self._drop(token)
        self._terms[token] = (seq, post)
        self._bytes += post.nbytes

    # reading ahead (recalld.retrieval.keyword_preload) -------------------------------------------

    def begin_preload(self, conn: apsw.Connection) -> tuple[int, npt.NDArray[np.float64]] | None:
        """(generation, row lengths) to read ahead for, or None if that was done for this
        index (a reset or a flood of changes since makes it due again)."""
        with self._lock:
            self._prepare(conn)
            if self._preloaded_generation == self._generation:
                return None
            assert self._lengths is not None
            return self._generation, self._lengths

    def preload(self, conn: apsw.Connection, token: str, generation: int) -> bool:
        """Hold ``token``'s postings before any search asks for them, least recently used (the
        first to go under pressure). False: stop reading ahead (the share of the budget is full,
        or the index was replaced or flooded since ``generation``)."""
        limit = self.budget * PRELOAD_SHARE
        with self._lock:
            self._prepare(conn)
            if generation != self._generation or self._bytes >= limit:
                return False
            if self._usable(token):
                return True
            before = self._seq
            self._fetching += 1
        try:
            post = fts_postings.term_postings(conn, token)
        finally:
            with self._lock:
                self._fetching -= 1
        with self._lock:
            self._prepare(conn)
            if generation != self._generation or self._bytes + post.nbytes > limit:
                return False
            if not self._usable(token):
                self._store(token, before, post)
                self._terms.move_to_end(token, last=False)
                self.stats["preloaded"] += 1
        return True

    @property
    def preload_due(self) -> bool:
        """Reading ahead was not done for this index yet (or it was forgotten since)."""
        with self._lock:
            return self._overflow or self._preloaded_generation != self._generation

    def end_preload(self, generation: int) -> None:
        """Reading ahead for ``generation`` is over (not due again until a reset or flood)."""
        with self._lock:
            self._preloaded_generation = generation

    def warm(self, conn: apsw.Connection) -> None:
        """Read the row lengths now (1M rows: about a second) rather than on the first search."""
        with self._lock:
            if self._lengths is None:
                self._lengths = _load_lengths(conn)

    def held_ids(self, token: str) -> fts_postings.RowIds | None:
        """The rows holding ``token`` if its postings are held and current (None: ask FTS5)."""
        with self._lock:
            entry = self._terms.get(token)
            if entry is None or entry[0] != self._seq or self._pending or self._overflow:
                return None
            return entry[1].ids

    def _current(self, conn: apsw.Connection, token: str) -> Postings:
        """``token``'s postings with every logged change applied (read from FTS5 if not held)."""
        if not self._usable(token):  # a flood of changes since: read again (rare)
            self.stats["fetched"] += 1
            self._store(token, self._seq, fts_postings.term_postings(conn, token))
        seen, post = self._terms[token]
        if seen < self._seq:
            oldest = self._log[0].seq
            size = post.nbytes
            for change in self._log[max(seen + 1 - oldest, 0) :]:
                post = post.without(change.gone)
                if token in change.added:
                    post = post.plus(*change.added[token])
            self._bytes += post.nbytes - size
        else:
            self.stats["held"] += 1
        self._terms[token] = (self._seq, post)
        self._terms.move_to_end(token)
        return post

    def _catch_up(self, conn: apsw.Connection) -> None:
        """Log the pending changes: the changed rows' tokens (as FTS5 indexed them) and lengths."""
        ids = sorted(self._pending)
        self._pending.clear()
        if not self._terms and not self._fetching:
            # No word to bring up to date, none being read: only the lengths change (the
            # first search after a start-up sync skips tokenizing every chunk it wrote).
            self._lengths = _with_rows(conn, self._lengths, ids)
            self.stats["lengths_only"] += len(ids)
            return
        per_token: dict[str, tuple[list[int], list[list[int]]]] = {}
        for rid, cols in fts_postings.row_tokens(conn, ids).items():
            for token in set().union(*cols):
                rows, counts = per_token.setdefault(token, ([], []))
                rows.append(rid)
                counts.append([min(c[token], 65535) for c in cols])
        added = {
            t: fts_postings.compact(
                np.asarray(r, dtype=np.int64),
                np.asarray(c, dtype=np.uint16).reshape(-1, len(COLUMNS)),
            )
            for t, (r, c) in per_token.items()
        }
        self._seq += 1
        self._log.append(_Change(self._seq, np.asarray(ids, dtype=np.int64), added, len(ids)))
        while sum(c.rows for c in self._log) > MAX_PENDING:
            self._log.pop(0)  # words that have not seen these are read afresh (``_current``)
        self._lengths = _with_rows(conn, self._lengths, ids)
        self.stats["caught_up"] += len(ids)

    def _drop(self, token: str) -> None:
        self._bytes -= self._terms.pop(token)[1].nbytes

    def _evict(self, keep: dict[str, Postings]) -> None:
        while self._bytes > self.budget and self._terms:
            token = next(iter(self._terms))
            if token in keep:
                break  # everything older is gone; this search's own words stay
            self._drop(token)
            self.stats["evicted"] += 1

    def as_dict(self) -> dict[str, int]:
        """For ``status``: words held, memory, and how often the postings failed a search."""
        with self._lock:
            words = len(self._terms)
        return {
            "words": words,
            "bytes": self.nbytes,
            "failed": self.stats["failed"],
            "preloaded": self.stats["preloaded"],
        }

    @property
    def nbytes(self) -> int:
        """Bytes held by postings and lengths."""
        with self._lock:
            extra = 0 if self._lengths is None else int(self._lengths.nbytes)
            return self._bytes + extra


def _load_lengths(conn: apsw.Connection) -> npt.NDArray[np.float64]:
    ids, sizes = fts_postings.doc_lengths(conn)
    lengths = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=np.float64)
    lengths[ids] = sizes
    return lengths


def _grown(lengths: npt.NDArray[np.float64], size: int) -> npt.NDArray[np.float64]:
    if size <= len(lengths):
        return lengths.copy()
    out = np.zeros(max(size, len(lengths) + len(lengths) // 8), dtype=np.float64)
    out[: len(lengths)] = lengths
    return out


def _with_rows(
    conn: apsw.Connection, lengths: npt.NDArray[np.float64] | None, ids: list[int]
) -> npt.NDArray[np.float64]:
    """``lengths`` (a copy: searches may hold the old array) with the rows ``ids`` read again."""
    assert lengths is not None
    found, sizes = fts_postings.doc_lengths(conn, ids)
    out = _grown(lengths, max(ids) + 1 if ids else 0)
    out[np.asarray(ids, dtype=np.int64)] = 0.0
    out[found] = sizes
    return out


def _cover(
    conn: apsw.Connection, lengths: npt.NDArray[np.float64], held: dict[str, Postings]
) -> npt.NDArray[np.float64]:
    """``lengths`` covering every id of ``held``: a word read from FTS5 after a write that no
    change reported yet may hold rows past the known ones."""
    top = max((int(p.ids[-1]) for p in held.values() if len(p.ids)), default=-1)
    if top < len(lengths):
        return lengths
    found, sizes = fts_postings.doc_lengths(conn, after=len(lengths) - 1)
    out = _grown(lengths, max(top, int(found.max()) if len(found) else 0) + 1)
    out[found] = sizes
    return out
