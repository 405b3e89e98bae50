"""A fresh HOME for agent integration tests, and ``recalld`` run in it as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# A PATH with the system's tools and none of the agents' CLIs (the file-edit path).
PLAIN_PATH = os.pathsep.join(
    p for p in os.environ.get("PATH", "").split(os.pathsep) if "recalld-test-agents" not in p
)


def agent_env(home: Path, extra_path: str = "") -> dict[str, str]:
    """Environment with HOME = ``home``, recalld's data in ``home/rh``, nothing of the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "CODEX", "GEMINI"))}
    env.update(
        HOME=str(home),
        RECALLD_HOME=str(home / "rh"),
        PATH=os.pathsep.join(p for p in (extra_path, PLAIN_PATH) if p),
        XDG_CONFIG_HOME=str(home / ".config"),
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        MCP_TIMEOUT="60000",  # Claude Code's wait for an MCP server: a loaded machine is slow
    )
    env.pop("RECALLD_CONFIG", None)
    return env


def recalld(
    env: dict[str, str], *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``recalld ARGS`` (this checkout's console script) in ``env``."""
    exe = Path(sys.executable).parent / "recalld"
    return subprocess.run(
        [str(exe), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd or env["HOME"],
    )
