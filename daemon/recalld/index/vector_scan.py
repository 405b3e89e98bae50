"""vec0's own storage, read in bulk: the blocks of slots, their rowids, and the float32 blob layout.

vec0 keeps vectors in chunks of slots (``chunks_vec_chunks``: a validity bitmap and the slots'
rowids; ``chunks_vec_vector_chunks00``: the slots' float32 vectors, one blob). One SELECT per chunk
reads ~1,000 vectors where a row-by-row read makes a row each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import apsw
import numpy as np
import numpy.typing as npt

_LAYOUT = ("chunks_vec_chunks", "chunks_vec_vector_chunks00", "chunks_vec_rowids")


class _Snapshotted(Protocol):
    """What a scan needs of the store (the store itself; no import of it, no loop)."""

    conn: apsw.Connection

    def vectors_state(self) -> tuple[str, int] | None: ...


def vector_blob(vec: npt.NDArray[np.float32]) -> bytes:
    """A float32 vector as the little-endian blob that sqlite-vec stores."""
    return np.asarray(vec, dtype="<f4").tobytes()


def has_scan_layout(conn: apsw.Connection) -> bool:
    """Whether the vec0 table and the storage layout a scan reads are all there."""
    marks = ",".join("?" * len(_LAYOUT))
    found = conn.execute(
        f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
        _LAYOUT,
    ).fetchone()
    return found is not None and int(found[0]) == len(_LAYOUT)


@dataclass(frozen=True)
class VectorBlock:
    """One vec0 storage chunk: ``size`` slots, a validity bitmap, int64 rowids, float32 rows."""

    size: int
    validity: bytes
    rowids: bytes
    nbytes: int  # of the float32 rows blob
    read_into: Callable[[Any], None]  # copies the rows blob into a writable buffer


class VectorScan:
    """One read snapshot of vec0's storage: the vector count, the vectors' state, the blocks."""

    def __init__(self, store: _Snapshotted) -> None:
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
