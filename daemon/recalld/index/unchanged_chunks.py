"""Which of a file's new chunks are stored already (kept with their ids and vectors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from recalld.index.rows import NewChunk


def unchanged(
    conn: apsw.Connection, path: str, chunks: Sequence[NewChunk]
) -> tuple[dict[int, bool], list[NewChunk], bool]:
    """Chunks stored exactly as given (lines, text, context, kind) are kept with their ids
    and vectors: a note that grows by one entry writes one chunk, not all of them again
    (fewer FTS5 delete markers and index writes). Returns the kept ids (with whether they take
    a vector), the chunks still to write, and whether the file held any chunk (a new file has
    nothing to delete)."""
    held: dict[tuple[Any, ...], list[tuple[int, bool]]] = {}
    for cid, *key in conn.execute(
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
    return kept, fresh, bool(held)
