"""The embedding cache: vectors by text hash, per provider, model and width, kept across rebuilds.

A rebuild copies the old index's cache first, so text that did not change is not embedded again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import apsw
import numpy as np
import numpy.typing as npt

from recalld.index.vector_scan import vector_blob


class EmbeddingCache:
    """The store's embedding cache rows (a base of :class:`~recalld.index.store.Store`)."""

    conn: apsw.Connection

    def cached(
        self, provider_key: str, model: str, dims: int, hashes: Sequence[str]
    ) -> dict[str, npt.NDArray[np.float32]]:
        """Cached vectors by text hash."""
        out: dict[str, npt.NDArray[np.float32]] = {}
        unique = list(dict.fromkeys(hashes))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            marks = ",".join("?" * len(part))
            for h, blob in self.conn.execute(
                f"SELECT text_hash, vector FROM embedding_cache WHERE provider_key = ? "
                f"AND model = ? AND dims = ? AND text_hash IN ({marks})",
                (provider_key, model, dims, *part),
            ):
                out[str(h)] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        return out

    def put_cache(
        self, provider_key: str, model: str, dims: int, items: dict[str, npt.NDArray[np.float32]]
    ) -> None:
        """Store embeddings in the cache (one transaction)."""
        now = time.time()
        with self.conn:
            for h, vec in items.items():
                self.conn.execute(
                    "INSERT OR REPLACE INTO embedding_cache"
                    "(provider_key, model, dims, text_hash, vector, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (provider_key, model, dims, h, vector_blob(vec), now),
                )

    def copy_cache_from(self, other: Path) -> int:
        """Copy another index's embedding cache into this one (before a full rebuild)."""
        # ATTACH cannot run inside a transaction, so attach first and copy in one transaction.
        self.conn.execute("ATTACH DATABASE ? AS old", (f"file:{other}?mode=ro",))
        try:
            with self.conn:
                self.conn.execute(
                    "INSERT OR IGNORE INTO embedding_cache SELECT * FROM old.embedding_cache"
                )
                copied = self.conn.changes()
        finally:
            self.conn.execute("DETACH DATABASE old")
        return copied
