"""What recalld asks of PostgreSQL: push a file's chunks, leave a tombstone, search, read lines.

One :class:`Remote` per daemon. Connections are opened on demand and dropped on any error (the
next call opens a new one), so a database that goes away and comes back needs nothing from the
user. Every statement runs as the member's own role: row-level security decides what it sees.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from recalld.errors import ConfigError, Unavailable
from recalld.shared.settings import SharedSettings
from recalld.shared.terms import terms_text, tsquery

#: HNSW search width of the vector channel (bench: recall@10 vs exact, bench/shared_store.py).
EF_SEARCH = 100


@dataclass(frozen=True)
class PushChunk:
    """One chunk as pushed: its lines, kind, hash, text (redacted) and vector (or None)."""

    start_line: int
    end_line: int
    kind: str
    hash: str
    text: str
    vector: bytes | None


@dataclass(frozen=True)
class PushFile:
    """One file as pushed: its name in the store, content hash, redacted text and chunks."""

    path: str
    hash: str
    text: str
    chunks: tuple[PushChunk, ...]


@dataclass(frozen=True)
class SharedHit:
    """A chunk found in the shared store, with its channel scores."""

    collection: str
    member: str
    path: str
    start_line: int
    end_line: int
    kind: str
    text: str
    vector: float | None
    keyword: float | None


class Remote:
    """The shared store as this member sees it."""

    def __init__(self, settings: SharedSettings, connect_timeout_s: float = 5.0) -> None:
        self.settings = settings
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    @contextmanager
    def connection(self, timeout_ms: int | None = None) -> Iterator[Any]:
        """A connection of this member (from the idle list or new); dropped if anything fails."""
        import psycopg

        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None or conn.closed:
            try:
                conn = psycopg.connect(
                    self.settings.dsn(), connect_timeout=max(1, round(self.connect_timeout_s))
                )
            except psycopg.OperationalError as exc:
                raise Unavailable(f"shared store unreachable: {_first_line(exc)}") from exc
            _register_vector(conn)
        try:
            if timeout_ms is not None:
                conn.execute(f"SET statement_timeout = {int(timeout_ms)}")
            yield conn
            conn.commit()
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # identity and collection ------------------------------------------------------------------

    def claim(self, provider_key: str, label: str, model: str, dims: int) -> str:
        """Fix or check the store's vector space; ConfigError when it is another one."""
        import psycopg

        try:
            with self.connection() as conn:
                row = conn.execute(
                    "SELECT recalld.claim_identity(%s, %s, %s, %s)",
                    (provider_key, label, model, dims),
                ).fetchone()
        except psycopg.errors.UndefinedFunction as exc:
            raise ConfigError(
                "the shared store has no recalld schema: ask its administrator to run "
                "`recalld shared init` (or start one with `recalld shared up`)"
            ) from exc
        except psycopg.Error as exc:
            if getattr(exc, "sqlstate", None) == "RC001":
                raise ConfigError(_first_line(exc).removeprefix("ERROR:  ")) from exc
            raise
        return str(row[0])

    def ensure_collection(self) -> None:
        """Create this machine's collection (owned by this member) if it is not there."""
        s = self.settings
        with self.connection() as conn:
            me = conn.execute("SELECT recalld.me()").fetchone()
            if me is None or me[0] is None:
                raise ConfigError(
                    f"{s.role} is not a member of the shared store: ask its administrator to run "
                    f"`recalld shared add-member {s.member}`"
                )
            conn.execute(
                "INSERT INTO recalld.collections(name, owner, team) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO UPDATE SET team = excluded.team, updated_at = now()",
                (s.collection, s.member, s.team),
            )

    # push ---------------------------------------------------------------------------------------

    def pushed(self) -> dict[str, str]:
        """What the store holds of this collection: path -> content hash ('' for a tombstone)."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT path, CASE WHEN deleted THEN '' ELSE hash END FROM recalld.files "
                "WHERE collection = %s",
                (self.settings.collection,),
            ).fetchall()
        return {str(p): str(h) for p, h in rows}

    def push_file(self, path: str, file_hash: str, text: str, chunks: Sequence[PushChunk]) -> None:
        """Replace one file (its redacted text, chunks and vectors) in one transaction."""
        self.push_files([PushFile(path, file_hash, text, tuple(chunks))])

    def push_files(self, files: Sequence[PushFile]) -> None:
        """Replace these files (redacted text, chunks, vectors) in one transaction, each kind of
        row sent as one batch (a statement per chunk cost a round trip per chunk)."""
        coll = self.settings.collection
        with self.connection() as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO recalld.files(collection, path, hash, lines, text) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (collection, path) DO UPDATE SET "
                "hash = excluded.hash, lines = excluded.lines, text = excluded.text, "
                "deleted = false, pushed_at = now()",
                [(coll, f.path, f.hash, len(f.text.splitlines()), f.text) for f in files],
            )
            cur.execute(
                "DELETE FROM recalld.chunks WHERE collection = %s AND path = ANY(%s)",
                (coll, [f.path for f in files]),
            )
            chunks = [(f.path, c) for f in files for c in f.chunks]
            if not chunks:
                return
            cur.executemany(
                "INSERT INTO recalld.chunks(collection, path, start_line, end_line, kind, hash, "
                "text, terms) VALUES (%s, %s, %s, %s, %s, %s, %s, to_tsvector('simple', %s)) "
                "RETURNING id",
                [
                    (coll, p, c.start_line, c.end_line, c.kind, c.hash, c.text, terms_text(c.text))
                    for p, c in chunks
                ],
                returning=True,
            )
            ids = []
            while True:
                ids.append(cur.fetchone()[0])
                if not cur.nextset():
                    break
            vectors = [
                (cid, coll, np.frombuffer(c.vector, dtype=np.float32))
                for cid, (_, c) in zip(ids, chunks, strict=True)
                if c.vector is not None
            ]
            if vectors:
                cur.executemany(
                    "INSERT INTO recalld.vectors(chunk_id, collection, embedding) "
                    "VALUES (%s, %s, %s)",
                    vectors,
                )

    def tombstone(self, path: str) -> None:
        """The file left this collection (deleted, forgotten, no longer shared)."""
        coll = self.settings.collection
        with self.connection() as conn:
            conn.execute(
                "DELETE FROM recalld.chunks WHERE collection = %s AND path = %s", (coll, path)
            )
            conn.execute(
                "UPDATE recalld.files SET deleted = true, hash = '', text = '', pushed_at = now() "
                "WHERE collection = %s AND path = %s",
                (coll, path),
            )

    # search and get -----------------------------------------------------------------------------

    def search(
        self, query: str, query_vector: np.ndarray | None, k: int, timeout_ms: int
    ) -> list[SharedHit]:
        """The top ``k`` chunks of each channel in the collections this member reads."""
        with self.connection(timeout_ms) as conn:
            collections = [
                str(r[0])
                for r in conn.execute("SELECT name FROM recalld.collections").fetchall()
                if self.settings.reads(str(r[0]))
            ]
            if not collections:
                return []
            hits: dict[int, dict[str, Any]] = {}
            q = tsquery(query)
            if q is not None:
                for cid, rank in conn.execute(
                    "SELECT id, ts_rank_cd(terms, q) FROM recalld.chunks, "
                    "to_tsquery('simple', %s) q WHERE terms @@ q AND collection = ANY(%s) "
                    "ORDER BY 2 DESC LIMIT %s",
                    (q, collections, k),
                ):
                    hits.setdefault(int(cid), {})["keyword"] = float(rank)
            if query_vector is not None and _has_vectors(conn):
                conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                # The graph's search width: pgvector's default 40 misses neighbours at 1M.
                conn.execute(f"SET LOCAL hnsw.ef_search = {min(max(EF_SEARCH, k), 1000)}")
                for cid, dist in conn.execute(
                    "SELECT chunk_id, embedding <=> %s FROM recalld.vectors "
                    "WHERE collection = ANY(%s) ORDER BY embedding <=> %s LIMIT %s",
                    (query_vector, collections, query_vector, k),
                ):
                    hits.setdefault(int(cid), {})["vector"] = 1.0 - float(dist)
            if not hits:
                return []
            rows = conn.execute(
                "SELECT c.id, c.collection, co.owner, c.path, c.start_line, c.end_line, c.kind, "
                "c.text FROM recalld.chunks c JOIN recalld.collections co "
                "ON co.name = c.collection WHERE c.id = ANY(%s)",
                (list(hits),),
            ).fetchall()
        return [
            SharedHit(
                str(coll),
                str(owner),
                str(path),
                int(a),
                int(b),
                str(kind),
                str(text),
                hits[int(cid)].get("vector"),
                hits[int(cid)].get("keyword"),
            )
            for cid, coll, owner, path, a, b, kind, text in rows
        ]

    def file_text(self, collection: str, path: str) -> str | None:
        """A shared file's (redacted) text, or None when it is not there or not readable."""
        with self.connection(max(self.settings.timeout_ms, 2000)) as conn:
            row = conn.execute(
                "SELECT text FROM recalld.files WHERE collection = %s AND path = %s "
                "AND NOT deleted",
                (collection, path),
            ).fetchone()
        return None if row is None else str(row[0])


def _has_vectors(conn: Any) -> bool:
    row = conn.execute("SELECT to_regclass('recalld.vectors')").fetchone()
    return row is not None and row[0] is not None


def _register_vector(conn: Any) -> None:
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except Exception:  # noqa: BLE001 - no extension yet (a store not initialised): plain types
        conn.rollback()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
