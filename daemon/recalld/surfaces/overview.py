"""Where things are: the lines that open the serve log and ``recalld status``.

A new user's first questions are where the notes go and what recalld looks at; both places
answer them before anything else.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recalld import paths

if TYPE_CHECKING:  # status_head runs in the CLI's fast path, which must not load the config
    from recalld.config import Config


def describe_config(config: Config, config_path: Path) -> list[str]:
    """The serve log's first lines: memory folders, transcript globs, index, config file."""
    roots = config.memory_roots()
    missing = [str(r) for r in roots if not r.is_dir()]
    globs = config.session_globs()
    state = (
        "edits apply live, SIGHUP reloads"
        if config_path.exists()
        else "not present: defaults; create it to configure, it is read when saved"
    )
    lines = [
        f"notes: memory folders {', '.join(map(str, roots))}"
        + (f" (not there yet: {', '.join(missing)})" if missing else ""),
        f"transcripts: {', '.join(globs) if globs else 'none (sessions.paths is empty)'}",
        f"index: {paths.index_path(config.base_dir)}",
        f"config: {config_path} ({state})",
    ]
    return lines


def status_head(status: dict[str, Any]) -> list[str]:
    """The first lines of ``recalld status``: where notes live and which folders are watched."""
    daemon = status.get("daemon")
    if isinstance(daemon, dict):
        watched = "watched" if daemon.get("watching") else "not watched (paused or sync.watch off)"
    else:
        watched = "not watched: no daemon running (`recalld serve`)"
    roots = status.get("memory_roots") or []
    globs = status.get("session_globs") or []
    config = status.get("config")
    config_path = status.get("config_path")
    if isinstance(config, dict):
        config_path = config.get("path") or config_path
        when = time.strftime("%H:%M:%S", time.localtime(config.get("loaded_at") or 0))
        state = f"loaded {when}, edits apply live"
        if config.get("exists") is False:
            state = "no file: the defaults; a file written there applies live (`recalld init`)"
        if config.get("error"):
            state = "NOT APPLIED, see the warning below"
    else:
        state = "read at this call" if config_path else "none, defaults"
    return [
        f"memory:    {', '.join(roots) or '(none)'} ({watched})",
        f"sessions:  {', '.join(globs) or '(none: sessions.paths is empty)'}",
        f"index:     {status.get('index_path')}",
        f"config:    {config_path or '(no file)'} ({state})",
    ]
