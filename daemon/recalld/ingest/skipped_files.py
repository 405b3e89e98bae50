"""The files a sync could not index, kept in the index's ``meta`` table.

The daemon holds them in memory for ``status``; kept in the index as well, they outlive it, so
that a search answered without a daemon does not count a skipped file as "new or changed" at
every call (a sync skips it again: the advice to sync would never clear the note), and
``status`` without a daemon still lists them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from recalld.index.store import Store

__all__ = ["KEY", "MAX_KEPT", "Skipped", "load", "save", "unchanged"]

KEY = "skipped_files"
MAX_KEPT = 1_000  # files kept by name; a sync's report lists at most 100 of them anyway

Skipped = dict[str, tuple[str, int, int]]  # path -> (reason, size, mtime_ns) when skipped


def save(store: Store, skipped: Mapping[str, str]) -> None:
    """Keep ``skipped`` (path -> reason) with each file's size and mtime now; writes only on a
    change (a sync that skipped nothing new writes nothing)."""
    kept: Skipped = {}
    for path, reason in sorted(skipped.items())[:MAX_KEPT]:
        try:
            st = os.stat(path)
        except OSError:
            continue  # gone: nothing to leave out of a count
        kept[path] = (reason, st.st_size, st.st_mtime_ns)
    text = json.dumps(kept, sort_keys=True)
    if store.meta(KEY) != text and (kept or store.meta(KEY) is not None):
        store.set_meta(KEY, text)


def load(store: Store) -> Skipped:
    """The kept files (empty when none, or when the value is not what :func:`save` writes)."""
    try:
        raw = json.loads(store.meta(KEY) or "{}")
        return {str(p): (str(r), int(s), int(m)) for p, (r, s, m) in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return {}  # damaged: a sync writes it anew


def unchanged(entry: tuple[str, int, int] | None, st: os.stat_result) -> bool:
    """Whether a file whose stat is ``st`` is as it was when a sync skipped it."""
    return entry is not None and (entry[1], entry[2]) == (st.st_size, st.st_mtime_ns)
