"""Forgotten text out of the index file's bytes, not only out of its answers.

Deleting a row from SQLite normally leaves its bytes in the freed page, FTS5 records a delete as
a marker beside the old entry (the word stays in its segment until a merge), the WAL keeps every
page written since the last checkpoint, and the embedding cache keeps a vector per text hash.
So the store's writer runs with ``PRAGMA secure_delete = ON`` (freed content is zeroed, see
``Store``: the normal delete path, it costs little), and a forget ends with :func:`scrub`: the
cache entries of text no chunk holds any more, an FTS5 ``optimize`` (every segment rewritten
without the deleted entries, the old pages zeroed as they are freed), then a WAL checkpoint that
truncates it. FTS5's own ``secure-delete`` option would do the FTS part on every delete, but
costs 15 ms a row at 100k chunks (a 8,000-chunk session: 122 s, against 0.9 s plus a 1.1 s
optimize): docs/DECISIONS.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

CHECKPOINT_TRIES = 50  # a reader in the middle of a query holds the WAL for a moment
CHECKPOINT_PAUSE_S = 0.02


def chunk_hashes(conn: Any, path: str) -> set[str]:
    """The text hashes of a file's chunks (read before they are removed)."""
    return {str(r[0]) for r in conn.execute("SELECT hash FROM chunks WHERE path = ?", (path,))}


def drop_cached(conn: Any, hashes: Iterable[str]) -> int:
    """Remove the cached embeddings of these texts unless a live chunk still holds the text.

    One pass over the cache against a temporary table of the hashes: the cache's key starts
    with the provider, so a delete per hash would scan the whole cache each time."""
    wanted = [(h,) for h in set(hashes)]
    if not wanted:
        return 0
    with conn:
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS forgotten_hashes (h TEXT PRIMARY KEY)")
        conn.execute("DELETE FROM temp.forgotten_hashes")
        conn.executemany("INSERT OR IGNORE INTO temp.forgotten_hashes(h) VALUES (?)", wanted)
        conn.execute(
            "DELETE FROM embedding_cache WHERE text_hash IN (SELECT h FROM temp.forgotten_hashes "
            "WHERE NOT EXISTS (SELECT 1 FROM chunks WHERE hash = h))"
        )
        removed = int(conn.changes())
        conn.execute("DELETE FROM temp.forgotten_hashes")
    return removed


def checkpoint(conn: Any) -> bool:
    """Copy the WAL into the file and truncate it to nothing; False when readers kept it."""
    for _ in range(CHECKPOINT_TRIES):
        row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if row is None or int(row[0]) == 0:
            return True
        time.sleep(CHECKPOINT_PAUSE_S)
    return False


def optimize_fts(conn: Any) -> None:
    """Rewrite the FTS5 index without its deleted entries (their words leave the segments)."""
    with conn:
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")


def scrub(conn: Any, hashes: Iterable[str]) -> dict[str, Any]:
    """After a forget's rows are deleted: the cache entries, the FTS5 segments, then the WAL
    (writer only)."""
    cached = drop_cached(conn, hashes)
    optimize_fts(conn)
    return {"cache_entries_removed": cached, "wal_truncated": checkpoint(conn)}
