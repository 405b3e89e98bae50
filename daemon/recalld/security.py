"""File-permission hygiene: private files for the index, warnings about an exposed config.

The index holds the text of every note and transcript, so the daemon creates its files with
umask 077 and tightens index files left readable by others by an older version or another tool.
The config file may hold a key (``embedding.api_key``) and decides where notes are sent
(``embedding.base_url``), so a config that other users can read (with a key in it) or write
is reported: in the daemon's log at start-up, in ``status`` (``warnings``) and by
``recalld status``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from recalld.config import SETTINGS, Config

PRIVATE_UMASK = 0o077
_SECRET_SUFFIXES = ("api_key", "_token", "_secret", "password")
#: Environment variables the providers read keys from by default (embedding and rerank).
KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "VOYAGE_API_KEY",
    "COHERE_API_KEY",
    "CO_API_KEY",
    "JINA_API_KEY",
)
MASK = "***"


def secret_keys() -> list[str]:
    """Settings that hold a secret itself (not the name of a variable holding it)."""
    return list(_secret_keys())


@functools.cache
def _secret_keys() -> tuple[str, ...]:
    # The settings table is fixed at import; every ``status`` asks (via config_warnings).
    return tuple(
        s.key
        for s in SETTINGS
        if s.key.rsplit(".", 1)[-1].endswith(_SECRET_SUFFIXES) and isinstance(s.default, str)
    )


def config_warnings(config: Config) -> list[str]:
    """What is unsafe about the config file's permissions (empty when nothing is)."""
    path = config.source
    if path is None or sys.platform == "win32":
        return []
    try:
        st = os.stat(path)
    except OSError:
        return []
    mode = stat.S_IMODE(st.st_mode)
    out: list[str] = []
    secrets = [k for k in _secret_keys() if _set(config, k)]
    if secrets and mode & 0o077:
        out.append(
            f"config file {path} holds {', '.join(secrets)} and is readable by other users "
            f"(mode {mode:04o}): run `chmod 600 {path}`, or keep the key in an environment "
            "variable (embedding.api_key_env) instead"
        )
    if mode & 0o022:
        out.append(
            f"config file {path} is writable by other users (mode {mode:04o}): whoever can edit "
            "it decides which folders are indexed and where their text is sent "
            f"(embedding.base_url); run `chmod go-w {path}`"
        )
    if st.st_uid != os.getuid() and st.st_uid != 0:
        out.append(
            f"config file {path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): "
            "another user controls what recalld indexes and where it sends it"
        )
    return out


def _set(config: Config, key: str) -> bool:
    try:
        return bool(config.get(key))
    except KeyError:
        return False


def tighten(paths: list[Path]) -> list[Path]:
    """chmod 600 those of ``paths`` that are ours and open to others; returns the changed ones."""
    changed: list[Path] = []
    if sys.platform == "win32":
        return changed
    for path in paths:
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if (
                stat.S_ISREG(st.st_mode)
                and st.st_uid == os.getuid()
                and stat.S_IMODE(st.st_mode) & 0o077
            ):
                os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
                changed.append(path)
    return changed


def private_log_dir(folder: Path) -> Path:
    """Create the log folder 0700 (and tighten it and its logs if they are open to others).

    Logs quote note paths, queries and errors: as private as the index."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if sys.platform != "win32":
        with contextlib.suppress(OSError):
            st = os.lstat(folder)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
                os.chmod(folder, 0o700)
        with contextlib.suppress(OSError):
            tighten([p for p in folder.iterdir() if p.name.endswith(".log")])
    return folder


def open_private_log(path: Path) -> BinaryIO:
    """``path`` opened for appending, created 0600 (an existing file is tightened to 0600)."""
    private_log_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    tighten([path])
    return os.fdopen(fd, "ab")


def index_files(index_path: Path) -> list[Path]:
    """The index and its SQLite side files."""
    return [index_path, *(Path(f"{index_path}{s}") for s in ("-wal", "-shm", "-journal"))]


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Files created inside are readable by their owner only (the previous umask after)."""
    if sys.platform == "win32":
        yield
        return
    old = os.umask(PRIVATE_UMASK)
    os.umask(old | PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(old)


def secret_values(config: Config, env: Mapping[str, str] | None = None) -> list[str]:
    """The API keys this daemon may hold: set in the config, or in the variables it reads."""
    env = os.environ if env is None else env
    values = {str(config.get(k)) for k in secret_keys() if _set(config, k)}
    names = set(KEY_VARIABLES)
    for setting in SETTINGS:
        if setting.key.endswith("api_key_env") and _set(config, setting.key):
            names.add(str(config.get(setting.key)))
    values.update(env[name] for name in names if env.get(name))
    # Longest first, so that a key containing another is masked whole; short values are not
    # keys (and masking them would mangle ordinary log text).
    return sorted((v for v in values if len(v) >= 8), key=len, reverse=True)
