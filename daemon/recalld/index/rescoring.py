"""Picking the prefilter's candidates and scoring them exactly, without a copy per query.

At 1M rows a search rescores ~8,000 candidates (``CANDIDATE_SHARE``): gathered into a fresh
array that was 12.3 MB per query, and memmove and page faults were 12 % of search samples.
The rows are gathered into a kept buffer instead (a few, reused by whichever search thread is
scoring), so a search faults no new pages once the buffers have grown to the index's size: the
daemon's idle trim hands a freed array's pages back after every quiet moment, and 8,002 rows
then cost ~450 minor faults a query, against 7-8 into a kept buffer (200k x 384 rows, trim
before each query: p50 0.34-0.84x the time, four rounds on a loaded 2-core host).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

KEPT_BUFFERS = 4  # as many as searches score at once (the engine's channel threads)
SAMPLE_STRIDE = 16  # every 16th score estimates the cut


class GatherBuffers:
    """Float32 buffers for gathered rows, kept between searches (at most ``KEPT_BUFFERS``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[F32] = []

    def rescore(self, matrix: F32, rows: I64, q: F32) -> F32:
        """``matrix[rows] @ q``, the rows gathered into a kept buffer (a new array out)."""
        n, dims = len(rows), matrix.shape[1]
        with self._lock:
            buf = self._free.pop() if self._free else None
        if buf is None or buf.shape[0] < n or buf.shape[1] != dims:
            buf = np.empty((max(n, 1), dims), dtype=np.float32)
        try:
            gathered = buf[:n]
            # mode "clip": with "raise" (the default) numpy gathers into a temporary and copies
            # it to ``out``, twice the time of a fresh array; the rows are always in range.
            np.take(matrix, rows, axis=0, out=gathered, mode="clip")
            scores: F32 = gathered @ q
            return scores
        finally:
            with self._lock:
                if len(self._free) < KEPT_BUFFERS:
                    self._free.append(buf)

    def kept_bytes(self) -> int:
        """Bytes held between searches."""
        with self._lock:
            return sum(b.nbytes for b in self._free)


def largest(values: npt.NDArray[np.floating[Any]], c: int) -> I64:
    """Positions of the ``c`` largest ``values``, in no order (all of them when c >= len).

    ``argpartition`` over all n scores cost 13-14 ms at 1M rows (1 ms at 100k), a third of the
    scan. Every ``SAMPLE_STRIDE``-th score gives a cut that about 2c scores reach; one
    vectorised comparison keeps those, and ``argpartition`` runs on them only: 1.7 ms at 1M,
    0.2 ms at 100k, the same set. When fewer than c reach the cut (scores in an unlucky order),
    the whole array is partitioned, as before.
    """
    n = len(values)
    if c >= n:
        return np.arange(n)
    sample = values[::SAMPLE_STRIDE]
    k = 2 * c // SAMPLE_STRIDE
    if k >= 1 and len(sample) > k:
        cut = np.partition(sample, len(sample) - k)[len(sample) - k]
        kept = np.flatnonzero(values >= cut)
        if len(kept) >= c:
            top = np.argpartition(values[kept], len(kept) - c)[len(kept) - c :]
            return kept[top]
    # The c largest without negating ``values`` first (a copy of n floats): at 1M rows the
    # selection took 1.9-4.5 ms with it, 1.5-2.2 ms without (three runs); same results.
    return np.argpartition(values, n - c)[n - c :]
