"""Which dirty paths the writer syncs now, and which wait: a storm must not hold up an edit.

A folder rename storm hands the writer tens of thousands of paths (20,000 renames: 40,000).
Synced in one go they held every later edit for minutes. The writer therefore syncs at most
:data:`SLICE_PATHS` paths at a time and queues the rest again as a *deferred* job, behind what
arrives meanwhile; the paths of fresh jobs go before deferred ones, so an edit made during a
storm waits for one slice, not for the storm. Within the fresh paths the most recently modified
go first: an edit that becomes due together with a storm (both read off the kernel queue at once,
as after a stall) must not wait behind it because of how its name sorts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

SLICE_PATHS = 400  # ~1 s of syncing on a loaded 2-core host (keyword first)


def split_paths(
    groups: Sequence[tuple[Iterable[Path], bool]], limit: int = SLICE_PATHS
) -> tuple[list[Path], list[Path]]:
    """``groups`` are the queued jobs' paths in arrival order, each with whether it was
    deferred; returns the paths to sync now (at most ``limit``) and those to queue again."""
    fresh: dict[Path, None] = {}
    for paths, deferred in reversed(groups):
        if not deferred:
            fresh.update(dict.fromkeys(paths))
    ordered = dict.fromkeys(newest_first(fresh)) if len(fresh) > limit else fresh
    for paths, deferred in groups:
        if deferred:
            ordered.update(dict.fromkeys(paths))
    everything = list(ordered)
    return everything[:limit], everything[limit:]


def newest_first(paths: Iterable[Path]) -> list[Path]:
    """``paths`` by modification time, newest first; vanished ones (a rename's old name) last,
    in their given order. One ``lstat`` each, only for a batch bigger than a slice."""

    def mtime(path: Path) -> int:
        try:
            return os.lstat(path).st_mtime_ns
        except OSError:
            return -1

    return sorted(paths, key=mtime, reverse=True)  # stable: ties keep their order
