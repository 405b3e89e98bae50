"""Vectors for chunk texts: the embedding cache first, the provider for what it lacks.

A provider that fails leaves indexing keyword-only (the error kept for the report); the vector
back-fill embeds the missing chunks later.
"""

from __future__ import annotations

import logging

import numpy as np
import numpy.typing as npt

from recalld.embedding.base import Embedder
from recalld.index.store import Store
from recalld.ingest.sync_report import Progress, SyncReport

# The indexer's logger by name: its log lines keep their source after the split.
log = logging.getLogger("recalld.ingest.indexer")


class ChunkVectors:
    """The indexer's embedding step (a mixin: the attributes are the Indexer's)."""

    store: Store
    embedder: Embedder | None
    embed_error: str | None
    progress: Progress

    def vectors_for(
        self, texts_by_hash: dict[str, str], report: SyncReport | None = None, *, embed: bool = True
    ) -> dict[str, npt.NDArray[np.float32]] | None:
        """Vectors for chunk texts: from the cache, else embedded now (and cached)."""
        emb = self.embedder
        if emb is None or not texts_by_hash or not self.store.has_vec_table():
            return None
        found = self.store.cached(emb.key, emb.model, emb.dims, list(texts_by_hash))
        missing = [h for h in texts_by_hash if h not in found]
        if missing and embed:
            try:
                vecs = emb.embed([texts_by_hash[h] for h in missing])
            except Exception as exc:  # noqa: BLE001 - keep indexing keyword-only, backfill later
                self.embed_error = f"{emb.label}: {exc}"
                log.warning("embedding failed, indexing without vectors for now: %s", exc)
                return found
            if vecs.shape != (len(missing), emb.dims):
                self.embed_error = (
                    f"{emb.label} returned vectors of shape {vecs.shape}, expected "
                    f"({len(missing)}, {emb.dims})"
                )
                return found
            new = {h: vecs[i] for i, h in enumerate(missing)}
            self.store.put_cache(emb.key, emb.model, emb.dims, new)
            found.update(new)
            self.embed_error = None
            if report is not None:
                report.chunks_embedded += len(missing)
            self.progress.chunks_embedded += len(missing)
        return found
