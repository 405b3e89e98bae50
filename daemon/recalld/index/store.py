"""The SQLite index: a thin layer over apsw (FTS5 + sqlite-vec), no sockets, no search logic.

One writer connection (the daemon's writer thread, or the CLI's in-process sync) and any number of
read-only connections. WAL mode lets readers run while a writer commits. Every multi-row change is
one transaction, so a crash never leaves a half-indexed file.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import numpy.typing as npt
import sqlite_vec

from recalld.errors import IndexError_
from recalld.index.chunk_facts import FactFilter, filter_sql, put_tags
from recalld.index.ident_tokens import ident_text
from recalld.index.migrations import migrate

_PREFIX_END = "\U0010ffff"


@dataclass(frozen=True)
class Identity:
    """What the vectors and chunks in an index were built with. Never mix two of these."""

    provider_key: str  # "" when the index has no vectors (keyword-only)
    label: str
    model: str
    dims: int
    chunking: str  # JSON of the chunking settings

    def same_space(self, other: Identity) -> bool:
        """Whether vectors of ``other`` can live in this index."""
        return (self.provider_key, self.model, self.dims) == (
            other.provider_key,
            other.model,
            other.dims,
        )


VECTORS_EPOCH = "vectors_epoch"  # random, new with each vec0 table (a rebuild, a new index)
VECTORS_GENERATION = "vectors_generation"  # +1 in every transaction that writes vec0


@dataclass(frozen=True)
class FileRow:
    """One indexed file."""

    path: str
    source: str
    size: int
    mtime_ns: int
    hash: str
    lines: int


@dataclass(frozen=True)
class NewChunk:
    """A chunk about to be written."""

    start_line: int
    end_line: int
    text: str
    hash: str
    context: str = ""  # document title / heading path, indexed as a second FTS column
    kind: str = "note"  # note | message | tool_call | tool_output
    tool: str = ""  # tool chunks: the tool's name
    embed: bool = True  # False: keyword channel only, by policy (never backfilled)
    date: float | None = None  # content date, seconds since the epoch (chunk_facts)
    tags: tuple[str, ...] = ()  # lower-case, for the search filters (chunk_facts)


@dataclass(frozen=True)
class ChunkRow:
    """A stored chunk."""

    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    context: str = ""  # document title > heading path
    kind: str = "note"
    tool: str = ""
    embed: bool = True


_CHUNK_COLUMNS = "id, path, source, start_line, end_line, text, context, kind, tool, embed"


@dataclass(frozen=True)
class FileChange:
    """What one write did to the chunk ids (for the in-memory vector index)."""

    removed: list[int]
    added: list[tuple[int, npt.NDArray[np.float32]]]
    generation: int | None = None  # the vectors' generation after this write (None: unknown)
    inserted: list[int] = field(default_factory=list)  # every chunk id written, vector or not
    kept: int = 0  # chunks left as they were (unchanged), of those that take a vector


@dataclass(frozen=True)
class VectorBlock:
    """One vec0 storage chunk: ``size`` slots, a validity bitmap, int64 rowids, float32 rows."""

    size: int
    validity: bytes
    rowids: bytes
    nbytes: int  # of the float32 rows blob
    read_into: Callable[[Any], None]  # copies the rows blob into a writable buffer


def prefix_bounds(prefix: str) -> tuple[str, str]:
    """Range ``[lo, hi)`` of strings starting with ``prefix`` (index-friendly LIKE 'p%')."""
    return prefix, prefix + _PREFIX_END


def _sql_ident(*args: Any) -> str:
    """``recalld_ident(text)`` in SQL (migration 3)."""
    return ident_text(args[0]) if isinstance(args[0], str) else ""


def vector_blob(vec: npt.NDArray[np.float32]) -> bytes:
    """A float32 vector as the little-endian blob that sqlite-vec stores."""
    return np.asarray(vec, dtype="<f4").tobytes()


class Store:
    """One connection to the index file (writer or read-only)."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        self.readonly = readonly
        if readonly:
            if not path.exists():
                raise IndexError_(f"no index at {path}: run `recalld sync` first")
            flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
        try:
            self.conn = apsw.Connection(str(path), flags=flags)
        except apsw.Error as exc:
            raise IndexError_(f"cannot open the index {path}: {exc}") from exc
        self.conn.set_busy_timeout(10_000)
        self.conn.enable_load_extension(True)
        self.conn.load_extension(sqlite_vec.loadable_path())
        self.conn.enable_load_extension(False)
        # apsw connections may be shared across threads, but calls are serialised by SQLite's
        # mutex; an explicit lock keeps multi-statement reads consistent.
        self.lock = threading.RLock()
        if not readonly:
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            # Deleted rows are overwritten with zeros: forgotten text leaves the file's bytes
            # (recalld.index.erase; cost measured in docs/DECISIONS.md).
            self.conn.execute("PRAGMA secure_delete = ON")
            # Migration 3 derives the ident column of existing chunks in SQL.
            self.conn.create_scalar_function("recalld_ident", _sql_ident, 1, deterministic=True)
            try:
                migrate(self.conn)
            except apsw.Error as exc:
                raise IndexError_(f"cannot prepare the index {path}: {exc}") from exc
        else:
            self.conn.execute("PRAGMA query_only = 1")
        # Searches read FTS5 and chunk pages on every query: a page cache bigger than SQLite's
        # 2 MB default keeps the hot ones in memory. The engine's readers also map the file
        # (recalld.retrieval.common_terms.tune_reader): shared, file-backed pages, not
        # anonymous memory.
        self.conn.execute("PRAGMA cache_size = -16384")

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self) -> Any:
        """A transaction context (``with store.transaction(): ...``)."""
        return self.conn

    # identity -------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        """One value of the meta table."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        """Set one value of the meta table."""
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def identity(self) -> Identity | None:
        """The identity the index was built with, or None for a new index."""
        raw = self.meta("identity")
        if raw is None:
            return None
        return Identity(**json.loads(raw))

    def set_identity(self, identity: Identity) -> None:
        """Record the identity; creates the vec0 table on the first vector space."""
        current = self.identity()
        if current and current.provider_key and not current.same_space(identity):
            raise IndexError_(
                f"the index holds vectors of {current.label} ({current.dims}-d); refusing to mix "
                f"in {identity.label} ({identity.dims}-d): run `recalld reindex`"
            )
        with self.conn:
            if identity.provider_key and not self.has_vec_table():
                self.conn.execute(
                    f"CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding float[{identity.dims}])"
                )
                self.set_meta(VECTORS_EPOCH, os.urandom(16).hex())
            self.set_meta("identity", json.dumps(asdict(identity), sort_keys=True))

    def has_vec_table(self) -> bool:
        """Whether the vec0 table exists (the index has a vector space)."""
        return self._has_table("chunks_vec")

    def _has_table(self, name: str) -> bool:
        row = self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
        return row is not None

    # files ----------------------------------------------------------------------------------

    def file(self, path: str) -> FileRow | None:
        """The row of one indexed file."""
        row = self.conn.execute(
            "SELECT path, source, size, mtime_ns, hash, lines FROM files WHERE path = ?", (path,)
        ).fetchone()
        return FileRow(*row) if row else None

    def files(self, source: str | None = None) -> dict[str, FileRow]:
        """All indexed files (of one source)."""
        sql = "SELECT path, source, size, mtime_ns, hash, lines FROM files"
        args: tuple[Any, ...] = ()
        if source:
            sql += " WHERE source = ?"
            args = (source,)
        return {r[0]: FileRow(*r) for r in self.conn.execute(sql, args)}

    def touch_file(self, path: str, size: int, mtime_ns: int) -> None:
        """Record a new size/mtime for a file whose content hash did not change."""
        self.conn.execute(
            "UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?", (size, mtime_ns, path)
        )

    def replace_file(
        self,
        row: FileRow,
        chunks: Sequence[NewChunk],
        vectors: dict[str, npt.NDArray[np.float32]] | None,
        *,
        keep_from_line: int | None = None,
        session_state: dict[str, Any] | None = None,
        rewrite_kinds: Sequence[str] | None = None,
    ) -> FileChange:
        """Write a file's chunks (and their vectors) in one transaction.

        With ``keep_from_line`` (transcripts), chunks starting before that line are kept and only
        the later ones are replaced: appending never rewrites what is already indexed; with
        ``rewrite_kinds`` too, only chunks of those kinds are (a transcript's open chunk is a
        ``message``; tool chunks are final when written). Returns
        the removed chunk ids and the added (id, vector) pairs, for the in-memory vector index.
        """
        has_vec = self.has_vec_table()
        added: list[tuple[int, npt.NDArray[np.float32]]] = []
        inserted: list[int] = []
        kept: dict[int, bool] = {}
        with self.conn:
            if keep_from_line is None:
                kept, chunks = self._unchanged(row.path, chunks)
            removed = self._delete_chunks(
                row.path, from_line=keep_from_line, has_vec=has_vec, kinds=rewrite_kinds, keep=kept
            )
            for chunk in chunks:
                self.conn.execute(
                    "INSERT INTO chunks(path, source, start_line, end_line, hash, text, context, "
                    "ident, kind, tool, embed, date) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        row.path,
                        row.source,
                        chunk.start_line,
                        chunk.end_line,
                        chunk.hash,
                        chunk.text,
                        chunk.context,
                        ident_text(chunk.text),
                        chunk.kind,
                        chunk.tool,
                        int(chunk.embed),
                        chunk.date,
                    ),
                )
                chunk_id = self.conn.last_insert_rowid()
                if chunk.tags:
                    put_tags(self.conn, chunk_id, chunk.tags)
                inserted.append(chunk_id)
                if has_vec and vectors is not None and chunk.embed and chunk.hash in vectors:
                    vec = vectors[chunk.hash]
                    self.conn.execute(
                        "INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)",
                        (chunk_id, vector_blob(vec)),
                    )
                    added.append((chunk_id, vec))
            if session_state is not None:
                self.set_session_state(row.path, session_state)
            generation = self._bump_vectors() if has_vec else None
            self.conn.execute(
                "INSERT INTO files(path, source, size, mtime_ns, hash, lines, indexed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
                "source = excluded.source, size = excluded.size, mtime_ns = excluded.mtime_ns, "
                "hash = excluded.hash, lines = excluded.lines, indexed_at = excluded.indexed_at",
                (row.path, row.source, row.size, row.mtime_ns, row.hash, row.lines, time.time()),
            )
        return FileChange(removed, added, generation, inserted, kept=sum(kept.values()))

    def _unchanged(
        self, path: str, chunks: Sequence[NewChunk]
    ) -> tuple[dict[int, bool], list[NewChunk]]:
        """Chunks stored exactly as given (lines, text, context, kind) are kept with their ids
        and vectors: a note that grows by one entry writes one chunk, not all of them again
        (fewer FTS5 delete markers and index writes). Returns the kept
        ids (with whether they take a vector) and the chunks still to write."""
        held: dict[tuple[Any, ...], list[tuple[int, bool]]] = {}
        for cid, *key in self.conn.execute(
            "SELECT id, start_line, end_line, hash, context, kind, tool, embed FROM chunks "
            "WHERE path = ?",
            (path,),
        ):
            held.setdefault((*key[:-1], bool(key[-1])), []).append((int(cid), bool(key[-1])))
        kept: dict[int, bool] = {}
        fresh: list[NewChunk] = []
        for c in chunks:
            same = held.get((c.start_line, c.end_line, c.hash, c.context, c.kind, c.tool, c.embed))
            if same:
                cid, embed = same.pop()
                kept[cid] = embed
            else:
                fresh.append(c)
        return kept, fresh

    def remove_file(self, path: str) -> FileChange:
        """Drop a file, its chunks and its transcript state."""
        has_vec = self.has_vec_table()
        with self.conn:
            removed = self._delete_chunks(path, from_line=None, has_vec=has_vec)
            self.conn.execute("DELETE FROM session_state WHERE path = ?", (path,))
            self.conn.execute("DELETE FROM files WHERE path = ?", (path,))
            generation = self._bump_vectors() if has_vec else None
        return FileChange(removed, [], generation)

    def _delete_chunks(
        self,
        path: str,
        *,
        from_line: int | None,
        has_vec: bool,
        kinds: Sequence[str] | None = None,
        keep: Collection[int] = (),
    ) -> list[int]:
        where = "path = ?"
        args: tuple[Any, ...] = (path,)
        if from_line is not None:
            where += " AND start_line >= ?"
            args = (path, from_line)
            if kinds:
                where += f" AND kind IN ({','.join('?' * len(kinds))})"
                args = (*args, *kinds)
        ids = [int(r[0]) for r in self.conn.execute(f"SELECT id FROM chunks WHERE {where}", args)]
        if keep:
            ids = [i for i in ids if i not in keep]
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                marks = ",".join("?" * len(part))
                if has_vec:
                    self.conn.execute(f"DELETE FROM chunks_vec WHERE rowid IN ({marks})", part)
                self.conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
            return ids
        if has_vec and ids:
            self.conn.execute(
                f"DELETE FROM chunks_vec WHERE rowid IN (SELECT id FROM chunks WHERE {where})", args
            )
        if ids:
            self.conn.execute(f"DELETE FROM chunks WHERE {where}", args)
        return ids

    # chunks ---------------------------------------------------------------------------------

    def chunks(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        """Chunks by id."""
        id_list = list(ids)
        out: dict[int, ChunkRow] = {}
        for start in range(0, len(id_list), 500):
            part = id_list[start : start + 500]
            marks = ",".join("?" * len(part))
            for r in self.conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE id IN ({marks})",
                part,
            ):
                out[int(r[0])] = _row(r)
        return out

    def chunk_ids(
        self,
        sources: Sequence[str] | None,
        path_prefix: str | None,
        kinds: Sequence[str] | None = None,
        facts: FactFilter | None = None,
    ) -> list[int]:
        """Ids of the chunks that pass the filters (for the vector channel's mask)."""
        where, args = _filters(sources, path_prefix, alias="", kinds=kinds, facts=facts)
        sql = "SELECT id FROM chunks" + (f" WHERE {where}" if where else "")
        return [int(r[0]) for r in self.conn.execute(sql, args)]

    def file_chunks(self, path: str) -> list[ChunkRow]:
        """Chunks of one file in line order."""
        return [
            _row(r)
            for r in self.conn.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE path = ? ORDER BY start_line",
                (path,),
            )
        ]

    def chunks_missing_vectors(self, limit: int) -> list[tuple[int, str, str]]:
        """(id, hash, text) of chunks due a vector but without one (provider down or added later).

        Chunks that get no vector by policy (``embed`` = 0) are not due, ever.
        """
        if not self.has_vec_table():
            return []
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in self.conn.execute(
                "SELECT id, hash, text FROM chunks WHERE embed = 1 "
                "AND id NOT IN (SELECT rowid FROM chunks_vec) LIMIT ?",
                (limit,),
            )
        ]

    def put_vectors(self, rows: Sequence[tuple[int, npt.NDArray[np.float32]]]) -> int:
        """Add vectors for existing chunks (one transaction); returns the vectors' generation."""
        with self.conn:
            for chunk_id, vec in rows:
                self.conn.execute(
                    "INSERT OR REPLACE INTO chunks_vec(rowid, embedding) VALUES (?, ?)",
                    (chunk_id, vector_blob(vec)),
                )
            generation = self._bump_vectors()
        return generation

    def _bump_vectors(self) -> int:
        """Count one more write of the vec0 table (in the caller's transaction).

        With ``VECTORS_EPOCH`` it names a state of the vectors: a saved copy of the matrix
        (``vector_files``) is used only when both match the index's.
        """
        row = self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, '1') ON CONFLICT(key) DO UPDATE SET "
            "value = CAST(value AS INTEGER) + 1 RETURNING value",
            (VECTORS_GENERATION,),
        ).fetchone()
        return int(row[0]) if row else 0

    def vectors_state(self) -> tuple[str, int] | None:
        """(epoch, generation) of the vectors, or None when the index has no epoch yet."""
        epoch = self.meta(VECTORS_EPOCH)
        if not epoch:
            return None
        return epoch, int(self.meta(VECTORS_GENERATION) or 0)

    def ensure_vectors_epoch(self) -> None:
        """Give an index made before epochs one (writer only; its vectors count from here)."""
        if self.has_vec_table() and not self.meta(VECTORS_EPOCH):
            with self.conn:
                self.set_meta(VECTORS_EPOCH, os.urandom(16).hex())
                self._bump_vectors()

    # keyword channel --------------------------------------------------------------------------

    def keyword_search(
        self,
        match: str,
        limit: int,
        sources: Sequence[str] | None,
        path_prefix: str | None,
        *,
        context_weight: float = 1.0,
        ident_weight: float = 1.0,
        kinds: Sequence[str] | None = None,
        facts: FactFilter | None = None,
    ) -> list[tuple[int, float]]:
        """(chunk id, bm25) best first; bm25 is negative, lower is better (FTS5's convention).

        ``context_weight`` weighs a match in the title/heading column against one in the text,
        ``ident_weight`` one in the derived identifier/CJK tokens.
        """
        where, args = _filters(sources, path_prefix, alias="c.", kinds=kinds, facts=facts)
        weights = f"1.0, {float(context_weight)!r}, {float(ident_weight)!r}"
        rank = f"bm25(chunks_fts, {weights}) AS rank"
        if where:
            sql = (
                f"SELECT c.id, {rank} FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
                f"WHERE chunks_fts MATCH ? AND {where} ORDER BY rank LIMIT ?"
            )
        else:
            # No filter, no join: looking every match up in ``chunks`` before the top-k cut
            # was 45 % of the query on the 100k chat mix. A row only FTS5 still held would be
            # dropped later, with the chunks of the answer (``Store.chunks``).
            sql = f"SELECT rowid, {rank} FROM chunks_fts WHERE chunks_fts MATCH ? "
            sql += "ORDER BY rank LIMIT ?"
        return [(int(r[0]), float(r[1])) for r in self.conn.execute(sql, (match, *args, limit))]

    # vectors ----------------------------------------------------------------------------------

    def iter_vectors(self, batch: int = 4096) -> Iterator[tuple[list[int], bytes]]:
        """All (ids, concatenated float32 blobs) in batches, for loading the in-memory matrix."""
        if not self.has_vec_table():
            return
        last = -1
        while True:
            rows: list[Any] = self.conn.execute(
                "SELECT rowid, embedding FROM chunks_vec WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            last = int(rows[-1][0])
            yield [int(r[0]) for r in rows], b"".join(r[1] for r in rows)

    def vector_scan(self) -> VectorScan | None:
        """vec0's own storage read in bulk (``with store.vector_scan() as scan``), or None.

        vec0 keeps vectors in chunks of slots (``chunks_vec_chunks``: a validity bitmap and the
        slots' rowids; ``chunks_vec_vector_chunks00``: the slots' float32 vectors, one blob). One
        SELECT per chunk reads ~1,000 vectors where ``iter_vectors`` makes a row each. None when
        the table or that layout is missing (then read ``iter_vectors``).
        """
        needed = ("chunks_vec_chunks", "chunks_vec_vector_chunks00", "chunks_vec_rowids")
        marks = ",".join("?" * len(needed))
        found = self.conn.execute(
            f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
            needed,
        ).fetchone()
        if not found or int(found[0]) != len(needed):
            return None
        return VectorScan(self)

    def vectors(self, ids: Sequence[int]) -> dict[int, bytes]:
        """Float32 blobs of some chunks."""
        if not ids or not self.has_vec_table():
            return {}
        marks = ",".join("?" * len(ids))
        return {
            int(r[0]): bytes(r[1])
            for r in self.conn.execute(
                f"SELECT rowid, embedding FROM chunks_vec WHERE rowid IN ({marks})", list(ids)
            )
        }

    # embedding cache --------------------------------------------------------------------------

    def cached(
        self, provider_key: str, model: str, dims: int, hashes: Sequence[str]
    ) -> dict[str, npt.NDArray[np.float32]]:
        """Cached vectors by text hash."""
        out: dict[str, npt.NDArray[np.float32]] = {}
        unique = list(dict.fromkeys(hashes))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            marks = ",".join("?" * len(part))
            for h, blob in self.conn.execute(
                f"SELECT text_hash, vector FROM embedding_cache WHERE provider_key = ? "
                f"AND model = ? AND dims = ? AND text_hash IN ({marks})",
                (provider_key, model, dims, *part),
            ):
                out[str(h)] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        return out

    def put_cache(
        self, provider_key: str, model: str, dims: int, items: dict[str, npt.NDArray[np.float32]]
    ) -> None:
        """Store embeddings in the cache (one transaction)."""
        now = time.time()
        with self.conn:
            for h, vec in items.items():
                self.conn.execute(
                    "INSERT OR REPLACE INTO embedding_cache"
                    "(provider_key, model, dims, text_hash, vector, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (provider_key, model, dims, h, vector_blob(vec), now),
                )

    def copy_cache_from(self, other: Path) -> int:
        """Copy another index's embedding cache into this one (before a full rebuild)."""
        # ATTACH cannot run inside a transaction, so attach first and copy in one transaction.
        self.conn.execute("ATTACH DATABASE ? AS old", (f"file:{other}?mode=ro",))
        try:
            with self.conn:
                self.conn.execute(
                    "INSERT OR IGNORE INTO embedding_cache SELECT * FROM old.embedding_cache"
                )
                copied = self.conn.changes()
        finally:
            self.conn.execute("DETACH DATABASE old")
        return copied

    # session state ----------------------------------------------------------------------------

    def session_state(self, path: str) -> dict[str, Any] | None:
        """The tail state of a transcript."""
        row = self.conn.execute(
            "SELECT format, offset, line_count, messages, last_line_hash, inode, size, skipped, "
            "state FROM session_state WHERE path = ?",
            (path,),
        ).fetchone()
        if row is None:
            return None
        keys = ("format", "offset", "line_count", "messages", "last_line_hash", "inode", "size")
        out: dict[str, Any] = dict(zip(keys, row[:7], strict=True))
        out["skipped"] = int(row[7])
        out["state"] = json.loads(row[8])
        return out

    def set_session_state(self, path: str, state: dict[str, Any]) -> None:
        """Upsert a transcript's tail state (call inside the file's transaction)."""
        self.conn.execute(
            "INSERT OR REPLACE INTO session_state(path, format, offset, line_count, messages, "
            "last_line_hash, inode, size, skipped, state) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                path,
                state["format"],
                state["offset"],
                state["line_count"],
                state["messages"],
                state["last_line_hash"],
                state["inode"],
                state["size"],
                state.get("skipped", 0),
                json.dumps(state.get("state", {})),
            ),
        )

    # counts -----------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Files, chunks, FTS rows, vector rows and cache entries, all of one snapshot (status
        derives the chunks still without a vector from them)."""

        def one(sql: str) -> int:
            row = self.conn.execute(sql).fetchone()
            return int(row[0]) if row else 0

        # Rows counted in the FTS5 and vec0 shadow tables (one row per indexed chunk): a count
        # through the virtual tables walks every row (42 and 16 ms at 100k chunks), and status
        # counts after each write, every few seconds during a first sync's back-fill.
        fts = "chunks_fts_docsize" if self._has_table("chunks_fts_docsize") else "chunks_fts"
        vec = "chunks_vec_rowids" if self._has_table("chunks_vec_rowids") else "chunks_vec"
        with self.conn:  # one read transaction: a write between two counts is in none or all
            out = {
                "files": one("SELECT count(*) FROM files"),
                "memory_files": one("SELECT count(*) FROM files WHERE source = 'memory'"),
                "session_files": one("SELECT count(*) FROM files WHERE source = 'sessions'"),
                "chunks": one("SELECT count(*) FROM chunks"),
                "fts_rows": one(f"SELECT count(*) FROM {fts}"),
                "vectors": one(f"SELECT count(*) FROM {vec}") if self.has_vec_table() else 0,
                "keyword_only_chunks": one("SELECT count(*) FROM chunks WHERE embed = 0"),
                "cached_embeddings": one("SELECT count(*) FROM embedding_cache"),
            }
        return out

    def sessions_summary(self) -> dict[str, Any]:
        """Transcripts: files, messages indexed, malformed lines skipped, formats seen."""
        row = self.conn.execute(
            "SELECT count(*), coalesce(sum(messages), 0), coalesce(sum(skipped), 0), "
            "sum(json_extract(state, '$.long_lines')) FROM session_state"
        ).fetchone()
        formats = {
            str(f): int(n)
            for f, n in self.conn.execute(
                "SELECT format, count(*) FROM session_state GROUP BY format"
            )
        }
        # Per file, the worst first: which transcript lost lines, and how many were too long.
        by_file = [
            {"path": str(p), "skipped_lines": int(n), "long_lines": int(long or 0)}
            for p, n, long in self.conn.execute(
                "SELECT path, skipped, json_extract(state, '$.long_lines') FROM session_state "
                "WHERE skipped > 0 ORDER BY skipped DESC, path LIMIT 20"
            )
        ]
        return {
            "files": int(row[0]) if row else 0,
            "messages": int(row[1]) if row else 0,
            "skipped_lines": int(row[2]) if row else 0,
            "long_lines": int(row[3] or 0) if row else 0,
            "skipped_by_file": by_file,
            "formats": formats,
        }

    def last_indexed(self) -> float | None:
        """When a file was last written to the index (survives restarts, unlike a process's)."""
        row = self.conn.execute("SELECT max(indexed_at) FROM files").fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def data_version(self) -> int:
        """Changes when another connection commits (cheap staleness check for readers)."""
        row = self.conn.execute("PRAGMA data_version").fetchone()
        return int(row[0]) if row else 0

    def integrity_ok(self) -> bool:
        """``PRAGMA integrity_check`` passes."""
        row = self.conn.execute("PRAGMA integrity_check").fetchone()
        return bool(row and row[0] == "ok")


class VectorScan:
    """One read snapshot of vec0's storage: the vector count, the vectors' state, the blocks."""

    def __init__(self, store: Store) -> None:
        self._conn = store.conn
        self._conn.execute("BEGIN")  # one snapshot for the count, the state and the blocks
        self._open = True
        try:
            row = self._conn.execute("SELECT count(*) FROM chunks_vec_rowids").fetchone()
            self.count = int(row[0]) if row else 0
            self.state = store.vectors_state()
        except BaseException:
            self.close()
            raise

    def blocks(self) -> Iterator[VectorBlock]:
        """The chunks in order; each block must be read before the next is yielded."""
        blob: Any = None
        try:
            for size, validity, rowids, row in self._conn.execute(
                "SELECT c.size, c.validity, c.rowids, v._rowid_ FROM chunks_vec_chunks c "
                "JOIN chunks_vec_vector_chunks00 v ON v.rowid = c.chunk_id ORDER BY c.chunk_id"
            ):
                # Incremental blob I/O straight into the caller's buffer: no 1.5 MB bytes object
                # per chunk.
                if blob is None:
                    blob = self._conn.blob_open(
                        "main", "chunks_vec_vector_chunks00", "vectors", row, False
                    )
                else:
                    blob.reopen(row)
                yield VectorBlock(int(size), validity, rowids, blob.length(), blob.read_into)
        finally:
            if blob is not None:
                blob.close()

    def close(self) -> None:
        """End the snapshot (always: a reader left in a transaction would never see new rows)."""
        if self._open:
            self._open = False
            self._conn.execute("COMMIT")

    def __enter__(self) -> VectorScan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _row(r: Sequence[Any]) -> ChunkRow:
    return ChunkRow(
        int(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), str(r[5]), str(r[6]),
        str(r[7]), str(r[8]), bool(r[9]),
    )  # fmt: skip


def _filters(
    sources: Sequence[str] | None,
    path_prefix: str | None,
    *,
    alias: str,
    kinds: Sequence[str] | None = None,
    facts: FactFilter | None = None,
) -> tuple[str, tuple[Any, ...]]:
    clauses: list[str] = []
    args: list[Any] = []
    if facts is not None and not facts.empty:
        clause, more = filter_sql(facts, alias)
        clauses.append(clause)
        args.extend(more)
    if kinds:
        clauses.append(f"{alias}kind IN ({','.join('?' * len(kinds))})")
        args.extend(kinds)
    if sources:
        clauses.append(f"{alias}source IN ({','.join('?' * len(sources))})")
        args.extend(sources)
    if path_prefix:
        lo, hi = prefix_bounds(path_prefix)
        clauses.append(f"{alias}path >= ? AND {alias}path < ?")
        args.extend((lo, hi))
    return " AND ".join(clauses), tuple(args)
