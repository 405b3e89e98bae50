"""Push: the shared folders' chunks, with the vectors the daemon already has, into its collection.

What waits to be pushed is not a log of events but a difference of two states: the files of the
shared folders in the local index, and what the store holds of this collection (path -> content
hash). A file whose hash differs is pushed whole (its redacted text, chunks and vectors, one
transaction); a file gone from the local index leaves a tombstone. So pushing is idempotent by
content hash, nothing is duplicated when a push is retried, and nothing is lost across a restart
or while PostgreSQL is away: the difference is still there when it comes back. The last state
seen of the store is kept in ``shared-pushed.json`` beside the index, so that ``status`` can say
how many files wait even while the store is unreachable.
"""

from __future__ import annotations

import concurrent.futures as cf
import fnmatch
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld.index.store import VECTORS_GENERATION, ChunkRow, Store
from recalld.ingest.identity_check import CHUNKER_VERSION, SESSION_CHUNKER_VERSION
from recalld.ingest.indexer import text_hash
from recalld.ingest.redactor import redact
from recalld.shared.fresh_vectors import FRESH_CAP, MERGE_ROWS
from recalld.shared.remote import PushChunk, PushFile, Remote
from recalld.shared.settings import SharedSettings

log = logging.getLogger("recalld.shared")

#: Chunks sent in one transaction (a few files, or one big one).
BATCH_CHUNKS = 500
#: Transactions sent at once, each on its own connection (bench/shared_store.py: push / index).
PUSH_CONNECTIONS = 2
#: Backoff after a failed push: doubles from the first to the last, then stays there.
BACKOFF_S = (1.0, 60.0)
#: With nothing to push, ask the store this often whether it is still there (and what other
#: daemons left to merge): an idle daemon's ``status`` must not read "reachable" for ever after
#: the store went away.
CHECK_S = 30.0


@dataclass
class PushState:
    """What ``status`` says of the shared store."""

    waiting: int = 0
    unfinished: int = 0  # shared files whose vectors are still being computed
    unmerged: int = 0  # the store's fresh vectors, not yet in its HNSW graph (any collection)
    graph_outdated: bool = False  # the store's graph predates migration 6 (shared.graph)
    pushed: int = 0
    tombstones: int = 0
    last_error: str | None = None
    last_push: float | None = None
    reachable: bool | None = None
    retry_in_s: float = 0.0
    known: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "waiting": self.waiting,
            "waiting_for_vectors": self.unfinished,
            "unmerged_vectors": self.unmerged,
            "graph_outdated": self.graph_outdated,
            "pushed": self.pushed,
            "tombstones": self.tombstones,
            "reachable": self.reachable,
            "last_error": self.last_error,
            "last_push": self.last_push,
            "retry_in_s": round(self.retry_in_s, 1),
        }


class Scope:
    """Which indexed files are shared: memory notes under ``share``, transcripts only if named."""

    def __init__(self, share: tuple[str, ...], memory_roots: list[Path]) -> None:
        self.roots = [Path(os.path.realpath(r)) for r in memory_roots]
        self.patterns = [os.path.expanduser(p) for p in share]

    def key(self, path: str, source: str) -> str | None:
        """The file's name in the store (``<root folder>/<relative path>``), or None: not shared."""
        for root in self.roots:
            try:
                rel = Path(path).relative_to(root).as_posix()
            except ValueError:
                continue
            if source == "memory" and any(self._match(p, path, rel) for p in self.patterns):
                return f"{root.name}/{rel}"
        if source == "sessions" and any(
            os.path.isabs(p) and self._match(p, path, "") for p in self.patterns
        ):
            return "sessions/" + Path(path).name
        return None

    @staticmethod
    def _match(pattern: str, path: str, rel: str) -> bool:
        if os.path.isabs(pattern):
            return fnmatch.fnmatchcase(path, pattern) or path.startswith(pattern.rstrip("/") + "/")
        if not rel:
            return False
        return fnmatch.fnmatchcase(rel, pattern) or rel.startswith(pattern.rstrip("/") + "/")


class Pusher:
    """The thread that keeps this collection equal to the shared part of the local index."""

    def __init__(
        self,
        settings: SharedSettings,
        remote: Remote,
        reader: Callable[[], AbstractContextManager[Store]],
        scope: Scope,
        state_file: Path,
        interval_s: float = 2.0,
        check_s: float = CHECK_S,
    ) -> None:
        self.settings = settings
        self.remote = remote
        self.reader = reader
        self.scope = scope
        self.state_file = state_file
        self.interval_s = interval_s
        self.check_s = check_s
        self._contact = 0.0  # monotonic time the store last answered
        self.state = PushState(known=_load_known(state_file))
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._identity_ok = False
        self._last_mark: tuple[Any, ...] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="recalld-shared-push", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def poke(self) -> None:
        """Something was indexed: look for work now rather than at the next interval."""
        self._wake.set()

    def _run(self) -> None:
        delay = BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                self.push_once()
                self.merge_fresh()
                delay = BACKOFF_S[0]
                self.state.retry_in_s = 0.0
                self._wake.wait(self.interval_s)
            except Exception as exc:  # noqa: BLE001 - any failure: say it, retry with backoff
                self.state.last_error = _describe(exc)
                self.state.reachable = False
                self.state.retry_in_s = delay
                log.warning("shared store: %s (retrying in %.0f s)", self.state.last_error, delay)
                self._wake.wait(delay)
                delay = min(delay * 2, BACKOFF_S[1])
            self._wake.clear()

    def push_once(self) -> int:
        """One round: push what differs; returns the files pushed or tombstoned."""
        mark = self._fingerprint()
        settled = self._identity_ok and not (self.state.waiting or self.state.unfinished)
        if settled and mark == self._last_mark:  # nothing indexed since a round that finished
            if time.monotonic() - self._contact >= self.check_s:
                self._look()  # raises if the store is away
                self._answered()
            return 0
        local = self._local_files()
        self.state.waiting = len(_differences(local, self.state.known))
        if not self._identity_ok:
            self._claim()
        self._look()  # fresh vectors left by any daemon: merged after
        remote = self.remote.pushed()
        self._answered()
        self._remember(remote)
        work = _differences(local, remote)
        self.state.waiting = len(work)
        done = 0
        for key in (k for k in work if k not in local):
            self.remote.tombstone(key)
            remote[key] = ""
            self.state.tombstones += 1
            done += 1
            self.state.waiting -= 1
            self._remember(remote)
        done += self._push_batches([k for k in work if k in local], local, remote)
        if done:
            self.state.last_push = time.time()
        self._last_mark = mark
        return done

    def _look(self) -> None:
        self.state.unmerged, self.state.graph_outdated = self.remote.graph_state()

    def answered_at(self) -> float:
        """Monotonic time the store last answered a push round (0: never)."""
        return self._contact

    def _answered(self) -> None:
        self._contact = time.monotonic()
        self.state.reachable = True
        self.state.last_error = None

    def merge_fresh(self) -> int:
        """Move the store's fresh vectors into its HNSW graph, MERGE_ROWS per transaction,
        until none is left or there is something to push (that goes first); returns how many."""
        merged = 0
        while self.state.unmerged > 0 and not self._wake.is_set() and not self._stop.is_set():
            moved = self.remote.merge_fresh(MERGE_ROWS)
            merged += moved
            self.state.unmerged = max(self.state.unmerged - moved, 0) if moved else 0
        return merged

    def _make_room(self, sending: dict[cf.Future[None], list[PushFile]]) -> None:
        """FRESH_CAP fresh vectors wait: merge half of them before sending more (a search reads
        them all, exactly); what is being sent lands first, counted as fresh."""
        for future in cf.as_completed(list(sending)):
            future.exception()  # raised when the batch is handled; only waited for here
        self.state.unmerged = self.remote.fresh_rows()
        while self.state.unmerged > FRESH_CAP // 2 and not self._stop.is_set():
            moved = self.remote.merge_fresh(MERGE_ROWS)
            if not moved:
                break  # another daemon is merging the rest
            self.state.unmerged -= moved

    def _fingerprint(self) -> tuple[Any, ...]:
        """Changes whenever a file is indexed or removed, or a vector is written."""
        with self.reader() as store:
            row = store.conn.execute("SELECT count(*), max(indexed_at) FROM files").fetchone()
            return (tuple(row or ()), store.meta(VECTORS_GENERATION))

    def _claim(self) -> None:
        with self.reader() as store:
            identity = store.identity()
        if identity is None or not identity.provider_key:
            return  # keyword-only for now: pushed chunks carry no vectors, nothing to check
        self.remote.claim(identity.provider_key, identity.label, identity.model, identity.dims)
        self.remote.ensure_collection()
        self._identity_ok = True

    def _local_files(self) -> dict[str, tuple[str, str]]:
        """key -> (absolute path, content hash) of the shared files in the local index.

        A file whose chunks still wait for vectors (keyword first), or that is held as one
        provisional keyword row until it is chunked (recalld.ingest.first_pass), is left for
        a later round: pushed now, it would reach the store without them (or unchunked) and
        never be pushed again.
        """
        with self.reader() as store:
            files = store.files()
            unfinished = _without_vectors(store)
        out: dict[str, tuple[str, str]] = {}
        self.state.unfinished = 0
        for path, row in files.items():
            key = self.scope.key(path, row.source)
            if key is None:
                continue
            if path in unfinished or row.provisional:
                self.state.unfinished += 1
                if key in self.state.known:  # keep what the store has until vectors come
                    out[key] = (path, self.state.known[key])
                continue
            out[key] = (path, pushed_hash(row.hash))
        return out

    def _push_batches(
        self, pending: list[str], local: dict[str, tuple[str, str]], remote: dict[str, str]
    ) -> int:
        """Send the files in batches (one transaction each), PUSH_CONNECTIONS at once, the next
        one prepared here meanwhile: inserting into the store's HNSW graph is most of a push,
        and PostgreSQL gives each connection a process of its own. A failure ends the round;
        what was sent is remembered, the rest is sent again next time (by content hash)."""
        done = 0
        with cf.ThreadPoolExecutor(PUSH_CONNECTIONS, thread_name_prefix="recalld-send") as pool:
            sending: dict[cf.Future[None], list[PushFile]] = {}
            while pending or sending:
                if pending and len(sending) < PUSH_CONNECTIONS:
                    if self.state.unmerged >= FRESH_CAP:
                        self._make_room(sending)
                    batch, pending = self._prepare_batch(pending, local)
                    sending[pool.submit(self.remote.push_files, batch)] = batch
                    self.state.unmerged += _vectors_in(batch)
                    continue
                finished, _ = cf.wait(sending, return_when=cf.FIRST_COMPLETED)
                for future in finished:
                    batch = sending.pop(future)
                    future.result()
                    done += self._sent(batch, local, remote)
        return done

    def _sent(
        self, batch: list[PushFile], local: dict[str, tuple[str, str]], remote: dict[str, str]
    ) -> int:
        """A batch is in the store: remember it (and say so in ``status``)."""
        for f in batch:
            remote[f.path] = local[f.path][1]
        self.state.pushed += len(batch)
        self.state.waiting -= len(batch)
        self._remember(remote)
        return len(batch)

    def _prepare_batch(
        self, keys: list[str], local: dict[str, tuple[str, str]]
    ) -> tuple[list[PushFile], list[str]]:
        """The next files to push (about BATCH_CHUNKS chunks), read on one index connection
        (one per file cost more than the push itself); and the keys left for later batches."""
        picked: list[tuple[str, list[ChunkRow]]] = []
        chunks = 0
        rest: list[str] = []
        with self.reader() as store:
            for n, key in enumerate(keys):
                picked.append((key, store.file_chunks(local[key][0])))
                chunks += len(picked[-1][1])
                if chunks >= BATCH_CHUNKS:
                    rest = keys[n + 1 :]
                    break
            # one read of vec0 for the batch: a read per file cost ~0.4 ms each, 25x the batch
            ids = [c.id for _, rows in picked for c in rows]
            vectors = store.vectors(ids) if store.has_vec_table() else {}
        return [self._prepare(key, local[key], rows, vectors) for key, rows in picked], rest

    @staticmethod
    def _prepare(
        key: str, entry: tuple[str, str], chunks: list[ChunkRow], vectors: dict[int, bytes]
    ) -> PushFile:
        """A file as it will be pushed: redacted text, chunks and the vectors already made."""
        path, file_hash = entry
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = "\n".join(c.text for c in chunks)
        pushed = [
            PushChunk(
                c.start_line,
                c.end_line,
                c.kind,
                text_hash(c.text),
                _clean(c.text),
                vectors.get(c.id),
            )
            for c in chunks
        ]
        return PushFile(key, file_hash, _clean(text), tuple(pushed))

    def _remember(self, remote: dict[str, str]) -> None:
        self.state.known = dict(remote)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(remote), encoding="utf-8")
        os.replace(tmp, self.state_file)


def _vectors_in(batch: list[PushFile]) -> int:
    return sum(c.vector is not None for f in batch for c in f.chunks)


def _clean(text: str) -> str:
    """Text on its way off this machine: the one redactor (counted as served), and no NUL char,
    which PostgreSQL text cannot hold: one would fail its whole batch at every round (a note's
    NUL past the indexer's binary sniff, a transcript's ``\\u0000``). It leaves as U+FFFD."""
    return redact(text, "served")[0].replace("\x00", "\ufffd")


def _without_vectors(store: Store) -> set[str]:
    """Paths with a chunk due a vector that has none yet (empty for a keyword-only index)."""
    if not store.has_vec_table():
        return set()
    rows = store.conn.execute(
        "SELECT DISTINCT path FROM chunks WHERE embed = 1 "
        "AND id NOT IN (SELECT rowid FROM chunks_vec)"
    )
    return {str(r[0]) for r in rows}


def _differences(local: dict[str, tuple[str, str]], remote: dict[str, str]) -> list[str]:
    """Keys to push (hash differs) then keys to tombstone (gone here, live there)."""
    push = [k for k, (_, h) in local.items() if remote.get(k) != h]
    gone = [k for k, h in remote.items() if h and k not in local]
    return sorted(push) + sorted(gone)


#: What a pushed file's text was made by: a new secret shape or chunking (a chunker version)
#: changes what a file pushes though its bytes do not, so a store holding texts made before is
#: sent them again (a secret a new rule finds leaves the store as it leaves the index).
PUSHED_FORM = f"{CHUNKER_VERSION}+{SESSION_CHUNKER_VERSION}"


def pushed_hash(content_hash: str) -> str:
    """The hash a file is pushed under: its content's, and :data:`PUSHED_FORM`."""
    return f"{content_hash}/{PUSHED_FORM}"


def _load_known(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _describe(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
