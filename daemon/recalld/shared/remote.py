"""What recalld asks of PostgreSQL: push a file's chunks, leave a tombstone, search, read lines.

One :class:`Remote` per daemon, its connections kept between calls (:mod:`.connections`): a
database that goes away and comes back needs nothing from the user, and every call is tried once
more on a new connection when a kept one turned out closed by a restart (:func:`.once_more`).
Every statement runs as the member's own role: row-level security decides what it sees.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from recalld.errors import ConfigError
from recalld.shared import fresh_vectors, graph
from recalld.shared.connections import Connections, first_line, once_more
from recalld.shared.settings import SharedSettings
from recalld.shared.terms import query_terms, terms_text

#: HNSW search width of the vector channel. On the bench's 1M store with its graph built at
#: ef_construction 128 (shared.graph), recall@10 vs exact, 200 queries, alternated: 0.918 at
#: 40, 0.9895 at 60, 0.9995 at 80-250, p50 2.8 ms at 80, 3.0-3.1 at 100, 4.2 at 200 (warm).
#: 100 keeps a step of margin over where recall stops rising (docs/DECISIONS.md). It is at least
#: MAX_CANDIDATES, so one pass of the graph gives the channel all its candidates.
EF_SEARCH = 100
#: Candidates of each channel (keyword, vector) one search asks for; keyword_hits caps it too.
MAX_CANDIDATES = 64
#: How long the list of collections this member reads is reused (a new teammate's collection
#: shows up in searches within this time).
COLLECTIONS_TTL_S = 30.0

# Each channel is one statement, one round trip, and the two run at once on two connections
# (PostgreSQL gives each its own process): the keyword candidates (recalld.keyword_hits: the
# postings, which row-level security would keep from a plain query) with their rows, and the
# vector candidates (HNSW) with theirs. A chunk both find comes twice and is merged.
_ROWS = (
    "SELECT c.id, c.collection, co.owner, c.path, c.start_line, c.end_line, c.kind, c.text, "
    "{scores} FROM {found} JOIN recalld.chunks c ON c.id = found.id "
    "JOIN recalld.collections co ON co.name = c.collection"
)
SEARCH_KEYWORD = _ROWS.format(
    scores="found.rank, NULL::float8",
    found="recalld.keyword_hits(%(terms)s, %(colls)s, %(k)s) AS found",
)
SEARCH_VECTOR = _ROWS.format(
    scores="NULL::real, found.dist",
    found=fresh_vectors.FOUND,  # the HNSW graph's and the fresh (not yet merged) vectors'
)


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
        self.connections = Connections(settings, connect_timeout_s, _prepare)
        self._readable: tuple[float, list[str]] | None = None
        self._has_vectors = False
        # the vector channel's statement, run while the keyword one runs on the caller's thread
        self._pool = cf.ThreadPoolExecutor(max_workers=2, thread_name_prefix="recalld-shared-vec")

    def connection(self, timeout_ms: int | None = None) -> AbstractContextManager[Any]:
        """A connection of this member (:meth:`.Connections.connection`)."""
        return self.connections.connection(timeout_ms)

    def close(self) -> None:
        """Close the idle connections, and each busy one when its statement ends."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.connections.close()

    @once_more
    def ping(self, timeout_ms: int) -> None:
        """One round trip: raises when the store does not answer."""
        with self.connection(timeout_ms) as conn:
            conn.execute("SELECT 1")

    # identity and collection ------------------------------------------------------------------

    @once_more
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
                raise ConfigError(first_line(exc).removeprefix("ERROR:  ")) from exc
            raise
        return str(row[0])

    @once_more
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

    @once_more
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

    @once_more
    def push_files(self, files: Sequence[PushFile]) -> None:
        """Replace these files (redacted text, chunks, vectors) in one transaction, each kind of
        row sent as one batch (a statement per chunk cost a round trip per chunk)."""
        coll = self.settings.collection
        with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
            _upsert_files(cur, coll, files)
            cur.execute(
                "DELETE FROM recalld.chunks WHERE collection = %s AND path = ANY(%s)",
                (coll, [f.path for f in files]),
            )
            chunks = [(f.path, c) for f in files for c in f.chunks]
            if not chunks:
                return
            # Ids first (one statement), then every chunk in one INSERT of arrays: an
            # INSERT ... RETURNING per chunk was most of a push's time. The arrays go in binary:
            # as text, quoting 4,001 chunks' texts cost ~50 ms here and parsing them the server.
            ids = [
                int(r[0])
                for r in cur.execute(
                    "SELECT nextval('recalld.chunks_id_seq') FROM generate_series(1, %s)",
                    (len(chunks),),
                ).fetchall()
            ]
            cur.execute(
                "INSERT INTO recalld.chunks(id, collection, path, start_line, end_line, kind, "
                "hash, text, terms) SELECT u.id, %s, u.path, u.a, u.b, u.kind, u.hash, u.text, "
                "to_tsvector('simple', u.terms) FROM unnest(%b::bigint[], %b::text[], %b::int[], "
                "%b::int[], %b::text[], %b::text[], %b::text[], %b::text[]) "
                "AS u(id, path, a, b, kind, hash, text, terms)",
                (
                    coll,
                    ids,
                    [p for p, _ in chunks],
                    [c.start_line for _, c in chunks],
                    [c.end_line for _, c in chunks],
                    [c.kind for _, c in chunks],
                    [c.hash for _, c in chunks],
                    [c.text for _, c in chunks],
                    [terms_text(c.text) for _, c in chunks],
                ),
            )
            vectors = [
                (cid, coll, np.frombuffer(c.vector, dtype=np.float32))
                for cid, (_, c) in zip(ids, chunks, strict=True)
                if c.vector is not None
            ]
            if vectors:  # executemany: one pipeline, no round trip per row
                _insert_fresh(cur, vectors)

    @once_more
    def merge_fresh(self, limit: int) -> int:
        """Move up to ``limit`` fresh vectors (any collection's) into the HNSW graph."""
        with self.connection() as conn:
            row = conn.execute("SELECT recalld.merge_fresh(%s)", (limit,)).fetchone()
        return int(row[0]) if row else 0

    @once_more
    def fresh_rows(self) -> int:
        """Vectors of every collection not yet in the graph (read exactly by each search)."""
        with self.connection() as conn:
            row = conn.execute("SELECT recalld.fresh_rows()").fetchone()
        return int(row[0]) if row else 0

    @once_more
    def graph_state(self) -> tuple[int, bool]:
        """The fresh rows (as :meth:`fresh_rows`) and whether the store's graph predates
        migration 6 (an administrator's ``recalld shared init`` rebuilds it), in one round trip."""
        with self.connection() as conn:
            row = conn.execute(f"SELECT recalld.fresh_rows(), ({graph.OUTDATED})").fetchone()
        return (int(row[0]), bool(row[1])) if row else (0, False)

    @once_more
    def tombstone(self, path: str) -> None:
        """The file left this collection (deleted, forgotten, no longer shared)."""
        coll = self.settings.collection
        with self.connection() as conn, conn.transaction():
            conn.execute(
                "DELETE FROM recalld.chunks WHERE collection = %s AND path = %s", (coll, path)
            )
            conn.execute(
                "UPDATE recalld.files SET deleted = true, hash = '', text = '', pushed_at = now() "
                "WHERE collection = %s AND path = %s",
                (coll, path),
            )

    # search and get -----------------------------------------------------------------------------

    @once_more
    def search(
        self,
        query: str,
        query_vector: np.ndarray | Callable[[], np.ndarray | None] | None,
        k: int,
        timeout_ms: int,
    ) -> list[SharedHit]:
        """The top ``k`` (at most MAX_CANDIDATES) chunks of each channel in the collections this
        member reads: the two channels at once, each in one statement. ``query_vector`` may be
        a function that makes it: the keyword statement does not wait for it."""
        with self.connection(timeout_ms) as conn:
            collections = self._collections(conn)
            if not collections:
                return []
            terms = query_terms(query)
            params = {"terms": terms, "colls": collections, "k": min(max(k, 1), MAX_CANDIDATES)}
            vector_rows: cf.Future[list[Any]] | None = None
            if query_vector is not None and self._vectors_exist(conn):
                try:
                    vector_rows = self._pool.submit(
                        self._vector_rows, params, query_vector, timeout_ms
                    )
                except RuntimeError:  # closed, so no pool: one statement after the other
                    vector_rows = cf.Future()
                    vector_rows.set_result(self._vector_rows(params, query_vector, timeout_ms))
            try:
                rows = _fetch(conn, SEARCH_KEYWORD, params) if terms else []
            finally:  # the vector statement's connection goes back to the idle list either way
                more = vector_rows.result() if vector_rows is not None else []
        return _merged(rows + more)

    def _vector_rows(
        self,
        params: dict[str, Any],
        query_vector: np.ndarray | Callable[[], np.ndarray | None],
        timeout_ms: int,
    ) -> list[Any]:
        vector = query_vector() if callable(query_vector) else query_vector
        if vector is None:
            return []
        with self.connection(timeout_ms) as conn:
            return _fetch(conn, SEARCH_VECTOR, {**params, "v": vector})

    def _collections(self, conn: Any) -> list[str]:
        """The collections searched: readable ones ``shared.read`` names (kept a while)."""
        cached = self._readable
        if cached is not None and time.monotonic() - cached[0] < COLLECTIONS_TTL_S:
            return cached[1]
        names = [
            str(r[0])
            for r in conn.execute("SELECT name FROM recalld.collections").fetchall()
            if self.settings.reads(str(r[0]))
        ]
        if names:  # none yet (the team's first daemons): asked again at the next search
            self._readable = (time.monotonic(), names)
        return names

    def _vectors_exist(self, conn: Any) -> bool:
        """Whether the store has its vectors table (made once, by the first daemon to push)."""
        if not self._has_vectors:
            self._has_vectors = _has_vectors(conn)
        return self._has_vectors

    @once_more
    def file_text(self, collection: str, path: str) -> str | None:
        """A shared file's (redacted) text, or None when it is not there or not readable."""
        with self.connection(max(self.settings.timeout_ms, 2000)) as conn:
            row = conn.execute(
                "SELECT text FROM recalld.files WHERE collection = %s AND path = %s "
                "AND NOT deleted",
                (collection, path),
            ).fetchone()
        return None if row is None else str(row[0])


_OLDER_SCHEMA = (
    "the shared store's schema is older than this recalld: ask its administrator to run "
    "`recalld shared init` (or `recalld shared up` for the embedded one)"
)


def _merged(rows: Sequence[Any]) -> list[SharedHit]:
    """One hit per chunk, with the keyword rank and the vector distance of its rows."""
    hits: dict[int, SharedHit] = {}
    for cid, coll, owner, path, a, b, kind, text, rank, dist in rows:
        hit = SharedHit(
            str(coll),
            str(owner),
            str(path),
            int(a),
            int(b),
            str(kind),
            str(text),
            None if dist is None else 1.0 - float(dist),
            None if rank is None else float(rank),
        )
        seen = hits.get(int(cid))
        if seen is not None:
            hit = replace(
                seen,
                vector=seen.vector if hit.vector is None else hit.vector,
                keyword=seen.keyword if hit.keyword is None else hit.keyword,
            )
        hits[int(cid)] = hit
    return list(hits.values())


def _fetch(conn: Any, statement: str, params: dict[str, Any]) -> list[Any]:
    """The search's rows (a prepared statement); a store not migrated to recalld.keyword_hits
    says what to do."""
    import psycopg

    try:
        return list(conn.execute(statement, params, prepare=True).fetchall())
    except (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable) as exc:
        raise ConfigError(_OLDER_SCHEMA) from exc


def _upsert_files(cur: Any, collection: str, files: Sequence[PushFile]) -> None:
    """The files' rows (redacted text, hash, line count) in one statement of binary arrays:
    a pipelined row per file cost 0.14-0.25 s for 1,966 files, this ~0.05 s."""
    cur.execute(
        "INSERT INTO recalld.files(collection, path, hash, lines, text) "
        "SELECT %s, u.path, u.hash, u.lines, u.text "
        "FROM unnest(%b::text[], %b::text[], %b::int[], %b::text[]) "
        "AS u(path, hash, lines, text) ON CONFLICT (collection, path) DO UPDATE SET "
        "hash = excluded.hash, lines = excluded.lines, text = excluded.text, "
        "deleted = false, pushed_at = now()",
        (
            collection,
            [f.path for f in files],
            [f.hash for f in files],
            [len(f.text.splitlines()) for f in files],
            [f.text for f in files],
        ),
    )


def _insert_fresh(cur: Any, vectors: list[tuple[int, str, Any]]) -> None:
    """A push's vectors into the fresh table (recalld.shared.fresh_vectors), sent in binary:
    as text each vector cost ~0.1 ms to format. A store without the table says what to do."""
    import psycopg

    try:
        cur.executemany(
            "INSERT INTO recalld.fresh_vectors(chunk_id, collection, embedding) "
            "VALUES (%s, %s, %b)",
            vectors,
        )
    except psycopg.errors.UndefinedTable as exc:
        raise ConfigError(_OLDER_SCHEMA) from exc


def _has_vectors(conn: Any) -> bool:
    row = conn.execute("SELECT to_regclass('recalld.vectors')").fetchone()
    return row is not None and row[0] is not None


def _prepare(conn: Any) -> None:
    """A new connection: pgvector's types, the graph's search width (pgvector's default 40
    misses neighbours at 1M), and an iterative scan, so that a collection filter still yields
    k rows."""
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except Exception:  # noqa: BLE001 - no extension yet (a store not initialised): plain types
        conn.rollback()
    conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
