"""Paths of the daemon's files. All locations derive from :mod:`recalld_client.locations`."""

from __future__ import annotations

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
