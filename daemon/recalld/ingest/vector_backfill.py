"""Keyword first, vectors behind: every changed file is searchable by keyword as soon as it is
chunked and written; its vectors are filled in afterwards, in bounded steps between jobs.

In the daemon (``Indexer.ahead`` set) a sync writes each file's chunks with the vectors the
embedding cache already has and no others, so FTS5 sees a fresh folder at its own speed
(thousands of chunks per second) instead of the embedder's. Every sync then runs one back-fill
step (:func:`fill`): it offers the chunks due a vector, newest first (an edit's chunks go to the
front), to :class:`~recalld.ingest.embed_ahead.EmbedAhead`, whose thread embeds them back to
back, and writes whatever that thread finished within about :data:`BACKFILL_BUDGET_S`; the
daemon queues the next step behind whatever edits arrived meanwhile. A step that follows no
write neither scans for the due chunks again (:attr:`VectorBacklog.due_ids`) nor recounts them
(:meth:`VectorBacklog.filled`). Nothing is lost by a crash: a chunk with ``embed`` = 1 and no
vector row is found again by the next step. In-process syncs and rebuilds embed inline, a window
of :data:`BACKFILL_WINDOW` chunks a call, until none is left.

A note over :data:`BIG_FILE_BYTES` is not even chunked on the writer: :class:`BackgroundChunker`
chunks it on a thread of its own and then asks for that path to be synced again (``on_ready``);
that sync finds the chunks with :meth:`BackgroundChunker.take` (when the file's content hash
still matches: an edit made meanwhile simply asks again) and only writes them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from recalld.index.table_counts import provisional_files
from recalld.ingest.embed_ahead import AHEAD_CALL, EmbedAhead

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from recalld.embedding.base import Embedder
    from recalld.index.store import Store
    from recalld.ingest.sync_report import Progress, SyncReport

__all__ = [
    "BACKFILL_BUDGET_S",
    "BACKFILL_WINDOW",
    "BIG_FILE_BYTES",
    "BackgroundChunker",
    "Filler",
    "VectorBacklog",
    "fill",
    "vector_counts",
    "vector_counts_by_rows",
    "vectors_missing",
]

log = logging.getLogger(__name__)

#: Notes larger than this are chunked in the background (a 256 KiB note chunks in ~0.3 s).
BIG_FILE_BYTES = 256 * 1024
#: While a sync writes files, the chunks waiting for vectors are counted at most this often.
COUNT_EVERY_S = 1.0
#: Chunks due a vector embedded per call when a sync embeds inline (no daemon, a rebuild).
BACKFILL_WINDOW = 256
#: A daemon's back-fill step waits this long for the vectors embedded ahead, then writes them:
#: an edit that arrives meanwhile waits about this long for the writer.
BACKFILL_BUDGET_S = 1.0
#: Due chunks a daemon's step offers to be embedded ahead (newest first): a few calls' worth,
#: so that the embedding thread never runs dry between two steps.
AHEAD_OFFER = 2 * AHEAD_CALL
#: At most this many chunks newer than any offered (an edit's) are embedded by the step itself
#: while the thread is busy with an older backlog: their vectors come with their keyword rows.
FRESH_INLINE = 32
#: Ids without a vector kept between back-fill steps (newest first; the next write forgets them).
DUE_HEAD = 4096

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

    @property
    def closed(self) -> bool:
        """The daemon is stopping: a sync then ends early (the next start syncs again)."""
        return self._stop

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


def _without_vector(store: Store) -> list[int]:
    """Ids of the chunks that have no vector row (due one, or keyword-only by policy), newest
    first.

    Read from an index (every index holds the rowid) and sqlite-vec's rowid table: neither
    reads the chunks' pages, so this stays cheap when nothing is due (every sync asks). An
    ``id NOT IN (SELECT rowid FROM chunks_vec)`` scan read the whole chunks table: 110 ms at
    20k chunks on a loaded machine, against a few ms.
    """
    shadow = store.conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec_rowids'"
    ).fetchone()
    missing = (
        "NOT EXISTS (SELECT 1 FROM chunks_vec_rowids r WHERE r.rowid = c.id)"
        if shadow
        else "c.id NOT IN (SELECT rowid FROM chunks_vec)"
    )
    ids = [
        int(r[0])
        for r in store.conn.execute(
            f"SELECT c.id FROM chunks c INDEXED BY chunks_by_hash WHERE {missing}"
        )
    ]
    ids.sort(reverse=True)
    return ids


def _keyword_only(store: Store) -> set[int]:
    """Ids of the chunks that get no vector by policy (``embed`` = 0: a transcript's tool
    output, say), read from their partial index."""
    return {int(r[0]) for r in store.conn.execute("SELECT id FROM chunks WHERE embed = 0")}


def _due_ids(store: Store) -> list[int]:
    """Ids of the chunks due a vector and without one, newest first.

    Keyword-only chunks are left out here, not when the rows are read: a head of the newest
    :data:`DUE_HEAD` ids taken before that filter could hold only keyword-only chunks (a
    transcript's tool output outnumbers its messages), and the older chunks due a vector were
    then never reached.
    """
    skip = _keyword_only(store)
    return [i for i in _without_vector(store) if i not in skip]


def _due(
    store: Store, limit: int, backlog: VectorBacklog | None = None
) -> list[tuple[int, str, str]]:
    """(id, hash, text) of chunks due a vector and without one, newest first.

    Newest first: the chunks of the edit that a sync just wrote get their vectors in that same
    sync, while an older backlog waits. ``embed`` = 0 chunks get no vector by policy, ever.
    With ``backlog``, the newest :data:`DUE_HEAD` ids without a vector are kept there until
    the next write: the daemon's back-fill steps then skip the scan of every chunk.
    """
    if not store.has_vec_table():
        return []
    ids = backlog.due_ids if backlog is not None else None
    if not ids or (backlog is not None and not backlog.head_whole and len(ids) < limit):
        # Scan again: nothing kept, or the kept head ran short while more are due behind it.
        every = _due_ids(store)
        ids = every[:DUE_HEAD]
        if backlog is not None:
            backlog.head_whole = len(every) <= DUE_HEAD
    out: list[tuple[int, str, str]] = []
    seen = 0
    for at in range(0, len(ids), 500):
        part = ids[at : at + 500]
        marks = ",".join("?" * len(part))
        rows: list[Any] = store.conn.execute(
            f"SELECT id, hash, text FROM chunks WHERE embed = 1 AND id IN ({marks})", part
        ).fetchall()
        out.extend(sorted(((int(r[0]), str(r[1]), str(r[2])) for r in rows), reverse=True))
        seen = at + len(part)
        if len(out) >= limit:
            break
    if backlog is not None:  # ids read and not due (keyword-only, gone) are not read again
        due = {r[0] for r in out}
        backlog.due_ids = [i for i in ids[:seen] if i in due] + ids[seen:]
    return out[:limit]


def vector_counts(store: Store) -> tuple[int, int]:
    """(pending, total): chunks due a vector but still without one, and all chunks due one."""
    if not store.has_vec_table():
        return 0, 0
    ids = _without_vector(store)
    skip = _keyword_only(store)
    keyword_only = sum(1 for i in ids if i in skip)
    row = store.conn.execute("SELECT count(*) FROM chunks").fetchone()
    chunks = int(row[0]) if row else 0
    held = provisional_files(store.conn)  # one vector at least each (vectors_missing)
    pending = len(ids) - keyword_only + held
    return pending, chunks - keyword_only + held


def vector_counts_by_rows(store: Store) -> tuple[int, int]:
    """:func:`vector_counts` from the index's row counts, as status reads them
    (:func:`vectors_missing`): no id is read into Python. During a first sync the writer counts
    every second; reading 25k ids took 10-50 ms of its thread a count."""
    missing = vectors_missing(store.counts(), vector_table=store.has_vec_table())
    return missing["vectors_pending"], missing["vectors_total"]


def vectors_missing(counts: Mapping[str, int], *, vector_table: bool) -> dict[str, int]:
    """``vectors_pending`` / ``vectors_total`` read off the index's row counts (``Store.counts``,
    one snapshot): the chunks due a vector that have none, whatever the writer last counted.

    Status says this, not :class:`VectorBacklog`'s running count: that one is updated after the
    writer's own steps, and a status read between a write and its count (or any write the count
    missed) said ``vectors_pending`` 0 with chunks still waiting (issue 38). The writer never
    leaves a vector without its chunk, nor gives a keyword-only chunk one (both checked by the
    tests' ``check_consistent``), so the difference is exact. ``vector_table`` False (an index
    with no vector space: provider "none"): nothing is due.
    """
    if not vector_table:
        return {"vectors_pending": 0, "vectors_total": 0}
    # A note held as one keyword row until it is chunked (ingest.first_pass) is due one vector
    # at least: its chunks are not known yet, and 0 pending must mean every vector is in.
    held = counts.get("provisional_files", 0)
    due = counts["chunks"] - counts["keyword_only_chunks"] + held
    return {"vectors_pending": max(due - counts["vectors"], 0), "vectors_total": due}


class Filler(Protocol):
    """What a back-fill step uses of the indexer (:class:`~recalld.ingest.indexer.Indexer`):
    its store, provider and helpers; named here so that this module does not import it."""

    store: Store
    embedder: Embedder | None
    embed_error: str | None
    progress: Progress
    ahead: EmbedAhead | None
    backlog: VectorBacklog | None

    def vectors_for(
        self, texts_by_hash: dict[str, str], report: SyncReport | None = None, *, embed: bool = True
    ) -> dict[str, npt.NDArray[np.float32]] | None: ...

    def apply_vectors(
        self, pairs: list[tuple[int, npt.NDArray[np.float32]]], generation: int | None = None
    ) -> None: ...


def fill(indexer: Filler, report: SyncReport | None, *, budget_s: float | None) -> int:
    """Embed chunks that have no vector yet (keyword-first writes, a provider that was down,
    a provider added later); returns how many got one.

    ``budget_s`` None: inline, until none is left (an in-process sync, a rebuild). Otherwise one
    step with ``indexer.ahead``, setting ``report.vectors_pending`` when more are due so that the
    daemon queues the next step.
    """
    if indexer.embedder is None:
        return 0
    if budget_s is not None and indexer.ahead is not None:
        return _step_ahead(indexer, indexer.ahead, report, budget_s)
    done = 0
    while True:
        rows = _due(indexer.store, BACKFILL_WINDOW, indexer.backlog)
        if not rows:
            return done
        vectors = indexer.vectors_for({h: t for _, h, t in rows}, report)
        written = _write(indexer, rows, vectors or {})
        done += written
        if written < len(rows):
            return done  # the provider failed (embed_error says why): retried later


def _step_ahead(
    indexer: Filler, ahead: EmbedAhead, report: SyncReport | None, budget_s: float
) -> int:
    """One daemon step: offer the due chunks, wait up to ``budget_s`` for the vectors embedded
    ahead, write them (and any the cache already had)."""
    rows = _due(indexer.store, AHEAD_OFFER, indexer.backlog)
    if not rows:
        return 0
    texts = {h: t for _, h, t in rows}
    maybe_more = len(rows) == AHEAD_OFFER  # more may be due behind these
    # An edit written during a big back-fill: its few chunks (newer than any offered so far)
    # are embedded here, beside the call in flight, instead of waiting for it to end.
    # Written before the wait below, so they are searchable by vector at once.
    fresh = {h: t for cid, h, t in rows if cid > ahead.offered_up_to}
    ahead.offered_up_to = max(ahead.offered_up_to, rows[0][0])
    done = 0
    if 0 < len(fresh) <= FRESH_INLINE and not ahead.idle():
        mine = [r for r in rows if r[1] in fresh]
        done = _write(indexer, mine, indexer.vectors_for(fresh, report) or {})
        maybe_more = maybe_more or done < len(mine)  # the provider failed: the thread retries
        rows = [r for r in rows if r[1] not in fresh]
        texts = {h: t for _, h, t in rows}
    ahead.offer(list(texts.items()))
    got = ahead.collect(budget_s)
    emb = indexer.embedder
    ours = got.vectors if emb is not None and ahead.embedder is emb else {}
    if ours:
        assert emb is not None
        indexer.store.put_cache(emb.key, emb.model, emb.dims, got.vectors)
        indexer.embed_error = None
        indexer.progress.chunks_embedded += len(got.vectors)
        if report is not None:
            report.chunks_embedded += len(got.vectors)
    if got.error is not None:
        indexer.embed_error = got.error
    # The rest through the cache: vectors embedded for an earlier offer count too. Either way
    # only chunks still due with that very text get one.
    vectors = dict(ours)
    vectors.update(
        indexer.vectors_for({h: t for h, t in texts.items() if h not in ours}, embed=False) or {}
    )
    written = _write(indexer, rows, vectors)
    more = maybe_more or written < len(rows) or not ahead.idle()
    done += written
    if report is not None and got.error is None and more:
        report.vectors_pending = True  # the rest in a later step, after other jobs
    return done


def _write(indexer: Filler, rows: list[tuple[int, str, str]], vectors: dict[str, Any]) -> int:
    """Write the vectors of ``rows`` found in ``vectors``; returns how many."""
    pairs = [(cid, vectors[h]) for cid, h, _ in rows if h in vectors]
    if not pairs:
        return 0
    indexer.apply_vectors(pairs, indexer.store.put_vectors(pairs))
    backlog = indexer.backlog
    if backlog is not None and backlog.due_ids:
        filled = {cid for cid, _ in pairs}
        backlog.due_ids = [i for i in backlog.due_ids if i not in filled]
    return len(pairs)


class VectorBacklog:
    """How many chunks still wait for a vector, as last counted by the writer (read by any
    thread: status, watch events, every search's ``vectors_pending``)."""

    def __init__(self) -> None:
        self.pending = 0
        self.total = 0
        self.known = False  # counted at least once
        self.more = False  # the last step stopped on its budget: the daemon queues the next
        self._counted_at = 0.0
        self._stale = False  # chunks written since the last count
        # The newest ids due a vector as of the last write (see _due); None: scan again.
        self.due_ids: list[int] | None = None
        self.head_whole = False  # due_ids held every due id when it was scanned

    def refresh(self, store: Store, *, more: bool = False, by_rows: bool = False) -> None:
        """Count again after a write (one query; chunks and vectors are counted by index;
        ``by_rows``: by :func:`vector_counts_by_rows`)."""
        self.pending, self.total = (vector_counts_by_rows if by_rows else vector_counts)(store)
        self.more = more and self.pending > 0
        self.known = True
        self._stale = False
        self.due_ids = None  # whatever wrote the chunks counted here may have added some
        self._counted_at = time.monotonic()

    def filled(self, vectors: int, *, more: bool) -> None:
        """A back-fill step that wrote no chunk gave ``vectors`` chunks theirs: the count stays
        exact without the recount (it reads every chunk without a vector: 14 ms a step with
        8k due on a loaded machine, more with a bigger backlog)."""
        self.pending = max(self.pending - vectors, 0)
        self.more = more and self.pending > 0
        self._counted_at = time.monotonic()

    def wrote(self, without_vector: int) -> None:
        """Chunks just written without a vector (counted exactly at the next refresh)."""
        self._stale = True
        self.due_ids = None
        if without_vector > 0:
            self.pending += without_vector
            self.total += without_vector

    def refresh_now_and_then(self, store: Store) -> None:
        """Count again during a sync that writes files, at most every :data:`COUNT_EVERY_S`
        (the writer thread)."""
        if self._stale and time.monotonic() - self._counted_at >= COUNT_EVERY_S:
            self.refresh(store, more=self.more, by_rows=True)

    def as_dict(self) -> dict[str, int]:
        """``vectors_pending`` / ``vectors_total`` of status and progress maps."""
        return {"vectors_pending": self.pending, "vectors_total": self.total}
