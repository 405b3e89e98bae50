"""The ``mcpServers`` map of a JSON config (Claude Code, Gemini CLI): add or take out recalld."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recalld.surfaces.integrate.agent import SERVER_NAME, Edit, Registration
from recalld.surfaces.integrate.config_edit import Unparsable, dump_json, load_json, read_bytes


def server_edit(entry: Mapping[str, Any]) -> Edit:
    """An edit that puts ``entry`` (command, args...) under ``mcpServers.recalld``.

    An entry already holding the same command and args is left as it is (no byte changes);
    one with another command gets the new command and args and keeps its other keys.
    """

    def edit(path: Path, old: bytes | None, remove: bool) -> bytes | None:
        doc = load_json(path, old)
        servers = doc.get("mcpServers")
        if servers is not None and not isinstance(servers, dict):
            raise Unparsable(path, "its mcpServers is not an object")
        if remove:
            if not servers or SERVER_NAME not in servers:
                return old
            del servers[SERVER_NAME]
            if not servers:
                del doc["mcpServers"]
            return dump_json(doc, old)
        current = (servers or {}).get(SERVER_NAME)
        if isinstance(current, dict) and all(current.get(k) == v for k, v in entry.items()):
            return old
        if servers is None:
            servers = doc["mcpServers"] = {}
        if isinstance(current, dict):
            current.update(entry)
        else:
            servers[SERVER_NAME] = dict(entry)
        return dump_json(doc, old)

    return edit


def registration(path: Path) -> Registration | None:
    """recalld's entry in the ``mcpServers`` of ``path``, if there is one (None if unreadable)."""
    try:
        doc = load_json(path, read_bytes(path))
    except Unparsable:
        return None
    servers = doc.get("mcpServers")
    entry = servers.get(SERVER_NAME) if isinstance(servers, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return None
    args = entry.get("args") or []
    return Registration(path, [entry["command"], *(str(a) for a in args)])
