"""Where recalld keeps things: the one place that reads ``RECALLD_HOME`` and ``RECALLD_CONFIG``.

``RECALLD_HOME`` overrides every platform default: config, index, socket, logs and the default
``memory/`` folder all live in that one folder. Without it the platform's directories are used
(platformdirs). The daemon imports this module so that client and daemon always agree on the
socket's location.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # mypy takes it as true; typing costs `recalld search` ~3 ms to import
if TYPE_CHECKING:
    from typing import Any

APP = "recalld"
SOCKET_NAME = "recalld.sock"


def _platformdirs() -> Any:
    # Imported on first need: with RECALLD_HOME (or XDG_RUNTIME_DIR for the socket) a CLI call
    # never needs it, and it costs several ms of the start-up `recalld search` is timed on.
    import platformdirs

    return platformdirs


def env(name: str) -> str | None:
    """One environment variable, or None when unset or empty (the only reader of os.environ)."""
    value = os.environ.get(name)
    return value if value else None


def home() -> Path | None:
    """The ``RECALLD_HOME`` folder, if set."""
    value = env("RECALLD_HOME")
    return Path(value).expanduser().resolve() if value else None


def data_dir() -> Path:
    """Folder of the index, logs and the default memory folder."""
    h = home()
    return h if h else Path(_platformdirs().user_data_dir(APP))


def config_path() -> Path:
    """The config file: ``RECALLD_CONFIG``, ``$RECALLD_HOME/config.toml`` or the platform's."""
    explicit = env("RECALLD_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    h = home()
    if h:
        return h / "config.toml"
    return Path(_platformdirs().user_config_dir(APP)) / "config.toml"


def _xdg_user_dir(variable: str, default: str) -> Path | None:
    """platformdirs' Linux answer for a user folder of recalld, without importing it (~8 ms of
    `recalld search`), or None where only platformdirs can tell. A hint: callers that find it
    differs from what they compare it with ask platformdirs before concluding anything."""
    if not sys.platform.startswith("linux"):
        return None
    base = env(variable) or ""
    if not os.path.isabs(base):  # platformdirs ignores a relative XDG_* folder too
        user_home = env("HOME") or ""
        if not os.path.isabs(user_home):
            return None
        base = os.path.join(user_home, default)
    return Path(base) / APP


def config_path_hint() -> Path | None:
    """:func:`config_path` where it is known without platformdirs, else None."""
    if env("RECALLD_CONFIG") or home():
        return config_path()
    folder = _xdg_user_dir("XDG_CONFIG_HOME", ".config")
    return folder / "config.toml" if folder else None


def data_dir_hint() -> Path | None:
    """:func:`data_dir` where it is known without platformdirs, else None."""
    return home() or _xdg_user_dir("XDG_DATA_HOME", ".local/share")


def runtime_dir() -> Path:
    """Private folder (0700) that holds the socket."""
    h = home()
    if h:
        return h / "run"
    if sys.platform.startswith("linux"):
        xdg = env("XDG_RUNTIME_DIR")
        if xdg:
            return Path(xdg) / APP
    # Without XDG_RUNTIME_DIR (ssh sessions, containers, cron, `env -i`) platformdirs warns on
    # every call and falls back to a checked private folder; that fallback is what we want, and
    # a warning printed before every `recalld search` answer is noise the user cannot act on.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(_platformdirs().user_runtime_dir(APP))


def socket_path() -> Path:
    """The daemon's Unix socket (on Windows the pipe name is derived from it)."""
    return runtime_dir() / SOCKET_NAME


def pipe_name() -> str:
    """The Windows named pipe for this home (one daemon per home)."""
    import hashlib

    digest = hashlib.sha256(str(socket_path()).encode()).hexdigest()[:16]
    user = env("USERNAME") or "user"
    return rf"\\.\pipe\recalld-{user}-{digest}"
