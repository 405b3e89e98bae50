"""Loading the vector matrix: vec0's storage read in bulk into one preallocated matrix.

The full float32 rows live in a *scratch file*: an unlinked temporary file next to the index,
memory-mapped. Its pages are file-backed (the kernel writes them back and may evict them under
memory pressure, re-reading on demand), so a 1M x 384 matrix (1.5 GB) does not count as
anonymous memory. Being unlinked from the start, it can never be stale or outlive the process,
not even after ``kill -9``: it is rebuilt from vec0 (the source of truth) at every load, and
nothing reads it but the process that wrote it. Where no such file can be made (a read-only
folder, a full disk), the matrix is anonymous memory and ``Rows.where`` says so.
"""

from __future__ import annotations

import logging
import mmap
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from recalld.store import Store, VectorBlock

log = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


class Rows:
    """A growable float32 matrix, file-backed (scratch file) when possible."""

    def __init__(self, dims: int, capacity: int, folder: Path | None) -> None:
        self.dims = dims
        self._file = _scratch_file(folder) if folder is not None else None
        self.where = "memory" if self._file is None else "scratch file"
        self.matrix: F32 = self._allocate(max(capacity, 1))

    @property
    def capacity(self) -> int:
        """Rows allocated."""
        return int(self.matrix.shape[0])

    def _allocate(self, rows: int) -> F32:
        nbytes = rows * self.dims * 4
        if self._file is not None:
            try:
                os.ftruncate(self._file.fileno(), nbytes)
                mapped = mmap.mmap(self._file.fileno(), nbytes)
                return np.frombuffer(mapped, dtype=np.float32).reshape(rows, self.dims)
            except (OSError, ValueError) as exc:
                log.warning("vector scratch file unusable (%s); keeping vectors in memory", exc)
                self._file.close()
                self._file = None
                self.where = "memory"
        return np.empty((rows, self.dims), dtype=np.float32)

    def grow(self, need: int, used: int) -> None:
        """Make room for ``need`` rows, keeping the first ``used``."""
        if need <= self.capacity:
            return
        new_cap = max(need, int(self.capacity * 1.25) + 4096)
        if self._file is not None:
            # The file keeps the rows: a bigger file and a new map, no copy through memory.
            self.matrix = self._allocate(new_cap)
            if self._file is not None:
                return
        bigger = np.empty((new_cap, self.dims), dtype=np.float32)
        bigger[:used] = self.matrix[:used]
        self.matrix = bigger

    def close(self) -> None:
        """Drop the matrix (the scratch file's space is freed once nothing maps it)."""
        self.matrix = np.empty((0, self.dims), dtype=np.float32)
        if self._file is not None:
            self._file.close()
            self._file = None


def _scratch_file(folder: Path) -> tempfile._TemporaryFileWrapper[bytes] | None:
    try:
        return tempfile.TemporaryFile(dir=folder, prefix=".recalld-vectors-")  # type: ignore[return-value]
    except OSError as exc:
        log.warning("no vector scratch file in %s (%s); keeping vectors in memory", folder, exc)
        return None


def load_rows(store: Store, dims: int, folder: Path | None) -> tuple[I64, Rows, int]:
    """All vectors of ``store``: (ids, rows, count), ids in the matrix's row order."""
    bulk = store.vector_blocks()
    if bulk is None:
        return _load_row_by_row(store, dims, folder)
    expected, blocks = bulk
    rows = Rows(dims, expected + 1024, folder)  # room for a first delta; grows by 1/4
    ids = np.empty(rows.capacity, dtype=np.int64)
    count = 0
    for block in blocks:
        got_ids, got_vecs = _unpack(block, dims)
        n = len(got_ids)
        if count + n > rows.capacity:  # the count and the blocks disagree: never trust it
            rows.grow(count + n, count)
            ids = _grown(ids, rows.capacity, count)
        ids[count : count + n] = got_ids
        rows.matrix[count : count + n] = got_vecs
        count += n
    if count != expected:
        log.warning("vec0 counted %d vectors, its storage held %d", expected, count)
    return ids, rows, count


def _unpack(block: VectorBlock, dims: int) -> tuple[I64, F32]:
    """The valid slots of one vec0 chunk (views into its blobs, no copies but the mask)."""
    size = block.size
    valid = np.unpackbits(np.frombuffer(block.validity, dtype=np.uint8), bitorder="little")
    valid = valid[:size].astype(bool)
    rowids = np.frombuffer(block.rowids, dtype="<i8")[:size]
    vectors = np.frombuffer(block.vectors, dtype="<f4")[: size * dims].reshape(size, dims)
    if valid.all():
        return rowids, vectors
    return rowids[valid], vectors[valid]


def _grown(ids: I64, capacity: int, used: int) -> I64:
    out = np.empty(capacity, dtype=np.int64)
    out[:used] = ids[:used]
    return out


def _load_row_by_row(store: Store, dims: int, folder: Path | None) -> tuple[I64, Rows, int]:
    """The portable path (any vec0 layout): ``SELECT rowid, embedding`` in batches."""
    rows = Rows(dims, 4096, folder)
    ids = np.empty(rows.capacity, dtype=np.int64)
    count = 0
    for part_ids, blob in _batches(store):
        n = len(part_ids)
        if count + n > rows.capacity:
            rows.grow(count + n, count)
            ids = _grown(ids, rows.capacity, count)
        ids[count : count + n] = part_ids
        rows.matrix[count : count + n] = np.frombuffer(blob, dtype="<f4").reshape(n, dims)
        count += n
    return ids, rows, count


def _batches(store: Store) -> Iterator[tuple[list[int], bytes]]:
    yield from store.iter_vectors()
