"""The ``status`` answer: what the index holds, what the provider and the writes are doing.

Assembled from the parts that know each fact (the index's counts and identity, the provider,
the writes' :class:`~recalld.ingest.sync_state.SyncState`), and passed through the gate on its
way out: errors and reasons quote what failed, which can be a line of a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recalld import __version__
from recalld.config import Config
from recalld.embedding.active import ActiveProvider
from recalld.index import status_facts, tombstones
from recalld.index.store import Store
from recalld.ingest import skipped_files
from recalld.ingest.index_writes import root_problems
from recalld.ingest.sessions.redaction import counts as redaction_counts
from recalld.ingest.sync_state import SyncState
from recalld.ingest.vector_backfill import vectors_missing
from recalld.retrieval.served import status_texts

MAX_SKIPPED_SHOWN = 100  # files listed by name in status["skipped_files"]


def status(
    state: SyncState,
    store: Store,
    counts: dict[str, int],
    config: Config,
    provider: ActiveProvider,
    index_path: Path,
    held: dict[str, Any],
) -> dict[str, Any]:
    """``status`` read through ``store`` (the caller's reader); ``held``: what is in memory."""
    roots = config.memory_roots()  # resolved once: a path walk per root
    facts = status_facts.status_facts(store)
    # A daemon knows its last sync; a CLI's engine reads it (a scan of ``files``).
    last_sync = state.last_sync or store.last_indexed()
    missing_roots = [
        {"path": str(r), "reason": why, "files_kept": status_facts.files_under(store, r)}
        for r, why in root_problems(roots, facts.mount_roots).items()
    ]
    # Without a daemon (or before its first sync) the last sync's list, kept in the index.
    skipped = sorted(state.skipped.items()) or sorted(
        (p, reason) for p, (reason, _, _) in skipped_files.load(store).items()
    )
    # From the index, not the writer's running count (vectors_missing says why).
    vectors = vectors_missing(counts, vector_table=store.has_vec_table())
    embedder = provider.embedder
    answer = {
        "version": __version__,
        "state": state.state,
        "provider": embedder.label if embedder else "none",
        "provider_reason": provider.choice.reason,
        "degraded": degraded(state.needs_reindex, provider),
        "identity": status_facts.identity_dict(facts.identity),
        "counts": counts,
        "progress": {**state.progress.as_dict(), **vectors},
        "vectors": vectors,
        "last_sync": last_sync,
        "transcripts": dict(facts.transcripts),
        "last_report": state.last_report.as_dict() if state.last_report else None,
        "last_error": state.last_error,
        "index_path": str(index_path),
        "memory_roots": [str(r) for r in roots],
        "session_globs": config.session_globs(),
        "config_path": str(config.source) if config.source else None,
        "provider_health": provider.health(),
        "missing_roots": missing_roots,
        "skipped_files": [{"path": p, "reason": r} for p, r in skipped[:MAX_SKIPPED_SHOWN]],
        "skipped_total": len(skipped),
        "redactions": redaction_counts(),  # since this process started: indexed, served
        "forgotten": len(tombstones.all_of(store.conn)),  # `recalld forget --list`
        **held,
    }
    return status_texts(answer)


def degraded(
    needs_reindex: str | None, provider: ActiveProvider, *, outage: bool = True
) -> str | None:
    """Why vector search is off, or None (``outage=False``: leave out a provider outage, which
    a search that probes the provider again does not report)."""
    if provider.embedder is None:
        return provider.choice.reason
    if needs_reindex:
        return f"{needs_reindex}; keyword-only until `recalld reindex` completes"
    return provider.outage() if outage else None
