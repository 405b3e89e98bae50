"""How stale the index is when no daemon keeps it current (the in-process ``search``).

Without a daemon nobody indexes edits, and a search would answer from an old index without a
word. Syncing first is not cheap (loading the model alone takes seconds), so the CLI compares the
files on disk with the index instead, within a time budget (stats only, no reads), and says on
stderr what it found and how to start the daemon.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from recalld import paths
from recalld.config import Config
from recalld.index import tombstones
from recalld.index.store import FileRow, Store
from recalld.ingest import skipped_files
from recalld.ingest.filters import make_filter
from recalld.ingest.forgotten import Forgotten

BUDGET_S = 0.3  # a search that waits longer than this for a freshness check is worse off


@dataclass
class Freshness:
    """Files that differ from the index, as far as the budget allowed to look."""

    changed: list[str] = field(default_factory=list)  # new, edited or grown
    removed: int = 0
    complete: bool = True  # False: the budget ran out before every file was looked at
    last_indexed: float | None = None
    seconds: float = 0.0

    def stale(self) -> bool:
        """Whether the index is known (or may be) out of date."""
        return bool(self.changed or self.removed or not self.complete)


def check(store: Store, config: Config, budget_s: float = BUDGET_S) -> Freshness:
    """Compare memory files and transcripts on disk with their rows (size and mtime)."""
    started = time.monotonic()
    deadline = started + budget_s
    out = Freshness(last_indexed=store.last_indexed())
    memory = store.files("memory")
    forgotten = Forgotten(tombstones.all_of(store.conn), config.memory_roots())
    skipped = skipped_files.load(store)  # a sync would skip them again: not "changed"
    seen: set[str] = set()
    filter_ = make_filter(config.list("memory.extensions"))
    for root in config.memory_roots():
        for path, _ in filter_.walk(root):
            key = str(path)
            seen.add(key)
            if forgotten and forgotten.covers(key) is not None:
                continue  # kept out of the index on purpose
            if _differs(key, memory.get(key), grown_only=False, skipped=skipped.get(key)):
                out.changed.append(key)
            if time.monotonic() > deadline:
                out.complete = False
                break
        if not out.complete:
            break
    if out.complete:
        out.removed = sum(1 for key in memory if key not in seen)
        _check_transcripts(store, config, out, deadline, forgotten)
    out.seconds = round(time.monotonic() - started, 3)
    return out


def _check_transcripts(
    store: Store, config: Config, out: Freshness, deadline: float, forgotten: Forgotten
) -> None:
    from recalld.ingest.session_sync import transcript_files

    rows = store.files("sessions")
    for pattern in config.session_globs():
        for path in transcript_files([pattern]):
            if forgotten and forgotten.covers(path) is not None:
                continue
            if _differs(str(path), rows.get(str(path)), grown_only=True):
                out.changed.append(str(path))
        if time.monotonic() > deadline:
            out.complete = False
            return


def _differs(
    key: str,
    row: FileRow | None,
    *,
    grown_only: bool,
    skipped: tuple[str, int, int] | None = None,
) -> bool:
    """A file that is new, or whose size or mtime is not the indexed one (transcripts: grown);
    not one that a sync skipped as it is now (``skipped``)."""
    try:
        st = os.stat(key)
    except OSError:
        return False  # vanished meanwhile: counted as removed next time
    if row is None:
        return not skipped_files.unchanged(skipped, st)
    if grown_only:
        return st.st_size > row.size
    return st.st_size != row.size or st.st_mtime_ns != row.mtime_ns


def note(found: Freshness, now: float | None = None) -> str | None:
    """The stderr line for a search answered without a daemon, or None when the index is fresh."""
    if not found.stale():
        return None
    age = _age(found.last_indexed, now or time.time())
    if found.changed or found.removed:
        parts = []
        if found.changed:
            n = len(found.changed)
            parts.append(f"{n} file{'s' if n != 1 else ''} new or changed")
        if found.removed:
            parts.append(f"{found.removed} deleted")
        what = f"{' and '.join(parts)} since then"
        if found.changed:
            what += f" (e.g. {_short(found.changed[0])})"
        if not found.complete:
            what = f"at least {what}"
    else:
        what = f"could not check the files within {BUDGET_S:g} s"
    return (
        f"note: no recalld daemon is running and the index {age}; {what}. "
        "This answer may miss them: run `recalld sync` once, or keep the daemon running "
        "(`recalld serve`, or `recalld service install`) to index edits as they happen."
    )


def _age(ts: float | None, now: float) -> str:
    if ts is None:
        return "has never been synced"
    minutes = max(now - ts, 0.0) / 60
    if minutes < 1:
        return "was last updated less than a minute ago"
    if minutes < 120:
        return f"was last updated {minutes:.0f} minutes ago"
    return f"was last updated {minutes / 60:.0f} hours ago"


def _short(path: str) -> str:
    home = str(paths.user_home())
    return "~" + path[len(home) :] if path.startswith(home + os.sep) else path
