"""The in-memory vector matrix: cosine search with numpy, SQLite stays the source of truth.

sqlite-vec's brute-force scan costs ~57 ms at 100k x 384 on this class of machine, a BLAS
matrix-vector product ~8 ms. So the daemon keeps one float32 matrix (rows = chunks with a vector)
loaded from the vec0 table at start and updated by the writer after each commit. Filters
(sources, path prefix) are applied as a mask before the top-k selection, never after truncation.

The scan is memory-bound (4 bytes x 384 dims per row). From ``PREFILTER_MIN_ROWS`` rows on, a
PCA projection to ``PREFILTER_DIMS`` dims (fitted on a sample of the index itself) is scanned
first, and the best ``PREFILTER_CANDIDATES`` are rescored exactly against the full vectors: a
third of the memory traffic, and the final ranking is exact among the candidates (recall of the
true top 10 >= 0.99 on real embeddings, measured by ``make bench``). The projected rows are held
in int8 (stored biased as uint8, one row per vector: ``capacity x _rdims``), one scale per
projected dimension (``int8_scan``): a twelfth of the full rows' memory traffic, scanned by
onnxruntime's integer product with the rows as its left operand, and the same top 10 after the
exact rescoring.

Loading reads vec0's storage in bulk into one preallocated matrix (``vector_load``), file-backed
by an unlinked scratch file. Searches scan under the shared side of a readers-writer lock (numpy
releases the GIL in BLAS, so N searches scan at once); the writer's deltas take the exclusive side
for the few microseconds of a row update.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt

from recalld.cpus import usable_cores
from recalld.index.int8_scan import ROW_BIAS, Int8Scan, quantize_query, quantize_rows, scales_for
from recalld.index.rescoring import GatherBuffers, largest
from recalld.index.rwlock import ReadWriteLock
from recalld.index.store import Store
from recalld.index.vector_files import FORMAT, VectorFiles
from recalld.index.vector_load import Rows, load_rows, read_scan

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
#: A fitted prefilter: (projection, projected rows (int8, biased), their scales, rows fitted on).
Fitted = tuple[F32, U8, F32, int]
_SCAN = Int8Scan()  # one session for every index of the process (thread-safe)
_GATHER = GatherBuffers()  # the rescored rows' buffers, kept for every index of the process


PREFILTER_MIN_ROWS = 20_000
PREFILTER_DIMS = 128
PREFILTER_CANDIDATES = 2_000
PCA_SAMPLE = 5_000
CANDIDATE_SHARE = 125  # rescored exactly: at least 1 row in this many
PROJECT_BLOCK = 65_536  # rows projected per matmul: bounded temporaries while fitting


class VectorIndex:
    """Rows of unit vectors with chunk ids; top-k by dot product."""

    def __init__(
        self,
        dims: int,
        *,
        prefilter_min_rows: int = PREFILTER_MIN_ROWS,
        rows: Rows | None = None,
        ids: I64 | None = None,
        count: int = 0,
        fitted: Fitted | None = None,
    ) -> None:
        self.dims = dims
        self._lock = ReadWriteLock()
        self._rows = rows if rows is not None else Rows(dims, 0, None)
        self._ids = ids if ids is not None else np.empty(self._rows.capacity, dtype=np.int64)
        self._count = count
        self._row_of = np.full(0, -1, dtype=np.int32)  # chunk id -> row, -1: none
        self._index_rows(0, count)
        self.prefilter_min_rows = prefilter_min_rows
        self._rdims = min(PREFILTER_DIMS, max(dims // 3, 1))
        self._proj: F32 | None = None  # (dims, _rdims)
        # (capacity, _rdims): int8 with one scale per projected dimension, stored biased as
        # uint8 (int8_scan.quantize_rows), one row per vector: the scan's left operand
        self._low: U8 = np.empty((0, self._rdims), dtype=np.uint8)
        self._scale: F32 = np.ones(self._rdims, dtype=np.float32)
        self._fitted_rows = 0
        if fitted is not None:  # a saved prefilter
            self._proj, self._low, self._scale, self._fitted_rows = fitted
        self._maybe_fit()
        self.loaded_from = "index"  # or "saved files"
        # The saved copy (vector_files): which index state this matrix mirrors, None: unknown;
        # the state its meta.json vouches for (None: none); changes applied (a save checks it).
        self._files: VectorFiles | None = None
        self._state: tuple[str, int] | None = None
        self._vouched: tuple[str, int] | None = None
        self._older_format = False  # vouched files of an older format: a save writes them anew
        self._changes = 0
        self._save_lock = threading.Lock()  # one save at a time

    def __len__(self) -> int:
        return self._count

    @property
    def storage(self) -> str:
        """Where the full rows live: "file" (file-backed) or "memory"."""
        return self._rows.where

    @classmethod
    def load(
        cls,
        store: Store,
        dims: int,
        *,
        folder: Path | None = None,
        files: VectorFiles | None = None,
    ) -> VectorIndex:
        """The matrix of the store's vec0 table: the saved one of ``files`` when it matches,
        else read in bulk (into ``files``' rows file, or a scratch file in ``folder``)."""
        scan = store.vector_scan()
        if scan is None:
            ids, rows, count = load_rows(store, dims, folder)
            return cls(dims, rows=rows, ids=ids, count=count, prefilter_min_rows=PREFILTER_MIN_ROWS)
        with scan:
            saved = files.open_saved(scan.state, dims) if files is not None else None
            if saved is not None:
                fitted = None
                if saved.proj is not None and saved.low is not None and saved.scale is not None:
                    fitted = (saved.proj, saved.low, saved.scale, saved.fitted_rows)
                index = cls(
                    dims,
                    rows=saved.rows,
                    ids=saved.ids,
                    count=saved.count,
                    fitted=fitted,
                    prefilter_min_rows=PREFILTER_MIN_ROWS,
                )
                index.loaded_from = "saved files"
                index._vouched = scan.state
                index._older_format = saved.format != FORMAT
            else:

                def make(capacity: int) -> Rows:
                    made = files.new_rows(dims, capacity) if files is not None else None
                    return made if made is not None else Rows(dims, capacity, folder)

                ids, rows, count = read_scan(scan, dims, make)
                index = cls(
                    dims, rows=rows, ids=ids, count=count, prefilter_min_rows=PREFILTER_MIN_ROWS
                )
        index._files, index._state = files, scan.state
        return index

    def close(self, *, save: bool = False) -> None:
        """Free the matrix (searches after this find nothing); ``save``: for the next start."""
        if save:
            self.save()
        with self._lock.exclusive():
            self._files = self._state = None
            self._count = 0
            self._rows.close()
            self._low = np.empty((0, self._rdims), dtype=np.uint8)

    @property
    def unsaved(self) -> bool:
        """Whether a ``save`` would write files: read from vec0, or saved in an older format."""
        return self._files is not None and (self._vouched != self._state or self._older_format)

    def save(self) -> bool:
        """Vouch for the matrix in its files (True: they hold it now), for the next start.

        The files are written without the lock, so searches and deltas go on (a waiting delta
        would hold off searches); meta.json is written only if no change came meanwhile.
        """
        with self._save_lock:
            with self._lock.shared():
                files, state, changes = self._files, self._state, self._changes
                if files is None or state is None:
                    return False
                if self._vouched == state and not self._older_format:
                    return True
                proj, low = self._proj, self._low if self._proj is not None else None
                parts = (self._rows, self._ids, self._count, low, self._scale, proj)
                fitted = self._fitted_rows
            if not files.write_parts(*parts):
                return False
            with self._lock.exclusive():
                state = self._state  # a newer generation without row changes: the same rows
                if self._changes != changes or self._files is None or state is None:
                    return False  # rows changed while written: the next save vouches
                rdims = int(proj.shape[1]) if proj is not None else 0
                if not files.vouch(self._rows, self._count, rdims, fitted, state):
                    return False
                self._vouched, self._older_format = state, False
                return True

    def _unvouch(self) -> None:
        """Before the first row changes: the saved files stop vouching (lock held)."""
        self._changes += 1
        if self._vouched is not None and self._files is not None:
            self._files.unvouch()
        self._vouched = None

    def _track(self, generation: int | None) -> None:
        """Follow the index's vectors generation through the changes applied (lock held)."""
        if self._state is None:
            return
        epoch, mine = self._state
        if generation is not None and generation <= mine:
            return  # committed before the load's snapshot: already in the matrix
        if generation == mine + 1:
            self._state = (epoch, generation)
        else:
            self._state = None  # a write this matrix never saw: never save it as current

    @property
    def _matrix(self) -> F32:
        return self._rows.matrix

    def _index_rows(self, start: int, stop: int) -> None:
        """Map the chunk ids of rows [start, stop) to their rows."""
        if stop <= start:
            return
        ids = self._ids[start:stop]
        self._ensure_ids(int(ids.max()))
        self._row_of[ids] = np.arange(start, stop, dtype=np.int32)

    def _ensure_ids(self, max_id: int) -> None:
        if max_id < len(self._row_of):
            return
        bigger = np.full(max(max_id + 1, len(self._row_of) * 5 // 4 + 1024), -1, dtype=np.int32)
        bigger[: len(self._row_of)] = self._row_of
        self._row_of = bigger

    def _row(self, chunk_id: int) -> int:
        if 0 <= chunk_id < len(self._row_of):
            return int(self._row_of[chunk_id])
        return -1

    def _maybe_fit(self) -> None:
        """Fit (or refit, once the index doubled) the PCA prefilter when the index is large."""
        n = self._count
        if n < self.prefilter_min_rows or (self._proj is not None and n < 2 * self._fitted_rows):
            return
        rng = np.random.default_rng(n)
        picks = np.sort(rng.choice(n, min(PCA_SAMPLE, n), replace=False))
        sample = self._matrix[picks]
        centred = (sample - sample.mean(axis=0)).astype(np.float64)
        # The top eigenvectors of the (dims x dims) covariance: the SVD of the sample gives the
        # same axes but took 20 s instead of 0.2 s with OpenBLAS threads on a busy machine.
        _, vecs = np.linalg.eigh(centred.T @ centred)
        proj = np.ascontiguousarray(vecs[:, ::-1][:, : self._rdims], dtype=np.float32)
        low = np.empty((self._rows.capacity, self._rdims), dtype=np.uint8)
        matrix = self._matrix
        starts = range(0, n, PROJECT_BLOCK)

        def project(start: int) -> F32:
            block: F32 = matrix[start : min(n, start + PROJECT_BLOCK)] @ proj
            return block

        def largest_abs(start: int) -> F32:
            top: F32 = np.abs(project(start)).max(axis=0)
            return top

        def store(start: int) -> None:
            stop = min(n, start + PROJECT_BLOCK)
            quantize_rows(project(start), scale, low[start:stop])

        # Two passes, so that no row is clipped: the scales need every row's projection, and
        # keeping them all in float32 is the memory the int8 rows save (512 MB at 1M). The
        # daemon runs BLAS on one thread (cli.py); blocks on every core (matmul releases the
        # GIL) make the projection of a 1M-row load take seconds, not tens of seconds.
        with ThreadPoolExecutor(max_workers=min(usable_cores(), 4)) as pool:
            scale = scales_for(np.max(np.stack(list(pool.map(largest_abs, starts))), axis=0))
            list(pool.map(store, starts))
        self._proj, self._low, self._scale, self._fitted_rows = proj, low, scale, n

    def _grow(self, need: int) -> None:
        if need <= self._rows.capacity:
            return
        self._rows.grow(need, self._count)
        capacity = self._rows.capacity
        ids = np.empty(capacity, dtype=np.int64)
        ids[: self._count] = self._ids[: self._count]
        self._ids = ids
        if self._proj is not None:
            low = np.empty((capacity, self._rdims), dtype=np.uint8)
            low[: self._count] = self._low[: self._count]
            self._low = low

    def apply(
        self,
        removed: Sequence[int],
        added: Sequence[tuple[int, F32]],
        generation: int | None = None,
    ) -> None:
        """Mirror a committed change: drop ``removed`` ids, add or replace ``added`` rows.

        ``generation``: the vectors generation the change committed (``FileChange``).
        """
        with self._lock.exclusive():
            self._track(generation)
            if len(removed) or len(added):
                self._unvouch()
            for chunk_id in removed:
                self._remove_one(int(chunk_id))
            if added:
                self._grow(self._count + len(added))
                for chunk_id, vec in added:
                    cid = int(chunk_id)
                    row = self._row(cid)
                    if row < 0:
                        row = self._count
                        self._count += 1
                        self._ensure_ids(cid)
                        self._row_of[cid] = row
                        self._ids[row] = cid
                    self._matrix[row] = vec
                    if self._proj is not None:  # clipped to the fitted scales until a refit
                        projected = (self._matrix[row] @ self._proj)[None, :]
                        quantize_rows(projected, self._scale, self._low[row : row + 1])
                self._maybe_fit()

    def _remove_one(self, chunk_id: int) -> None:
        row = self._row(chunk_id)
        if row < 0:
            return
        self._row_of[chunk_id] = -1
        last = self._count - 1
        if row != last:
            # Swap-remove keeps the live rows contiguous for one BLAS call.
            moved = int(self._ids[last])
            self._matrix[row] = self._matrix[last]
            if self._proj is not None:
                self._low[row] = self._low[last]
            self._ids[row] = moved
            self._row_of[moved] = row
        # The vacated row is zeroed: a removed (forgotten) vector must not linger in rows.f32.
        self._matrix[last] = 0
        if self._proj is not None:
            self._low[last] = ROW_BIAS  # int8 0
        self._count -= 1

    def vectors_of(self, chunk_ids: Sequence[int]) -> dict[int, F32]:
        """Copies of the (unit) vectors of ``chunk_ids`` that the index holds."""
        with self._lock.shared():
            out: dict[int, F32] = {}
            for cid in chunk_ids:
                row = self._row(int(cid))
                if 0 <= row < self._count:
                    out[int(cid)] = np.array(self._matrix[row])
            return out

    def _mask(self, allowed: I64, n: int) -> npt.NDArray[np.bool_]:
        """Rows whose chunk id is in ``allowed`` (by the id -> row map, no sort of all ids)."""
        ids = np.asarray(allowed, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < len(self._row_of))]
        rows = self._row_of[ids]
        mask = np.zeros(n, dtype=bool)
        mask[rows[(rows >= 0) & (rows < n)]] = True
        return mask

    def _rows_of(self, allowed: I64, n: int) -> I64:
        """The rows of the ``allowed`` ids the index holds, in row order."""
        ids = np.asarray(allowed, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < len(self._row_of))]
        rows = self._row_of[ids]
        return np.unique(rows[(rows >= 0) & (rows < n)])

    def _search_rows(self, q: F32, k: int, ids: I64, rows: I64) -> list[tuple[int, float]]:
        """Exact scores of a few rows only (a narrow filter): no scan of the whole matrix."""
        if not len(rows) or k <= 0:
            return []
        # In blocks: one product over thousands of rows went to several BLAS threads and took
        # 20-40 ms on a busy 2-core host, against 0.3 ms per block of 1,000 rows.
        exact = np.concatenate(
            [
                np.take(self._matrix, rows[i : i + ROWS_BLOCK], axis=0) @ q
                for i in range(0, len(rows), ROWS_BLOCK)
            ]
        )
        k = min(k, len(rows))
        top = np.argpartition(-exact, k - 1)[:k] if k < len(rows) else np.arange(len(rows))
        top = top[np.argsort(-exact[top], kind="stable")]
        return [(int(ids[rows[r]]), float(exact[r])) for r in top]

    def search(self, query: F32, k: int, allowed: I64 | None = None) -> list[tuple[int, float]]:
        """Top ``k`` (chunk id, cosine similarity), best first; ``allowed`` restricts the ids."""
        with self._lock.shared():
            n = self._count
            if n == 0 or k <= 0:
                return []
            ids = self._ids[:n]
            q = np.asarray(query, dtype=np.float32)
            if allowed is not None and len(allowed) * FEW_ALLOWED_SHARE <= n:
                return self._search_rows(q, k, ids, self._rows_of(allowed, n))
            mask = self._mask(allowed, n) if allowed is not None else None
            if mask is not None and not mask.any():
                return []
            if self._proj is not None and n > PREFILTER_CANDIDATES:
                return self._search_prefiltered(q, k, ids, mask)
            scores = self._matrix[:n] @ q
            if mask is not None:
                scores = np.where(mask, scores, -np.inf)
                k = min(k, int(mask.sum()))
            k = min(k, n)
            top = np.argpartition(scores, n - k)[n - k :] if k < n else np.arange(n)
            top = top[np.argsort(-scores[top], kind="stable")]
            return [(int(ids[r]), float(scores[r])) for r in top if np.isfinite(scores[r])]

    def prefilter_candidates(self, query: F32, k: int) -> I64 | None:
        """Chunk ids the int8 prefilter hands to the exact rescoring of a top ``k`` (None: no
        prefilter at this size). ``make bench`` measures how many of the true top k are in."""
        with self._lock.shared():
            n = self._count
            if self._proj is None or n <= PREFILTER_CANDIDATES:
                return None
            q = np.asarray(query, dtype=np.float32)
            return np.array(self._ids[self._candidates(q, k, n, None)])

    def _search_prefiltered(
        self, q: F32, k: int, ids: I64, mask: npt.NDArray[np.bool_] | None
    ) -> list[tuple[int, float]]:
        """Scan the projected matrix, rescore the best candidates exactly (shared lock held)."""
        cand = self._candidates(q, k, len(ids), mask)
        # np.take rather than fancy indexing: the same rows copied in 1.7-1.8 ms against 2.8-3.7
        # (4,000 rows x 384, one thread, three runs); into a kept buffer (rescoring).
        exact = _GATHER.rescore(self._matrix, cand, q)
        k = min(k, len(cand))
        top = np.argpartition(-exact, k - 1)[:k] if k < len(cand) else np.arange(len(cand))
        top = top[np.argsort(-exact[top], kind="stable")]
        return [(int(ids[cand[r]]), float(exact[r])) for r in top]

    def _candidates(self, q: F32, k: int, n: int, mask: npt.NDArray[np.bool_] | None) -> I64:
        """Rows of the best int8 scores, in row order (shared lock held)."""
        assert self._proj is not None
        # The first n rows of the (row-major) array: contiguous, no copy.
        query = quantize_query(q @ self._proj, self._scale)
        rough = _SCAN.scores(query, self._low[:n]).astype(np.float32)
        if mask is not None:
            rough = np.where(mask, rough, -np.inf)
            n_ok = int(mask.sum())
        else:
            n_ok = n
        # More candidates as the index grows: at 1M derived vectors (many near-ties), recall@10
        # was 0.983 with 2,000, 0.993 with 4,000 and 1.000 with 8,000, at no measurable cost.
        c = min(max(PREFILTER_CANDIDATES, 40 * k, n // CANDIDATE_SHARE), n_ok)
        cand = largest(rough, c)
        return np.sort(cand[np.isfinite(rough[cand])])  # row order: sequential page reads


def scan_engine() -> str:
    """What ran the prefilter's int8 scans: "onnxruntime" or "numpy" (``Int8Scan.engine``)."""
    return _SCAN.engine


#: A filter that keeps at most 1/this of the rows has just those rows scored exactly, no scan
#: (100k rows, a busy 2-core host, median of 60 queries: 1,000 kept rows 0.3 ms, 5,000 1.5 ms,
#: 12,500 16-19 ms, against 12-37 ms for the masked scan of all of them).
FEW_ALLOWED_SHARE = 8
ROWS_BLOCK = 1024  # rows scored exactly per BLAS call (see ``_search_rows``)
