"""Paths of the daemon's files. All locations derive from :mod:`recalld_client.locations`."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from recalld_client import locations

config_path = locations.config_path
data_dir = locations.data_dir
runtime_dir = locations.runtime_dir
socket_path = locations.socket_path
env = locations.env


def index_path(base: Path | None = None) -> Path:
    """The SQLite index file."""
    return (base or data_dir()) / "index.sqlite"


def default_memory_dir(base: Path | None = None) -> Path:
    """The default memory folder (``memory/`` in the data dir)."""
    return (base or data_dir()) / "memory"


def log_dir(base: Path | None = None) -> Path:
    """Folder of log files (used by the launchd agent; systemd logs to the journal)."""
    return (base or data_dir()) / "logs"


def user_home() -> Path:
    """The user's home folder (for the default transcript globs)."""
    return Path.home()


# path -> ((st_dev, st_ino) it led to, its resolved form); a few memory roots per config.
_resolved: dict[str, tuple[tuple[int, int], Path]] = {}
_MAX_RESOLVED = 256


def resolve_folder(path: Path) -> Path:
    """``path.resolve()``, remembered while the path leads to the same folder.

    ``status`` resolves the memory roots on every call, and resolving walks each component
    (tens of microseconds); one ``stat`` tells whether the answer still holds, since a
    re-pointed symlink anywhere on the way leads to another folder (another inode). A path
    that does not exist is resolved every time.
    """
    key = str(path)
    try:
        st = os.stat(path)
    except OSError:
        return path.resolve()
    ident = (st.st_dev, st.st_ino)
    known = _resolved.get(key)
    if known is not None and known[0] == ident:
        return known[1]
    resolved = path.resolve()
    if len(_resolved) >= _MAX_RESOLVED:
        _resolved.clear()
    _resolved[key] = (ident, resolved)
    return resolved


def glob_base(pattern: str) -> Path:
    """The folder part of a glob before its first magic part (``~/.claude/projects/**``)."""
    fixed: list[str] = []
    for part in Path(pattern).parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path()
