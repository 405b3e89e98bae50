"""Does the index match the settings? The identity it was built with against the one wanted now.

A different vector space (provider, model, width) or different chunking settings mean the index
must be rebuilt (the engine answers keyword-only until it is, and says why); a keyword-only
index that gains a provider only needs its vectors back-filled (same chunks).
"""

from __future__ import annotations

from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.index.store import Store
from recalld.ingest.indexer import identity_for


def check_writable(writer: Store, config: Config, embedder: Embedder | None) -> str | None:
    """Why a rebuild is due (None: none is); records the identity of a new index."""
    stored = writer.identity()
    wanted = identity_for(config, embedder)
    if stored is None:
        writer.set_identity(wanted)
        return None
    if stored.chunking != wanted.chunking:
        return "the chunking settings changed"
    if wanted.provider_key and stored.provider_key and not stored.same_space(wanted):
        return f"the provider changed from {stored.label} to {wanted.label}"
    if wanted.provider_key and not stored.provider_key:
        writer.set_identity(wanted)  # a keyword-only index gains vectors: a backfill is enough
    return None


def check_readonly(store: Store, config: Config, embedder: Embedder | None) -> str | None:
    """Why this process cannot use the index's vectors (another vector space), or None."""
    stored = store.identity()
    if stored is None or not stored.provider_key:
        return None
    wanted = identity_for(config, embedder)
    if wanted.provider_key and not stored.same_space(wanted):
        return f"the index was built with {stored.label}, not {wanted.label}"
    return None
