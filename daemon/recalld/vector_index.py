"""The in-memory vector matrix: exact cosine search with numpy, SQLite stays the source of truth.

sqlite-vec's brute-force scan costs ~57 ms at 100k x 384 on this class of machine, a BLAS
matrix-vector product ~8 ms. So the daemon keeps one float32 matrix (rows = chunks with a vector)
loaded from the vec0 table at start and updated by the writer after each commit. Filters
(sources, path prefix) are applied as a mask before the top-k selection, never after truncation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from recalld.store import Store

F32 = npt.NDArray[np.float32]


class VectorIndex:
    """Rows of unit vectors with chunk ids; exact top-k by dot product."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self._lock = threading.RLock()
        self._ids = np.empty(0, dtype=np.int64)
        self._matrix = np.empty((0, dims), dtype=np.float32)
        self._count = 0
        self._row_of: dict[int, int] = {}

    def __len__(self) -> int:
        return self._count

    @classmethod
    def load(cls, store: Store, dims: int) -> VectorIndex:
        """Build the matrix from the store's vec0 table."""
        index = cls(dims)
        parts_ids: list[list[int]] = []
        parts_vec: list[F32] = []
        for ids, blob in store.iter_vectors():
            parts_ids.append(ids)
            parts_vec.append(np.frombuffer(blob, dtype="<f4").reshape(len(ids), dims))
        if parts_ids:
            all_ids = np.fromiter((i for part in parts_ids for i in part), dtype=np.int64)
            matrix = np.vstack(parts_vec).astype(np.float32)
            index._replace_all(all_ids, matrix)
        return index

    def _replace_all(self, ids: npt.NDArray[np.int64], matrix: F32) -> None:
        with self._lock:
            self._ids = ids.copy()
            self._matrix = np.ascontiguousarray(matrix, dtype=np.float32)
            self._count = len(ids)
            self._row_of = {int(i): r for r, i in enumerate(ids)}

    def _grow(self, need: int) -> None:
        capacity = self._matrix.shape[0]
        if need <= capacity:
            return
        new_cap = max(need, int(capacity * 1.5) + 1024)
        matrix = np.empty((new_cap, self.dims), dtype=np.float32)
        matrix[: self._count] = self._matrix[: self._count]
        ids = np.empty(new_cap, dtype=np.int64)
        ids[: self._count] = self._ids[: self._count]
        self._matrix, self._ids = matrix, ids

    def apply(self, removed: Sequence[int], added: Sequence[tuple[int, F32]]) -> None:
        """Mirror a committed change: drop ``removed`` ids, add or replace ``added`` rows."""
        with self._lock:
            for chunk_id in removed:
                self._remove_one(int(chunk_id))
            if added:
                self._grow(self._count + len(added))
                for chunk_id, vec in added:
                    cid = int(chunk_id)
                    row = self._row_of.get(cid)
                    if row is None:
                        row = self._count
                        self._count += 1
                        self._row_of[cid] = row
                        self._ids[row] = cid
                    self._matrix[row] = vec

    def _remove_one(self, chunk_id: int) -> None:
        row = self._row_of.pop(chunk_id, None)
        if row is None:
            return
        last = self._count - 1
        if row != last:
            # Swap-remove keeps the live rows contiguous for one BLAS call.
            moved = int(self._ids[last])
            self._matrix[row] = self._matrix[last]
            self._ids[row] = moved
            self._row_of[moved] = row
        self._count -= 1

    def search(
        self, query: F32, k: int, allowed: npt.NDArray[np.int64] | None = None
    ) -> list[tuple[int, float]]:
        """Top ``k`` (chunk id, cosine similarity), best first; ``allowed`` restricts the ids."""
        with self._lock:
            n = self._count
            if n == 0 or k <= 0:
                return []
            ids = self._ids[:n]
            scores = self._matrix[:n] @ np.asarray(query, dtype=np.float32)
            if allowed is not None:
                mask = np.isin(ids, allowed, assume_unique=True)
                if not mask.any():
                    return []
                scores = np.where(mask, scores, -np.inf)
                k = min(k, int(mask.sum()))
            k = min(k, n)
            top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
            top = top[np.argsort(-scores[top], kind="stable")]
            return [(int(ids[r]), float(scores[r])) for r in top if np.isfinite(scores[r])]
