"""Does the index match the settings? The identity it was built with against the one wanted now.

A different vector space (provider, model, width) or different chunking settings mean the index
must be rebuilt (the engine answers keyword-only until it is, and says why); a keyword-only
index that gains a provider only needs its vectors back-filled (same chunks).
"""

from __future__ import annotations

import json

from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.index.store import Identity, Store

# md-4: front matter names and context in the first chunk's context; md-5: notes are redacted;
# md-6: passwords said in a sentence are redacted (rebuilt out of indexes made before).
CHUNKER_VERSION = "md-6"
# sessions-4: new secret shapes (issue 41), so secrets indexed before are rebuilt out; sessions-5:
# passwords said in a sentence, likewise.
SESSION_CHUNKER_VERSION = "sessions-5"  # 2: whole transcripts, chunk kinds; 3: summaries, hooks
# (3 re-reads transcripts indexed before: compaction summaries, hook output, fuller toolUseResult)


def chunking_identity(config: Config) -> str:
    """The chunking settings that an index is built with (part of its identity)."""
    return json.dumps(
        {
            "chunker": CHUNKER_VERSION,
            "session_chunker": SESSION_CHUNKER_VERSION,
            "include_thinking": config.bool("sessions.include_thinking"),
            "tool_result_chars": config.int("sessions.tool_result_chars"),
            "embed_kinds": sorted(config.list("sessions.embed_kinds")),
            "embed_tool_head_chars": config.int("sessions.embed_tool_head_chars"),
            "max_tokens": config.int("chunking.max_tokens"),
            "front_matter": config.bool("chunking.front_matter"),
            "target_tokens": config.int("chunking.target_tokens"),
            "chat_windows": config.bool("chunking.chat_windows"),
            "chat_window_overlap": config.float("chunking.chat_window_overlap"),
            "chat_window_chars": config.int("chunking.chat_window_chars"),
            "message_window_overlap": config.float("chunking.message_window_overlap"),
        },
        sort_keys=True,
    )


def identity_for(config: Config, embedder: Embedder | None) -> Identity:
    """The identity an index built now with this config and provider would have."""
    if embedder is None:
        return Identity("", "none", "", 0, chunking_identity(config))
    return Identity(
        embedder.key, embedder.label, embedder.model, embedder.dims, chunking_identity(config)
    )


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
