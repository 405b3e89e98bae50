"""Codex: the MCP server as ``[mcp_servers.recalld]`` in ``~/.codex/config.toml`` (``CODEX_HOME``
moves it), edited with tomlkit so that the user's comments, order and formatting stay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from recalld.surfaces.integrate.agent import (
    SERVER_NAME,
    Agent,
    Edit,
    FileEdit,
    Registration,
    home_path,
)
from recalld.surfaces.integrate.config_edit import Unparsable, read_bytes


def codex_home() -> Path:
    return home_path("CODEX_HOME", Path.home() / ".codex")


def config_file(scope: str) -> Path:
    return codex_home() / "config.toml"


def _load(path: Path, old: bytes | None) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse((old or b"").decode("utf-8"))
    except (UnicodeDecodeError, TOMLKitError) as exc:
        raise Unparsable(path, f"not valid TOML ({exc})") from exc


def _servers(path: Path, doc: tomlkit.TOMLDocument) -> Any:
    servers = doc.get("mcp_servers")
    if servers is not None and not isinstance(servers, dict):
        raise Unparsable(path, "its mcp_servers is not a table")
    return servers


def server_edit(command: list[str]) -> Edit:
    """An edit that sets (or takes out) ``[mcp_servers.recalld]``."""

    def edit(path: Path, old: bytes | None, remove: bool) -> bytes | None:
        doc = _load(path, old)
        servers = _servers(path, doc)
        current = (servers or {}).get(SERVER_NAME)
        if remove:
            if current is None:
                return old
            del servers[SERVER_NAME]
            if not servers:
                del doc["mcp_servers"]
        else:
            if isinstance(current, dict) and (
                current.get("command") == command[0]
                and list(current.get("args", [])) == command[1:]
            ):
                return old
            if servers is None:
                servers = tomlkit.table(is_super_table=True)
                doc.add("mcp_servers", servers)
            if isinstance(current, dict):
                current["command"], current["args"] = command[0], command[1:]
            else:
                table = tomlkit.table()
                table.add("command", command[0])
                table.add("args", command[1:])
                table.add(tomlkit.nl())  # a blank line before the user's next table
                servers.add(SERVER_NAME, table)
        return tomlkit.dumps(doc).encode("utf-8")

    return edit


def _has_comments(path: Path) -> bool:
    """Whether the file may hold a comment (a ``#`` anywhere: inside a string too, to be safe)."""
    data = read_bytes(path)
    return data is not None and b"#" in data


def edits(scope: str, command: list[str]) -> list[FileEdit]:
    path = config_file(scope)
    # `codex mcp add/remove` (0.169) rewrites the [mcp_servers] tables without their comments:
    # a file with comments is edited here instead, where tomlkit keeps them.
    cli = not _has_comments(path)
    return [
        FileEdit(
            path,
            "MCP server",
            server_edit(command),
            cli_add=["mcp", "add", SERVER_NAME, "--", *command] if cli else (),
            cli_remove=["mcp", "remove", SERVER_NAME] if cli else (),
        )
    ]


def registration(scope: str) -> Registration | None:
    path = config_file(scope)
    try:
        doc = _load(path, read_bytes(path))
        servers = _servers(path, doc)
    except Unparsable:
        return None
    entry = (servers or {}).get(SERVER_NAME)
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return None
    return Registration(path, [str(entry["command"]), *(str(a) for a in entry.get("args", []))])


def agent() -> Agent:
    return Agent(
        name="codex",
        title="Codex",
        cli="codex",
        scopes=("user",),
        transcripts=str(codex_home() / "sessions" / "**" / "rollout-*.jsonl"),
        edits=edits,
        registration=registration,
        installed_marker=codex_home,
    )
