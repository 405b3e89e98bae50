"""The saved matrix: ``<index>.vectors/`` beside the index, reused at start when it matches.

vec0 stays the source of truth; these files only spare the next start the bulk read, the file
write and the PCA projection (1M vectors: tens of seconds on a busy machine, well under one to
map). Files: ``rows.f32`` (the full float32 rows, the live matrix while the daemon runs),
``low.u8`` (the prefilter's projected rows in int8, biased to uint8, one row per vector: the
scan's layout, ``int8_scan``), ``scale.f32`` (their scale per dimension), ``ids.i64``,
``proj.f32`` and ``meta.json``. Format 3 held those rows transposed in ``low.i8`` (one projected
dimension after another): they are converted at load (1M rows: well under a second, against
~25 s to read vec0 again) and saved in format 4 in the background.

``meta.json`` is the only thing that vouches for the rest, and only for one state of the index:
its vectors epoch (new with each vec0 table: a rebuild, a new index) and generation (+1 in every
transaction that writes vec0, in that transaction). It is written last, atomically (temporary
file, fsync, rename), once the other files are durable, and only when the matrix mirrors exactly
that generation (every change applied in order, none missed, see ``VectorIndex.apply``): right
after a load from vec0 (in the background) and at a clean close. It stays while the matrix is
only read, and is removed durably *before* the first row changes (``rows.f32`` is the live
matrix). So a daemon stopped before its first change, even one that exits without closing,
leaves a matrix the next start maps. And:

- ``kill -9`` or a power cut after a change: no ``meta.json``, the next start reads vec0 again;
  during a save: each file is replaced by rename, ``meta.json`` last, so the folder holds a
  vouched matrix or none.
- Another process wrote vectors since: the generation differs, vec0 is read again.
- A rebuild swapped the index: the epoch differs; its new files replace these by rename, and a
  matrix still mapping the old ones keeps them (a file renamed over stays valid for its maps).
- Files replaced or damaged behind our back: the inode numbers, sizes and magic must match.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.index.index_files import fsync_dir, test_phase, writer_alive
from recalld.index.int8_scan import biased
from recalld.index.vector_load import Rows

log = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
#: 2: low.f32 transposed (vec0 is read again); 3: low.i8 transposed, int8 (converted at load);
#: 4: low.u8, one biased row per vector (issue 40)
FORMAT = 4
_READABLE = (3, FORMAT)
_OBSOLETE = ("low.f32", "low.i8")  # the prefilter rows of formats 2 and 3
_PREFILTER_FILES = ("low.u8", "scale.f32", "proj.f32")
U8 = npt.NDArray[np.uint8]
_CONVERT_BLOCK = 65_536  # format 3's rows transposed per step: bounded temporaries


@dataclass
class Saved:
    """A matrix as saved: what ``VectorIndex`` needs to serve again at once."""

    ids: I64
    count: int
    rows: Rows
    low: U8 | None  # (capacity, rdims): the prefilter's layout (vector_index)
    scale: F32 | None  # (rdims,)
    proj: F32 | None
    fitted_rows: int
    generation: int
    format: int  # as saved (below ``FORMAT``: the next save writes the files again)


class VectorFiles:
    """The folder of one index's saved matrix."""

    def __init__(self, index_path: Path) -> None:
        self.folder = index_path.with_name(index_path.name + ".vectors")
        self._meta = self.folder / "meta.json"

    def open_saved(self, state: tuple[str, int] | None, dims: int) -> Saved | None:
        """The saved matrix if it is exactly the index's vectors in ``state``, else None.

        ``meta.json`` stays: the caller removes it (``unvouch``) before it changes a row.
        """
        if state is None:
            return None
        try:
            meta = json.loads(self._meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        wanted = {"epoch": state[0], "generation": state[1], "dims": dims}
        if meta.get("format") not in _READABLE or any(meta.get(k) != v for k, v in wanted.items()):
            log.info("saved vectors are of another index state or format; reading the index")
            return None
        try:
            return self._read(meta, dims)
        except (OSError, ValueError, KeyError) as exc:
            log.warning("saved vectors unusable (%s); reading the index", exc)
            return None

    def _read(self, meta: dict[str, object], dims: int) -> Saved:
        count, capacity = int(str(meta["count"])), int(str(meta["capacity"]))
        rdims, fitted = int(str(meta["rdims"])), int(str(meta["fitted_rows"]))
        if not 0 <= count <= capacity:
            raise ValueError(f"count {count} of capacity {capacity}")
        rows = Rows.reopen(self.folder / "rows.f32", dims, capacity, int(str(meta["rows_inode"])))
        ids = np.empty(capacity, dtype=np.int64)
        _read_into(self.folder / "ids.i64", ids[:count])
        low = scale = proj = None
        if rdims:
            proj = np.empty((dims, rdims), dtype=np.float32)
            _read_into(self.folder / "proj.f32", proj)
            scale = np.empty(rdims, dtype=np.float32)
            _read_into(self.folder / "scale.f32", scale)
            low = np.empty((capacity, rdims), dtype=np.uint8)
            if meta["format"] == FORMAT:
                _read_into(self.folder / "low.u8", low[:count])
            else:
                _read_transposed(self.folder / "low.i8", low[:count])
        generation, fmt = int(str(meta["generation"])), int(str(meta["format"]))
        return Saved(ids, count, rows, low, scale, proj, fitted, generation, fmt)

    def new_rows(self, dims: int, capacity: int) -> Rows | None:
        """A fresh ``rows.f32`` for a matrix read from vec0 (None: no room, use a scratch file)."""
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)  # vectors are derived from notes
            self.unvouch()
            self._remove_leftovers()
        except OSError as exc:
            log.warning("no vectors folder %s (%s)", self.folder, exc)
            return None
        return Rows.create(self.folder / "rows.f32", dims, capacity)

    def write_parts(
        self,
        rows: Rows,
        ids: I64,
        count: int,
        low: U8 | None,
        scale: F32,
        proj: F32 | None,
    ) -> bool:
        """Make everything but ``meta.json`` durable: rows flushed, the rest written by rename.

        False when the rows are not the folder's any more (replaced by a rebuild) or a write
        failed. Nothing is vouched for until ``vouch``.
        """
        inode = rows.inode()
        try:
            if inode is None or os.stat(self.folder / "rows.f32").st_ino != inode:
                return False  # our rows are not the folder's any more (replaced by a rebuild)
            rows.flush()
            _write_array(self.folder / "ids.i64", ids[:count])
            test_phase("vectors-saving")  # tests: a kill -9 in the middle of a save
            if low is not None and proj is not None:
                _write_array(self.folder / "low.u8", low[:count])
                _write_array(self.folder / "scale.f32", scale)
                _write_array(self.folder / "proj.f32", proj)
        except (OSError, ValueError) as exc:  # ValueError: the rows moved to memory meanwhile
            log.warning("could not save the vectors for the next start (%s)", exc)
            return False
        return True

    def vouch(
        self, rows: Rows, count: int, rdims: int, fitted_rows: int, state: tuple[str, int]
    ) -> bool:
        """Write ``meta.json`` for the files ``write_parts`` made durable (matrix of ``state``)."""
        inode = rows.inode()
        meta = {
            "format": FORMAT,
            "epoch": state[0],
            "generation": state[1],
            "dims": rows.dims,
            "rdims": rdims,
            "count": count,
            "capacity": rows.capacity,
            "fitted_rows": fitted_rows,
            "rows_inode": inode,
        }
        tmp = self._meta.with_name(f".meta.{os.getpid()}.tmp")
        try:
            if inode is None or os.stat(self.folder / "rows.f32").st_ino != inode:
                return False
            with _private(tmp, "w") as fh:
                json.dump(meta, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self._meta)
            fsync_dir(self.folder)
        except OSError as exc:
            log.warning("could not save the vectors for the next start (%s)", exc)
            return False
        self._remove_unused(prefilter=rdims > 0)
        return True

    def _remove_unused(self, *, prefilter: bool) -> None:
        """Files the saved matrix does not use: an older format's (``low.f32``: 512 MB at 1M
        vectors) and, without a prefilter, the prefilter's of an earlier save. Only once
        meta.json vouches for the files that are used."""
        unused = list(_OBSOLETE) + ([] if prefilter else list(_PREFILTER_FILES))
        for name in unused:
            try:
                (self.folder / name).unlink(missing_ok=True)
            except OSError as exc:  # space that stays taken; the matrix itself is saved
                log.warning("could not remove the unused %s (%s)", self.folder / name, exc)

    def _remove_leftovers(self) -> None:
        """Temporary files of a process that died while writing them (``.<name>.<pid>.tmp``)."""
        for leftover in self.folder.glob(".*.tmp"):
            pid = leftover.name.rsplit(".", 2)[-2]
            if pid.isdigit() and int(pid) != os.getpid() and not writer_alive(int(pid), leftover):
                leftover.unlink(missing_ok=True)

    def unvouch(self) -> None:
        """Remove meta.json durably (before the files are changed or replaced)."""
        if self._meta.exists():
            self._meta.unlink()
            fsync_dir(self.folder)


def _private(path: Path, mode: str) -> Any:
    """``open(path, mode)`` for writing, readable by the owner only (0600)."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), mode)


def _read_into(path: Path, out: npt.NDArray[Any]) -> None:
    """Fill ``out`` (contiguous) from the file, straight into its memory; it must be as long."""
    view = out.data.cast("B")
    with path.open("rb") as fh:
        got = fh.readinto(view)
        if got != len(view) or fh.read(1):
            raise ValueError(f"{path.name} is not {len(view)} bytes long")


def _read_transposed(path: Path, out: U8) -> None:
    """Fill ``out`` (count x rdims, biased) from format 3's ``low.i8`` (rdims x count, int8)."""
    count, rdims = out.shape
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size != out.size:
            raise ValueError(f"{path.name} is {size} bytes, not {out.size}")
        if not size:
            return
        with mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            old = np.frombuffer(mapped, dtype=np.int8).reshape(rdims, count)
            for start in range(0, count, _CONVERT_BLOCK):
                stop = min(count, start + _CONVERT_BLOCK)
                out[start:stop] = biased(old[:, start:stop].T)
            del old  # the map closes only once no array views it


def _write_array(path: Path, values: npt.NDArray[np.generic]) -> None:
    """Write ``values`` in C order (a strided view row by row: no contiguous copy of it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with _private(tmp, "wb") as fh:
        if values.flags.c_contiguous:
            values.tofile(fh)
        else:
            for row in values if values.ndim > 1 else [values]:
                np.ascontiguousarray(row).tofile(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
