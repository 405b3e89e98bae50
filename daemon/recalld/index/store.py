"""The SQLite index: a thin layer over apsw (FTS5 + sqlite-vec), no sockets, no search logic.

One writer connection (the daemon's writer thread, or the CLI's in-process sync) and any number of
read-only connections. WAL mode lets readers run while a writer commits. Every multi-row change is
one transaction, so a crash never leaves a half-indexed file.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import numpy.typing as npt
import sqlite_vec

from recalld.errors import IndexError_
from recalld.index.chunk_facts import put_tags
from recalld.index.embedding_cache import EmbeddingCache
from recalld.index.ident_tokens import ident_text
from recalld.index.keyword_sql import KeywordQueries, prefix_bounds
from recalld.index.migrations import migrate
from recalld.index.rows import ChunkRow, FileChange, FileRow, Identity, NewChunk
from recalld.index.session_state import SessionStates
from recalld.index.table_counts import count_rows, table_exists
from recalld.index.unchanged_chunks import unchanged
from recalld.index.vector_scan import VectorBlock, VectorScan, has_scan_layout, vector_blob

# Re-exported: the row types, the scan and the helpers were defined here, and are imported from
# here across the daemon, the tests and the bench.
__all__ = [
    "VECTORS_EPOCH",
    "VECTORS_GENERATION",
    "ChunkRow",
    "FileChange",
    "FileRow",
    "Identity",
    "NewChunk",
    "Store",
    "VectorBlock",
    "VectorScan",
    "prefix_bounds",
    "vector_blob",
]

VECTORS_EPOCH = "vectors_epoch"  # random, new with each vec0 table (a rebuild, a new index)
VECTORS_GENERATION = "vectors_generation"  # +1 in every transaction that writes vec0


_CHUNK_COLUMNS = "id, path, source, start_line, end_line, text, context, kind, tool, embed"


def _sql_ident(*args: Any) -> str:
    """``recalld_ident(text)`` in SQL (migration 3)."""
    return ident_text(args[0]) if isinstance(args[0], str) else ""


class Store(KeywordQueries, EmbeddingCache, SessionStates):
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
        return table_exists(self.conn, name)

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
        savepoint: bool = True,
    ) -> FileChange:
        """Write a file's chunks (and their vectors) in one transaction (in a caller's, a
        savepoint; ``savepoint`` False: none, the caller undoes its whole transaction if this
        raises; FTS5 writes its pending rows out at every savepoint, ~40 % of its insert cost).

        With ``keep_from_line`` (transcripts), chunks starting before that line are kept and only
        the later ones are replaced: appending never rewrites what is already indexed; with
        ``rewrite_kinds`` too, only chunks of those kinds are (a transcript's open chunk is a
        ``message``; tool chunks are final when written). Returns the removed chunk ids and the
        added (id, vector) pairs, for the in-memory vector index."""
        has_vec = self.has_vec_table()
        kept: dict[int, bool] = {}
        held = True  # a file that held no chunk has none to delete
        removed: list[int] = []
        with self.conn if savepoint else contextlib.nullcontext():
            if keep_from_line is None:
                kept, chunks, held = unchanged(self.conn, row.path, chunks)
            if held:
                removed = self._delete_chunks(
                    row.path, from_line=keep_from_line, has_vec=has_vec, kinds=rewrite_kinds,
                    keep=kept,
                )  # fmt: skip
            inserted, added = self._write_chunks(row, chunks, vectors if has_vec else None)
            if session_state is not None:
                self.set_session_state(row.path, session_state)
            # A write of no vector leaves the generation (a first sync writes keyword-first).
            generation = self._bump_vectors(bool(removed or added)) if has_vec else None
            self._upsert_file(row)
        return FileChange(removed, added, generation, inserted, kept=sum(kept.values()))

    def _write_chunks(
        self,
        row: FileRow,
        chunks: Sequence[NewChunk],
        vectors: dict[str, npt.NDArray[np.float32]] | None,
    ) -> tuple[list[int], list[tuple[int, npt.NDArray[np.float32]]]]:
        """Insert the chunks, and the vectors of those that take one (``vectors`` is None when
        the index has no vector table). Returns every id written and the (id, vector) pairs."""
        inserted: list[int] = []
        added: list[tuple[int, npt.NDArray[np.float32]]] = []
        for chunk in chunks:
            chunk_id = self._insert_chunk(row, chunk)
            inserted.append(chunk_id)
            if vectors is not None and chunk.embed and chunk.hash in vectors:
                vec = vectors[chunk.hash]
                self.conn.execute(
                    "INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)",
                    (chunk_id, vector_blob(vec)),
                )
                added.append((chunk_id, vec))
        return inserted, added

    def _insert_chunk(self, row: FileRow, chunk: NewChunk) -> int:
        """One chunk row with its derived ident tokens, its keyword row and its tags; returns
        its id."""
        ident = chunk.ident if chunk.ident is not None else ident_text(chunk.text)
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
                ident,
                chunk.kind,
                chunk.tool,
                int(chunk.embed),
                chunk.date,
            ),
        )
        chunk_id = self.conn.last_insert_rowid()
        # Its keyword row, here rather than by a trigger (migration 8 says why).
        self.conn.execute(
            "INSERT INTO chunks_fts(rowid, text, context, ident) VALUES (?, ?, ?, ?)",
            (chunk_id, chunk.text, chunk.context, ident),
        )
        if chunk.tags:
            put_tags(self.conn, chunk_id, chunk.tags)
        return chunk_id

    def _upsert_file(self, row: FileRow) -> None:
        """The file's row, new or updated, stamped with when it was indexed."""
        self.conn.execute(
            "INSERT INTO files(path, source, size, mtime_ns, hash, lines, indexed_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
            "source = excluded.source, size = excluded.size, mtime_ns = excluded.mtime_ns, "
            "hash = excluded.hash, lines = excluded.lines, indexed_at = excluded.indexed_at",
            (row.path, row.source, row.size, row.mtime_ns, row.hash, row.lines, time.time()),
        )

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

    def _bump_vectors(self, wrote: bool = True) -> int:
        """Count one more write of the vec0 table (in the caller's transaction); the
        generation as it is when nothing was written (``wrote`` false).

        With ``VECTORS_EPOCH`` it names a state of the vectors: a saved copy of the matrix
        (``vector_files``) is used only when both match the index's.
        """
        if not wrote:
            return int(self.meta(VECTORS_GENERATION) or 0)
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
        if not has_scan_layout(self.conn):
            return None
        return VectorScan(self)

    def vectors(self, ids: Sequence[int]) -> dict[int, bytes]:
        """Float32 blobs of some chunks (one statement per 500: vec0 costs per statement)."""
        if not ids or not self.has_vec_table():
            return {}
        out: dict[int, bytes] = {}
        for start in range(0, len(ids), 500):
            part = list(ids[start : start + 500])
            marks = ",".join("?" * len(part))
            for r in self.conn.execute(
                f"SELECT rowid, embedding FROM chunks_vec WHERE rowid IN ({marks})", part
            ):
                out[int(r[0])] = bytes(r[1])
        return out

    # counts -----------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Files, chunks, FTS rows, vector rows and cache entries, all of one snapshot (status
        derives the chunks still without a vector from them)."""
        return count_rows(self.conn)

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


def _row(r: Sequence[Any]) -> ChunkRow:
    return ChunkRow(
        int(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), str(r[5]), str(r[6]),
        str(r[7]), str(r[8]), bool(r[9]),
    )  # fmt: skip
