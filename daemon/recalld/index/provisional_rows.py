"""A big first sync's provisional rows, a batch of notes a statement (recalld.ingest.first_pass).

Each statement takes the whole batch as one JSON parameter, so SQLite writes the batch's rows and
their keyword rows in one call that lets go of the GIL, while the notes of the next batch are
read and redacted on another thread. Row by row (``Store.replace_file``), the writing thread
takes the GIL back after every row and, with a busy thread beside it, waits for it each time:
the pass ran slower on two threads than on one (1.5 s against 1.3 s for the bench's 10k notes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from recalld.index.rows import FileChange, FileRow, NewChunk
from recalld.index.store import VECTORS_GENERATION, Store

__all__ = ["insert_provisional"]

# A note the files table already holds (written since the sync listed it) is left to the
# chunked pass: this insert never replaces a row, so it never needs to delete one.
_CHUNKS = (
    "INSERT INTO chunks(path, source, start_line, end_line, hash, text, context, ident, kind, "
    "tool, embed, date) SELECT n.value->>0, n.value->>1, n.value->>2, n.value->>3, n.value->>4, "
    "n.value->>5, n.value->>6, n.value->>7, n.value->>8, n.value->>9, n.value->>10, "
    "n.value->>11 FROM json_each(?) AS n "
    "WHERE NOT EXISTS (SELECT 1 FROM files WHERE files.path = n.value->>0) ORDER BY n.key"
)
# The keyword rows of the chunks just written (written here, not by a trigger: migration 8).
_KEYWORDS = (
    "INSERT INTO chunks_fts(rowid, text, context, ident) "
    "SELECT id, text, context, ident FROM chunks WHERE id > ?"
)
_FILES = (
    "INSERT INTO files(path, source, size, mtime_ns, hash, lines, indexed_at) "
    "SELECT n.value->>0, n.value->>1, n.value->>2, n.value->>3, n.value->>4, n.value->>5, ? "
    "FROM json_each(?) AS n WHERE true ON CONFLICT(path) DO NOTHING"
)


def insert_provisional(
    store: Store, notes: Sequence[tuple[FileRow, NewChunk]]
) -> tuple[FileChange, set[str]]:
    """Write each note's file row and its one chunk, with no vector and no tags, in one
    transaction. Returns the change (every chunk id inserted) and the paths written: those
    the files table did not hold yet."""
    chunks = json.dumps([_chunk(row, chunk) for row, chunk in notes])
    files = json.dumps([_file(row) for row, _ in notes])
    with store.transaction():
        last = store.conn.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()
        before = int(last[0]) if last else 0
        store.conn.execute(_CHUNKS, (chunks,))
        store.conn.execute(_KEYWORDS, (before,))
        written = store.conn.execute("SELECT id, path FROM chunks WHERE id > ?", (before,))
        ids, paths = [], set()
        for chunk_id, path in written:
            ids.append(int(chunk_id))
            paths.add(str(path))
        store.conn.execute(_FILES, (time.time(), files))
        # No vector was written: the vectors' generation stays what it is (Store.replace_file)
        generation = int(store.meta(VECTORS_GENERATION) or 0) if store.has_vec_table() else None
    return FileChange([], [], generation, ids), paths


def _chunk(row: FileRow, chunk: NewChunk) -> list[object]:
    return [
        row.path, row.source, chunk.start_line, chunk.end_line, chunk.hash, chunk.text,
        chunk.context, chunk.ident or "", chunk.kind, chunk.tool, int(chunk.embed), chunk.date,
    ]  # fmt: skip


def _file(row: FileRow) -> list[object]:
    return [row.path, row.source, row.size, row.mtime_ns, row.hash, row.lines]
