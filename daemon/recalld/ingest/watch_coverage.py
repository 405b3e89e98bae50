"""Which memory folders inotify really watches, and what to say when it does not.

When the per-user inotify limits are reached (``fs.inotify.max_user_watches``: ENOSPC, or
``max_user_instances``: EMFILE), watchdog fails on the root, or silently skips the folders it
could not watch. Either way new notes and edits there would never be indexed. The watcher
therefore compares the folders under each root with the watches the kernel lists for this
process (``/proc/self/fdinfo``), scans the folders that are not watched every
``sync.scan_interval_s``, and says so in ``status.warnings`` and the tray.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

from recalld.ingest.filters import PathFilter

LIMIT_HELP = (
    "raise it (e.g. `sysctl fs.inotify.max_user_watches=524288` and "
    "`fs.inotify.max_user_instances=1024`) or close programs that watch many folders"
)


def watch_problem(exc: OSError) -> str:
    """Which limit a failed watch ran into (the first words of the warning)."""
    if exc.errno == errno.ENOSPC:
        return "inotify watch limit reached (fs.inotify.max_user_watches)"
    if exc.errno == errno.EMFILE:
        return "inotify instance limit reached (fs.inotify.max_user_instances or open files)"
    return f"cannot watch: {exc.strerror or exc}"


def watched_inodes() -> set[tuple[int, int]] | None:
    """(device, inode) of every inotify watch of this process; None where /proc cannot say."""
    found: set[tuple[int, int]] = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue  # closed meanwhile
        for line in lines:
            if not line.startswith("inotify wd:"):
                continue
            fields = dict(part.split(":", 1) for part in line.split()[1:] if ":" in part)
            sdev, ino = int(fields["sdev"], 16), int(fields["ino"], 16)
            # The kernel prints its own dev_t layout (major << 20 | minor).
            found.add((os.makedev(sdev >> 20, sdev & 0xFFFFF), ino))
    return found


def unwatched_folders(root: Path, filter_: PathFilter) -> list[Path] | None:
    """The top-most folders under ``root`` (itself included) that no inotify watch covers.

    Only folders the indexer descends into count; links are not followed (as in the walk).
    None when this system cannot tell.
    """
    watched = watched_inodes()
    if watched is None:
        return None
    missing: list[Path] = []
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            st = os.stat(folder)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in watched:
            missing.append(Path(folder))
            continue  # a scan of this folder covers everything under it
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False) and filter_.dir_ok(entry.name):
                        stack.append(entry.path)
        except OSError:
            continue
    return sorted(missing)


class Coverage:
    """Per root: the folders not watched and why (thread-safe; read by ``status``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._missing: dict[Path, tuple[list[Path], str]] = {}

    def set(self, root: Path, folders: list[Path], problem: str) -> None:
        """Record the unwatched folders of ``root`` (an empty list: fully watched)."""
        with self._lock:
            if folders:
                self._missing[root] = (list(folders), problem)
            else:
                self._missing.pop(root, None)

    def set_all(self, roots: list[Path], problem: str) -> None:
        """Nothing is watched (no inotify instance)."""
        for root in roots:
            self.set(root, [root], problem)

    def clear(self, root: Path) -> None:
        """A missing root: nothing to watch or scan (the root monitor handles it)."""
        self.set(root, [], "")

    def folders(self, root: Path) -> list[Path]:
        """The folders of ``root`` that are not watched."""
        with self._lock:
            return list(self._missing.get(root, ([], ""))[0])

    def problem_of(self, root: Path) -> str:
        """Why ``root`` (or part of it) is not watched, or ''."""
        with self._lock:
            return self._missing.get(root, ([], ""))[1]

    def degraded(self) -> bool:
        """Whether any folder is not watched."""
        with self._lock:
            return bool(self._missing)

    def warnings(self, scan_interval_s: float) -> list[str]:
        """One line per root with unwatched folders."""
        with self._lock:
            items = sorted(self._missing.items())
        out = []
        for root, (folders, problem) in items:
            what = "not watched" if folders == [root] else f"{len(folders)} folders not watched"
            out.append(
                f"{problem}: {root}: {what}, so changes there are found by a scan every "
                f"{scan_interval_s:g} s instead of at once; {LIMIT_HELP}"
            )
        return out
