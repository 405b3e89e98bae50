"""The index's row counts in one read snapshot: files, chunks, FTS5 and vec0 rows, cache entries.

Cached between writes by :mod:`recalld.index.row_counts`; status derives from them the chunks still
without a vector.
"""

from __future__ import annotations

import apsw

from recalld.index.rows import PROVISIONAL


def table_exists(conn: apsw.Connection, name: str) -> bool:
    """Whether a table (or virtual table) of that name exists."""
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return row is not None


def count_rows(conn: apsw.Connection) -> dict[str, int]:
    """Files, chunks, FTS rows, vector rows and cache entries, all of one snapshot."""

    def one(sql: str) -> int:
        row = conn.execute(sql).fetchone()
        return int(row[0]) if row else 0

    # Rows counted in the FTS5 and vec0 shadow tables (one row per indexed chunk): a count
    # through the virtual tables walks every row (42 and 16 ms at 100k chunks), and status
    # counts after each write, every few seconds during a first sync's back-fill.
    fts = "chunks_fts_docsize" if table_exists(conn, "chunks_fts_docsize") else "chunks_fts"
    vec = "chunks_vec_rowids" if table_exists(conn, "chunks_vec_rowids") else "chunks_vec"
    with conn:  # one read transaction: a write between two counts is in none or all
        out = {
            **_file_counts(conn),
            "chunks": one("SELECT count(*) FROM chunks"),
            "fts_rows": one(f"SELECT count(*) FROM {fts}"),
            "vectors": one(f"SELECT count(*) FROM {vec}")
            if table_exists(conn, "chunks_vec")
            else 0,
            "keyword_only_chunks": one("SELECT count(*) FROM chunks WHERE embed = 0"),
            "cached_embeddings": one("SELECT count(*) FROM embedding_cache"),
        }
    return out


def _file_counts(conn: apsw.Connection) -> dict[str, int]:
    """The files by source, and the notes held as one keyword row until they are chunked
    (``FileRow.provisional``, recalld.ingest.first_pass), in one scan of the table."""
    source, digest, mtime_ns = PROVISIONAL
    row = conn.execute(
        "SELECT count(*), coalesce(sum(source = 'memory'), 0), "
        "coalesce(sum(source = 'sessions'), 0), "
        "coalesce(sum(source = ? AND hash = ? AND mtime_ns = ?), 0) FROM files",
        (source, digest, mtime_ns),
    ).fetchone()
    files, memory, sessions, provisional = (int(v) for v in row) if row else (0, 0, 0, 0)
    return {
        "files": files,
        "memory_files": memory,
        "session_files": sessions,
        "provisional_files": provisional,
    }


def provisional_files(conn: apsw.Connection) -> int:
    """How many notes are held as one keyword row until they are chunked."""
    row = conn.execute(
        "SELECT count(*) FROM files WHERE source = ? AND hash = ? AND mtime_ns = ?", PROVISIONAL
    ).fetchone()
    return int(row[0]) if row else 0
