"""The C allocator's setting for a long-running daemon (set once, before the model loads)."""

from __future__ import annotations

import sys

__all__ = ["tune_allocator"]


def tune_allocator(threshold: int = 128 * 1024) -> bool:
    """glibc: serve every allocation of ``threshold`` bytes or more with its own mmap.

    glibc raises its mmap threshold each time a large block is freed, after which large blocks
    come from the heap and per-thread arenas, which keep the memory after ``free``: a daemon
    that once decoded a 1 MiB request in each worker thread, or loaded a model, keeps tens of
    MB it no longer uses. A fixed threshold returns large blocks to the system when freed.
    Returns whether the setting was applied (Linux with glibc only).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold = -3
    return bool(mallopt(m_mmap_threshold, threshold))
