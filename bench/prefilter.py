"""The int8 prefilter's recall on this CPU (issue 38): which kernel ran, and what it kept.

onnxruntime's ``MatMulInteger`` runs a different kernel per CPU class (AVX-512 VNNI, AVX-VNNI,
AVX2 without VNNI, ARM dot products); the query is quantized to 7 bits so that none of them
saturates (``recalld.index.int8_scan.PAIR_BOUND``). ``measure`` reports, for the daemon's own
``VectorIndex`` at a size where the prefilter runs:

* ``prefilter_recall_<tag>``: the share of the exact top 10 (numpy float32 over every vector,
  ties within 1e-5 of the 10th count) that is among the prefilter's candidates, i.e. what the
  exact rescoring can find at best;
* ``prefilter_cpu``: the CPU class and the scan's engine, read on this host.

The final top 10's recall after the rescoring stays ``vector_recall_vs_exact_<tag>``
(large_index.py, scale.py), measured on the same index.
"""

from __future__ import annotations

import platform
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.index.vector_index import VectorIndex

F32 = npt.NDArray[np.float32]
#: CPU flags that pick MLAS's uint8 x int8 kernel, best first (Linux /proc/cpuinfo names).
_KERNELS = (
    ("avx512_vnni", "AVX-512 VNNI (int32 sums)"),
    ("avx_vnni", "AVX-VNNI (int32 sums)"),
    ("avx512bw", "AVX-512BW without VNNI (int16 pair sums)"),
    ("avx2", "AVX2 without VNNI (int16 pair sums)"),
    ("asimddp", "ARM dot product (int32 sums)"),
)


def cpu_class() -> str:
    """The int8 kernel class of this CPU, from its flags ("unknown" when they cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"{platform.machine()} (flags unknown)"
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
            break
    for flag, name in _KERNELS:
        if flag in flags:
            return name
    return f"{platform.machine()} (no int8 dot-product flag)"


def measure(vindex: VectorIndex, qvecs: F32, matrix: F32, ids: npt.NDArray[np.int64]) -> float:
    """Mean share of the exact top 10 among the prefilter's candidates (NaN: no prefilter).

    ``matrix``: every vector of the index, row i being chunk ``ids[i]``.
    """
    shares: list[float] = []
    for qv in qvecs:
        cand = vindex.prefilter_candidates(qv, 10)
        if cand is None:
            return float("nan")
        scores = matrix @ qv
        tenth = float(np.partition(scores, len(scores) - 10)[len(scores) - 10])
        best = ids[scores >= tenth - 1e-5]  # ties with the 10th count as found
        found = np.isin(best, cand).sum()
        shares.append(min(float(found), 10.0) / 10)
    return statistics.mean(shares)


def put(sheet: Any, tag: str, recall: float, queries: int) -> None:
    """The rows of one size: the recall, and the CPU class and engine it was measured on."""
    from recalld.index.vector_index import scan_engine

    engine = scan_engine()  # after a scan: "onnxruntime" or "numpy"
    sheet.put(f"prefilter_recall_{tag}", recall, 4)
    sheet.put("prefilter_cpu", f"{cpu_class()}, {engine}")
    sheet.note(
        f"prefilter_recall_{tag}",
        f"share of the exact top 10 (numpy float32, ties within 1e-5) among the int8 "
        f"prefilter's candidates, {queries} real queries, the daemon's VectorIndex on the "
        "same index; the query is quantized to 7 bits so that no CPU's int8 kernel saturates",
    )
