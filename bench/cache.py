"""The bench's own persistent embedding cache (``bench/out/cache/embeddings.sqlite``).

A recalld index file used only for its ``embedding_cache`` table, keyed like the daemon's cache by
(provider, model, dims, chunk-text hash). Every real vector the bench computes, or finds in one of
its own homes, lands here, so that a rerun never embeds the same text twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.common import CACHE_DB, log
from recalld.embedding.local import LocalEmbedder
from recalld.index.store import Store

F32 = npt.NDArray[np.float32]
EMBED_GROUP = 256  # chunks per embed() call, as the indexer groups them


class VectorCache:
    """Real embeddings of chunk texts, by text hash."""

    def __init__(self, embedder: LocalEmbedder, path: Path = CACHE_DB) -> None:
        self.embedder = embedder
        self.path = path
        self.store = Store(path)
        self.embedded_now = 0

    @property
    def space(self) -> tuple[str, str, int]:
        """(provider key, model, dims) of the embedder."""
        return self.embedder.key, self.embedder.model, self.embedder.dims

    def harvest(self, index_path: Path) -> int:
        """Copy another index's cache entries in (new ones only); returns how many rows it had."""
        if not index_path.exists() or index_path.resolve() == self.path.resolve():
            return 0
        return self.store.copy_cache_from(index_path)

    def get(self, hashes: list[str]) -> dict[str, F32]:
        """Cached vectors of these hashes."""
        key, model, dims = self.space
        return self.store.cached(key, model, dims, hashes)

    def put(self, vectors: Mapping[str, F32]) -> None:
        """Add vectors."""
        key, model, dims = self.space
        self.store.put_cache(key, model, dims, dict(vectors))

    def ensure(self, texts_by_hash: Mapping[str, str], what: str) -> dict[str, F32]:
        """Vectors for all texts: cached ones, the rest embedded now for real (and cached)."""
        found = self.get(list(texts_by_hash))
        missing = [h for h in texts_by_hash if h not in found]
        if missing:
            log(f"{what}: embedding {len(missing)} uncached chunks for real (cached for reruns)")
            started = time.perf_counter()
            for start in range(0, len(missing), EMBED_GROUP):
                part = missing[start : start + EMBED_GROUP]
                vecs = self.embedder.embed([texts_by_hash[h] for h in part])
                new = {h: vecs[i] for i, h in enumerate(part)}
                self.put(new)
                found.update(new)
                self.embedded_now += len(part)
                done = start + len(part)
                if done % (EMBED_GROUP * 8) == 0 or done == len(missing):
                    rate = done / max(time.perf_counter() - started, 1e-9)
                    log(f"{what}: {done}/{len(missing)} embedded ({rate:.1f} chunks/s)")
        return found

    def seed(self, store: Store, hashes: list[str]) -> int:
        """Put the cached vectors of ``hashes`` into another index's cache; returns how many."""
        found = self.get(hashes)
        key, model, dims = self.space
        store.put_cache(key, model, dims, found)
        return len(found)

    def close(self) -> None:
        """Close the cache file."""
        self.store.close()
