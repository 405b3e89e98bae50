"""The prefilter's scan in int8: a quarter of float32's memory traffic, on the CPU's int8 units.

The prefilter (``vector_index``) ranks every row by its projected (128-d) vectors, then rescores
the best few thousand exactly. Its rows are int8 with one scale per projected dimension, stored
biased as uint8 (int8 + ``ROW_BIAS``), one row per vector; the query's projection, times those
scales, is quantized to int8 in [-63, 63] (``PAIR_BOUND`` says why 7 bits). onnxruntime's
``MatMulInteger`` (MLAS: AVX-512 VNNI / AVX2 kernels) multiplies the rows (m x 128, the left
operand) by the query (128 x 1) on one thread, and ``ROW_BIAS x sum(query)`` is taken off every
score: the exact integer products. The other orientation (query 1 x 128 times rows 128 x m, up to
issue 40) gives the same integers at 1.5-3x the CPU: MLAS repacks its right operand, every row,
at each call (side by side, CPU per scan: 1M rows 20.1 against 29.7 ms, 100k 2.6 against 7.5 ms;
docs/DECISIONS.md, issue 40). The rows take 128 MB at 1M (512 in float32), and the final top 10
is unchanged on real embeddings (sessions 15 and issue 38).

Without onnxruntime the same integers are multiplied by numpy in float32 blocks (exact: every
partial sum is an integer below 2**24): slower, the same scores.
"""

from __future__ import annotations

import base64
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "PAIR_BOUND",
    "QUERY_LEVELS",
    "ROW_BIAS",
    "Int8Scan",
    "biased",
    "quantize_query",
    "quantize_rows",
    "scales_for",
]

F32 = npt.NDArray[np.float32]
I8 = npt.NDArray[np.int8]
U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
#: The query's levels either side of 0: its int8 values lie in [-63, 63].
QUERY_LEVELS = 63
#: The rows are stored as uint8: their int8 value plus this (``biased``).
ROW_BIAS = 128
#: MLAS's AVX2 kernel without VNNI (and AVX-512BW's) multiplies uint8 x int8 with
#: ``vpmaddubsw``, which adds each *pair* of products into a saturating int16. With the rows'
#: uint8 in [0, 255] and the query in [-63, 63] no pair sum leaves int16, so every CPU gives the
#: exact integer product (a query up to 255 against int8 rows gave 19077 for 20495 on this class
#: of CPU: issue 38). VNNI and ARM's dot products accumulate in int32: exact anyway.
PAIR_BOUND = 2 * 255 * QUERY_LEVELS
assert PAIR_BOUND <= 32_767, PAIR_BOUND
_FALLBACK_BLOCK = 65_536


def scales_for(max_abs: F32) -> F32:
    """One scale per projected dimension: its largest magnitude maps to 127."""
    out = np.asarray(max_abs, dtype=np.float32) / np.float32(127.0)
    out[~(out > 0)] = 1.0  # an all-zero (or empty) dimension
    return out


def quantize_rows(values: F32, scale: F32, out: U8) -> None:
    """``values`` (m x rdims, float) into ``out`` (m x rdims): int8 clipped to +-127, biased."""
    q = np.rint(values / scale[None, :])
    np.clip(q, -127, 127, out=q)
    q += ROW_BIAS
    out[...] = q


def biased(rows: I8) -> U8:
    """int8 rows as the scan stores them: uint8 = int8 + ``ROW_BIAS`` (the sign bit flipped)."""
    out: U8 = rows.view(np.uint8) ^ np.uint8(ROW_BIAS)
    return out


def quantize_query(projected: F32, scale: F32) -> I8:
    """The query's projection as int8 in [-63, 63], shape (rdims, 1).

    Multiplying by the rows' scales first makes the integer product proportional to the float
    one; the query's own scale is one factor for every row, so it does not change the ranking.
    7 bits, not 8: the price of exact scores on every CPU (``PAIR_BOUND``); the rows keep 8.
    """
    weighted = np.asarray(projected, dtype=np.float32) * scale
    top = float(np.abs(weighted).max())
    step = top / QUERY_LEVELS if top > 0 else 1.0
    q = np.clip(np.rint(weighted / step), -QUERY_LEVELS, QUERY_LEVELS)
    out: I8 = q.astype(np.int8)[:, None]
    return out


class Int8Scan:
    """``scores(query, rows)``: every (unbiased) row times the query, int32.

    The rows are the left operand (uint8, m x rdims, row-major) and the query the right one
    (int8, rdims x 1): MLAS then packs 128 query bytes per call instead of every row, 1.5x
    faster than the other orientation (issue 40). The bias adds ``ROW_BIAS x sum(query)`` to
    every score, one integer taken off after (no zero point in the graph: with one,
    ``MatMulInteger`` took 16.8 ms at 1M rows against 5.4 ms, session 15).
    """

    def __init__(self) -> None:
        self._session: Any = None
        self._tried = False
        self._lock = threading.Lock()

    @property
    def engine(self) -> str:
        """ "onnxruntime" or "numpy" (after the first scan)."""
        return "onnxruntime" if self._session is not None else "numpy"

    def scores(self, query: I8, rows: U8) -> I32:
        """Dot products of the query (``quantize_query``) with every row of ``rows``
        (``quantize_rows``: biased), exact, as int32."""
        bias = ROW_BIAS * int(query.sum(dtype=np.int64))
        session = self._get_session()
        if session is not None:
            (out,) = session.run(None, {"a": rows, "b": query})
            raw: I32 = np.asarray(out, dtype=np.int32).reshape(-1)
            raw -= bias
            return raw
        # float32 is exact here: every partial sum is an integer below 128 x 255 x 63 < 2**24.
        q = query[:, 0].astype(np.float32)
        n = rows.shape[0]
        result = np.empty(n, dtype=np.int32)
        for start in range(0, n, _FALLBACK_BLOCK):
            block = rows[start : start + _FALLBACK_BLOCK].astype(np.float32)
            result[start : start + len(block)] = np.rint(block @ q)
        result -= bias
        return result

    def _get_session(self) -> Any:
        if self._tried:
            return self._session
        with self._lock:
            if not self._tried:
                self._session = _build_session()
                self._tried = True
        return self._session


#: The one-node graph ``y = MatMulInteger(a, b)`` (a: m x k uint8, b: k x 1 int8, y: m x 1
#: int32), opset 13, IR version 8, serialized. Kept as bytes so that the daemon
#: needs onnxruntime only, not the ``onnx`` package; tests/test_int8_scan.py builds it again
#: with ``onnx.helper`` and compares.
SCAN_MODEL = base64.b64decode(
    "CAgSB3JlY2FsbGQ6YQoYCgFhCgFiEgF5Ig1NYXRNdWxJbnRlZ2VyEg5wcmVmaWx0ZXJfc2NhbloPCgFhEgoKCAgCEgQK"
    "AAoAWhEKAWISDAoKCAMSBgoACgIIAWIRCgF5EgwKCggGEgYKAAoCCAFCBAoAEA0="
)


def _build_session() -> Any:
    """The scan graph on one thread (None: no onnxruntime, or one that cannot run it)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # searches run side by side instead
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(SCAN_MODEL, options, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - an onnxruntime that cannot run it: numpy does
        return None
