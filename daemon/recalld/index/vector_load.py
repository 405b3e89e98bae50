"""Loading the vector matrix: vec0's storage read in bulk into one preallocated matrix.

The full float32 rows live in a *scratch file*: an unlinked temporary file next to the index,
memory-mapped. Its pages are file-backed (the kernel writes them back and may evict them under
memory pressure, re-reading on demand), so a 1M x 384 matrix (1.5 GB) does not count as
anonymous memory. Being unlinked from the start, it can never be stale or outlive the process,
not even after ``kill -9``: it is rebuilt from vec0 (the source of truth) at every load, and
nothing reads it but the process that wrote it. Its blocks are reserved up front
(``posix_fallocate``), so a full disk is an error at load or growth, never a SIGBUS on a write
through the map. Where no such file can be had (a read-only folder, a full disk), the matrix is
anonymous memory and ``Rows.where`` says so.

Loading copies each vec0 chunk (~1,000 vectors) once into a reused buffer by incremental blob
I/O, and from there once into the file with ``pwrite`` (faster than faulting fresh pages of a
map one by one); the file is mapped when complete, pre-faulted.
"""

from __future__ import annotations

import logging
import mmap
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from recalld.index.store import Store, VectorScan

log = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class Rows:
    """A growable float32 matrix, file-backed (scratch file) when possible."""

    def __init__(
        self, dims: int, capacity: int, folder: Path | None, *, file: IO[bytes] | None = None
    ) -> None:
        self.dims = dims
        self._file: IO[bytes] | None = file
        self._mmap: mmap.mmap | None = None
        self._capacity = max(capacity, 1)
        self.matrix: F32 = np.empty((0, dims), dtype=np.float32)
        if folder is not None and file is None:
            self._file = _scratch_file(folder, self._capacity * dims * 4)
        if self._file is None:
            self.matrix = np.empty((self._capacity, dims), dtype=np.float32)

    @classmethod
    def create(cls, path: Path, dims: int, capacity: int) -> Rows | None:
        """A new file at ``path`` (a new inode: maps of the file it replaces stay valid)."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            handle = open(os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600), "w+b")  # noqa: SIM115
        except OSError as exc:
            log.warning("cannot create %s (%s)", tmp, exc)
            return None
        try:
            os.posix_fallocate(handle.fileno(), 0, max(capacity, 1) * dims * 4)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("no room for the vectors file %s (%s)", path, exc)
            handle.close()
            tmp.unlink(missing_ok=True)
            return None
        return cls(dims, capacity, None, file=handle)

    @classmethod
    def reopen(cls, path: Path, dims: int, capacity: int, inode: int) -> Rows:
        """The saved file at ``path``, mapped; OSError unless it is that inode and big enough."""
        handle = path.open("r+b")
        st = os.fstat(handle.fileno())
        if st.st_ino != inode or st.st_size < capacity * dims * 4:
            handle.close()
            raise OSError(f"{path} is not the file that was saved")
        rows = cls(dims, capacity, None, file=handle)
        # Not pre-faulted: searches scan the prefilter's rows and touch ~2,000 of these each,
        # so mapping 1.5 GB of page tables up front would only delay the first search.
        rows.matrix = rows._map(0)
        return rows

    def inode(self) -> int | None:
        """The file's inode number (None: in memory)."""
        return os.fstat(self._file.fileno()).st_ino if self._file is not None else None

    def flush(self) -> None:
        """Make the file's rows durable (a no-op in memory; ValueError if closed meanwhile)."""
        file, mapped = self._file, self._mmap  # a background save races a move to memory
        if file is None:
            return
        if mapped is not None:
            mapped.flush()
        os.fsync(file.fileno())

    @property
    def where(self) -> str:
        """ "scratch file" (file-backed pages) or "memory" (anonymous)."""
        return "memory" if self._file is None else "file"

    @property
    def capacity(self) -> int:
        """Rows allocated."""
        return self._capacity

    def write(self, start: int, rows: F32) -> None:
        """Put ``rows`` at row ``start`` (before ``finish``: by ``pwrite`` into the file)."""
        if self._file is None or len(self.matrix):
            self.matrix[start : start + len(rows)] = rows
            return
        data = np.ascontiguousarray(rows, dtype=np.float32).data.cast("B")
        offset = start * self.dims * 4
        while len(data):
            done = os.pwrite(self._file.fileno(), data, offset)
            data, offset = data[done:], offset + done

    def finish(self) -> None:
        """Map the file (pre-faulted) once the load wrote it."""
        if self._file is not None and not len(self.matrix):
            self.matrix = self._map(_POPULATE)

    def _map(self, flags: int) -> F32:
        assert self._file is not None
        nbytes = self._capacity * self.dims * 4
        self._mmap = mmap.mmap(self._file.fileno(), nbytes, flags=mmap.MAP_SHARED | flags)
        return np.frombuffer(self._mmap, dtype=np.float32).reshape(self._capacity, self.dims)

    def grow(self, need: int, used: int) -> None:
        """Make room for ``need`` rows, keeping the first ``used``."""
        if need <= self._capacity:
            return
        new_cap = max(need, int(self._capacity * 1.25) + 4096)
        if self._file is not None:
            try:
                os.posix_fallocate(self._file.fileno(), 0, new_cap * self.dims * 4)
            except OSError as exc:
                log.warning("vector scratch file cannot grow (%s); moving vectors to memory", exc)
                self._to_memory(used)
            else:
                # The file keeps the rows: a longer file and a new map, no copy through memory.
                self._capacity = new_cap
                if len(self.matrix):
                    self.matrix = self._map(0)
                return
        bigger = np.empty((new_cap, self.dims), dtype=np.float32)
        bigger[:used] = self.matrix[:used]
        self.matrix, self._capacity = bigger, new_cap

    def _to_memory(self, used: int) -> None:
        assert self._file is not None
        if not len(self.matrix):
            self.finish()
        anon = np.empty((self._capacity, self.dims), dtype=np.float32)
        anon[:used] = self.matrix[:used]
        self.matrix = anon
        self._file.close()
        self._file = self._mmap = None

    def close(self) -> None:
        """Drop the matrix (the scratch file's space is freed once nothing maps it)."""
        self.matrix = np.empty((0, self.dims), dtype=np.float32)
        if self._file is not None:
            self._file.close()
            self._file = self._mmap = None


def _scratch_file(folder: Path, nbytes: int) -> IO[bytes] | None:
    try:
        handle = tempfile.TemporaryFile(dir=folder, prefix=".recalld-vectors-")  # noqa: SIM115
    except OSError as exc:
        log.warning("no vector scratch file in %s (%s); keeping vectors in memory", folder, exc)
        return None
    try:
        os.posix_fallocate(handle.fileno(), 0, nbytes)
    except OSError as exc:
        log.warning(
            "no room for a %d MB vector scratch file (%s); vectors in memory", nbytes >> 20, exc
        )
        handle.close()
        return None
    return handle


def load_rows(store: Store, dims: int, folder: Path | None) -> tuple[I64, Rows, int]:
    """All vectors of ``store`` into a scratch file in ``folder``: (ids, rows, count)."""
    scan = store.vector_scan()
    if scan is None:
        return _load_row_by_row(store, dims, folder)
    with scan:
        return read_scan(scan, dims, lambda capacity: Rows(dims, capacity, folder))


def read_scan(
    scan: VectorScan, dims: int, make_rows: Callable[[int], Rows]
) -> tuple[I64, Rows, int]:
    """The scan's vectors into rows made by ``make_rows(capacity)``: (ids, rows, count)."""
    expected = scan.count
    rows = make_rows(expected + 1024)  # room for a first delta; grows by 1/4
    ids = np.empty(rows.capacity, dtype=np.int64)
    buffer = np.empty(0, dtype=np.float32)
    count = 0
    for block in scan.blocks():
        if buffer.nbytes < block.nbytes:
            buffer = np.empty(block.nbytes // 4, dtype=np.float32)
        block.read_into(buffer.data.cast("B")[: block.nbytes])
        size = block.size
        vectors = buffer[: size * dims].reshape(size, dims)
        rowids = np.frombuffer(block.rowids, dtype="<i8")[:size]
        valid = np.unpackbits(np.frombuffer(block.validity, dtype=np.uint8), bitorder="little")
        valid = valid[:size].astype(bool)
        if not valid.all():
            vectors, rowids = vectors[valid], rowids[valid]
        n = len(rowids)
        if count + n > rows.capacity:  # the count and the blocks disagree: never trust it
            rows.grow(count + n, count)
            ids = _grown(ids, rows.capacity, count)
        ids[count : count + n] = rowids
        rows.write(count, vectors)
        count += n
    rows.finish()
    if count != expected:
        log.warning("vec0 counted %d vectors, its storage held %d", expected, count)
    return ids, rows, count


def _grown(ids: I64, capacity: int, used: int) -> I64:
    out = np.empty(capacity, dtype=np.int64)
    out[:used] = ids[:used]
    return out


def _load_row_by_row(store: Store, dims: int, folder: Path | None) -> tuple[I64, Rows, int]:
    """The portable path (any vec0 layout): ``SELECT rowid, embedding`` in batches."""
    rows = Rows(dims, 4096, folder)
    ids = np.empty(rows.capacity, dtype=np.int64)
    count = 0
    for part_ids, blob in store.iter_vectors():
        n = len(part_ids)
        if count + n > rows.capacity:
            rows.grow(count + n, count)
            ids = _grown(ids, rows.capacity, count)
        ids[count : count + n] = part_ids
        rows.write(count, np.frombuffer(blob, dtype="<f4").reshape(n, dims))
        count += n
    rows.finish()
    return ids, rows, count
