"""Claude Code: the MCP server in ``~/.claude.json`` (user) or ``.mcp.json`` (project), and the
hooks in ``~/.claude/settings.json`` (user) or ``.claude/settings.json`` (project).

``CLAUDE_CONFIG_DIR`` moves both user files, as it does for Claude Code itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from recalld.surfaces.integrate import json_servers
from recalld.surfaces.integrate.agent import (
    SERVER_NAME,
    Agent,
    FileEdit,
    Registration,
    home_path,
    recalld_executable,
)
from recalld.surfaces.integrate.claude_hooks import hooks_edit


def config_dir() -> Path:
    return home_path("CLAUDE_CONFIG_DIR", Path.home() / ".claude")


def mcp_file(scope: str) -> Path:
    if scope == "project":
        return Path.cwd() / ".mcp.json"
    # Claude Code keeps .claude.json in CLAUDE_CONFIG_DIR when set, else beside ~/.claude.
    moved = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(moved).expanduser() / ".claude.json" if moved else Path.home() / ".claude.json"


def settings_file(scope: str) -> Path:
    if scope == "project":
        return Path.cwd() / ".claude" / "settings.json"
    return config_dir() / "settings.json"


def edits(scope: str, command: list[str]) -> list[FileEdit]:
    entry = {"type": "stdio", "command": command[0], "args": command[1:]}
    return [
        FileEdit(
            mcp_file(scope),
            "MCP server",
            json_servers.server_edit(entry),
            cli_add=["mcp", "add", "--scope", scope, SERVER_NAME, "--", *command],
            cli_remove=["mcp", "remove", "--scope", scope, SERVER_NAME],
        ),
        FileEdit(settings_file(scope), "hooks", hooks_edit(recalld_executable())),
    ]


def registration(scope: str) -> Registration | None:
    return json_servers.registration(mcp_file(scope))


def agent() -> Agent:
    return Agent(
        name="claude-code",
        title="Claude Code",
        cli="claude",
        scopes=("user", "project"),
        transcripts=str(config_dir() / "projects" / "**" / "*.jsonl"),
        edits=edits,
        registration=registration,
        installed_marker=config_dir,
    )
