"""Which dirty paths the writer syncs now, and which wait: a storm must not hold up an edit.

A folder rename storm hands the writer tens of thousands of paths (20,000 renames: 40,000).
Synced in one go they held every later edit for minutes. The writer therefore syncs at most
:data:`SLICE_PATHS` paths at a time and queues the rest again as a *deferred* job, behind what
arrives meanwhile; the paths of fresh jobs (newest first) go before deferred ones, so an edit made
during a storm waits for one slice, not for the storm.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

SLICE_PATHS = 400  # ~1 s of syncing on a loaded 2-core host (keyword first)


def split_paths(
    groups: Sequence[tuple[Iterable[Path], bool]], limit: int = SLICE_PATHS
) -> tuple[list[Path], list[Path]]:
    """``groups`` are the queued jobs' paths in arrival order, each with whether it was
    deferred; returns the paths to sync now (at most ``limit``) and those to queue again."""
    fresh = [paths for paths, deferred in reversed(groups) if not deferred]
    waiting = [paths for paths, deferred in groups if deferred]
    ordered: dict[Path, None] = {}
    for paths in (*fresh, *waiting):
        ordered.update(dict.fromkeys(paths))
    everything = list(ordered)
    return everything[:limit], everything[limit:]
