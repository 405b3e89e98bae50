"""What ``status`` reads off the index, kept per reader until another connection commits.

The tray and agents poll ``status``; the index's identity, the transcript summary and the mount
roots change only when the writer commits. Each reader connection keeps them with the
``PRAGMA data_version`` it read them at (SQLite changes that value when any *other* connection
commits), so a poll costs one pragma instead of five queries, and an answer is never older than
the last commit it could see. The cache lives on the :class:`Store` object: a swapped-in index
file gets new readers, hence nothing of the old file's.
"""

from __future__ import annotations

import json
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld.index.store import Identity, Store, prefix_bounds


@dataclass(frozen=True)
class StatusFacts:
    """One reading of the index for ``status`` (treat the containers as read-only)."""

    identity: Identity | None
    transcripts: dict[str, Any]  # Store.sessions_summary()
    mount_roots: frozenset[str]  # memory roots that were mount points when last seen


_cache: weakref.WeakKeyDictionary[Store, tuple[int, StatusFacts]] = weakref.WeakKeyDictionary()


def status_facts(store: Store) -> StatusFacts:
    """The facts of ``store`` as of now: read again only after another connection committed."""
    with store.lock:
        version = store.data_version()
        cached = _cache.get(store)
        if cached is not None and cached[0] == version:
            return cached[1]
        facts = StatusFacts(
            identity=store.identity(),
            transcripts=store.sessions_summary(),
            mount_roots=frozenset(mount_roots(store)),
        )
        _cache[store] = (version, facts)
        return facts


def mount_roots(store: Store) -> list[str]:
    """Memory roots that were mount points when last seen (meta ``mount_roots``)."""
    raw = store.meta("mount_roots")
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def identity_dict(identity: Identity | None) -> dict[str, Any] | None:
    """The ``identity`` block of ``status``."""
    if identity is None:
        return None
    return {
        "provider": identity.label,
        "provider_key": identity.provider_key,
        "model": identity.model,
        "dims": identity.dims,
        "chunking": identity.chunking,
    }


def files_under(store: Store, root: Path) -> int:
    """Indexed files under a folder (what a missing root still has in the index)."""
    lo, hi = prefix_bounds(str(root) + os.sep)
    row = store.conn.execute(
        "SELECT count(*) FROM files WHERE path >= ? AND path < ?", (lo, hi)
    ).fetchone()
    return int(row[0]) if row else 0
