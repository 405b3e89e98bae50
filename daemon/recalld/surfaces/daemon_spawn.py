"""The daemon started in the background: ``recalld serve`` detached, its output in a private log.

Used by ``recalld start``, by the MCP shim and hooks that start one on demand, and by ``recalld
service install`` when the service it handed over to did not start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.serve.idle_stop import STARTED_BY_ENV


def log_path() -> Path:
    """Where a daemon started in the background writes its log."""
    return paths.log_dir() / "daemon.log"


def spawn_daemon(log: Path, started_by: str, config: Path | None = None) -> subprocess.Popen[bytes]:
    """``recalld serve`` in its own session, detached from this process's stdio."""
    from recalld.security import open_private_log

    kwargs: dict[str, Any] = {}
    if sys.platform == "win32":
        kwargs["creationflags"] = (
            subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.DETACHED_PROCESS  # type: ignore[attr-defined,unused-ignore]
        )
    else:
        # Its own session: the caller's process group being killed must not kill the daemon.
        kwargs["start_new_session"] = True
    argv = [sys.executable, "-m", "recalld"]
    if config is not None:
        argv += ["--config", str(config.expanduser().resolve())]
    env = dict(os.environ, **{STARTED_BY_ENV: started_by})
    with open_private_log(log) as logf:  # 0600 in a 0700 folder: logs quote notes
        return subprocess.Popen(
            [*argv, "serve"],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            close_fds=True,
            cwd=os.path.expanduser("~"),
            env=env,
            **kwargs,
        )
