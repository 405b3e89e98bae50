"""Where things are: the lines that open ``recalld status``.

A new user's first questions are where the notes go and what recalld looks at; status answers
them before anything else (the serve log does the same with :mod:`recalld.serve.config_overview`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # status_head runs in the CLI's fast path, which must not load the config
    pass


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
