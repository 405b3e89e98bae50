"""The engine's in-memory vector matrix: loaded on first use, kept current, saved at close.

Loaded from the saved files beside the index when they vouch for it, else from vec0
(:class:`~recalld.index.vector_index.VectorIndex`) and then saved at once, in the background
(a daemon stopped soon after its start, before it could close, would otherwise read vec0 again
at every start: 22-27 s at 1M instead of 7-11); every committed change is applied to it; a
rebuild hands over the matrix of the new file; closing saves it if it changed since.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from recalld.index.store import Store
from recalld.index.vector_files import VectorFiles
from recalld.index.vector_index import VectorIndex

log = logging.getLogger(__name__)


class VectorHolder:
    """One engine's vector matrix (None until loaded, or while vectors are off)."""

    def __init__(
        self,
        index_path: Path,
        connection: Callable[[], AbstractContextManager[Store]],
        saved: bool,
    ) -> None:
        self.index_path = index_path
        self._connection = connection  # a bulk-read connection (the caller holds the swap lock)
        self._saved = saved  # the writer's engine keeps the saved files (it sees every change)
        self._matrix: VectorIndex | None = None
        self._lock = threading.Lock()
        self.load_s: float | None = None

    @property
    def matrix(self) -> VectorIndex | None:
        """The matrix if it is loaded (never loads it)."""
        return self._matrix

    def files(self) -> VectorFiles | None:
        """The saved matrix beside the index (the writer's engine only)."""
        return VectorFiles(self.index_path) if self._saved else None

    def get(self, dims: int) -> VectorIndex:
        """The matrix, loaded on first use (the caller holds the swap lock)."""
        with self._lock:
            if self._matrix is None:
                started = time.perf_counter()
                with self._connection() as store:
                    self._matrix = VectorIndex.load(
                        store, dims, folder=self.index_path.parent, files=self.files()
                    )
                self.load_s = round(time.perf_counter() - started, 3)
                log.info(
                    "loaded %d vectors in %.2f s (from the %s, rows in a %s)",
                    len(self._matrix),
                    self.load_s,
                    self._matrix.loaded_from,
                    self._matrix.storage,
                )
                self._save_soon(self._matrix)
            return self._matrix

    def _save_soon(self, matrix: VectorIndex) -> None:
        """Save a matrix read from vec0 (or saved in an older format) in the background
        (searches and deltas go on)."""
        if not self._saved or not matrix.unsaved:
            return

        def save() -> None:
            started = time.perf_counter()
            try:
                saved = matrix.save()
            except Exception:
                log.exception("saving the vectors for the next start failed")
                return
            if saved:
                log.info("saved the vectors for the next start in %.2f s",
                         time.perf_counter() - started)  # fmt: skip

        threading.Thread(target=save, name="recalld-vectors-save", daemon=True).start()

    def count(self) -> int:
        """Vectors in the loaded matrix (0 before it is loaded)."""
        with self._lock:
            return len(self._matrix) if self._matrix is not None else 0

    def apply(self, removed: Sequence[int], added: Any, generation: int | None) -> None:
        """Mirror a committed change (a matrix not loaded yet will read it from the index)."""
        with self._lock:
            if self._matrix is not None:
                self._matrix.apply(removed, added, generation)

    def replace(self, matrix: VectorIndex | None) -> None:
        """Another file or vector space is live: its matrix (None: load again on use)."""
        with self._lock:
            self._matrix = matrix
            if matrix is not None:
                self._save_soon(matrix)

    def status(self) -> dict[str, Any] | None:
        """Rows, where they live, how long the load took (None before it is loaded)."""
        matrix = self._matrix
        if matrix is None:
            return None
        return {
            "rows": len(matrix),
            "storage": matrix.storage,
            "loaded_from": matrix.loaded_from,
            "load_s": self.load_s,
        }

    def close(self) -> None:
        """Save (unless saved as it is) and drop the matrix: the next start maps it."""
        with self._lock:
            if self._matrix is not None:
                self._matrix.close(save=True)
                self._matrix = None
