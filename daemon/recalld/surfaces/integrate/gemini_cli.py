"""Gemini CLI: the MCP server in ``~/.gemini/settings.json`` (user) or ``.gemini/settings.json``
(project); its saved chats are ``~/.gemini/tmp/<project>/chats/session-*.jsonl``."""

from __future__ import annotations

from pathlib import Path

from recalld.surfaces.integrate import json_servers
from recalld.surfaces.integrate.agent import SERVER_NAME, Agent, FileEdit, Registration


def gemini_dir() -> Path:
    return Path.home() / ".gemini"


def settings_file(scope: str) -> Path:
    return (Path.cwd() if scope == "project" else Path.home()) / ".gemini" / "settings.json"


#: Gemini CLI's own request timeout for the server, in ms. Without one, `gemini mcp list` gives a
#: server 5 s to answer, which a first start of `recalld mcp` on a busy machine can miss (it read
#: "Disconnected" with the cores taken by other work); each call recalld makes is bounded at 60 s
#: by its own client, so 90 s never cuts a call short that recalld would finish.
TIMEOUT_MS = 90_000


def edits(scope: str, command: list[str]) -> list[FileEdit]:
    entry = {"command": command[0], "args": command[1:], "timeout": TIMEOUT_MS}
    timeout = ["--timeout", str(TIMEOUT_MS)]
    return [
        FileEdit(
            settings_file(scope),
            "MCP server",
            json_servers.server_edit(entry),
            cli_add=["mcp", "add", "--scope", scope, *timeout, SERVER_NAME, *command],
            cli_remove=["mcp", "remove", "--scope", scope, SERVER_NAME],
        )
    ]


def registration(scope: str) -> Registration | None:
    return json_servers.registration(settings_file(scope))


def agent() -> Agent:
    return Agent(
        name="gemini-cli",
        title="Gemini CLI",
        cli="gemini",
        scopes=("user", "project"),
        transcripts="~/.gemini/tmp/*/chats/session-*.jsonl",
        edits=edits,
        registration=registration,
        installed_marker=gemini_dir,
    )
