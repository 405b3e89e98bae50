"""An agent's transcript glob in recalld's own ``sessions.paths`` (config.toml), when not covered.

The daemon live-reloads config.toml, so the file is written whole and atomically
(:func:`.config_edit.atomic_write`); tomlkit keeps the user's comments and order.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from recalld.config import DEFAULT_SESSION_GLOBS
from recalld.surfaces.integrate.agent import Edit
from recalld.surfaces.integrate.config_edit import Unparsable


def shown_glob(pattern: str) -> str:
    """``pattern`` with the home folder written as ``~`` (as the defaults are)."""
    home = str(Path.home())
    expanded = os.path.expanduser(pattern)
    return "~" + expanded[len(home) :] if expanded.startswith(home + os.sep) else expanded


def _sample(pattern: str) -> str:
    """A path the glob matches, made up (``*`` -> ``x``, ``**`` -> ``x``)."""
    return os.path.expanduser(pattern).replace("**", "x").replace("*", "x")


def covered(pattern: str, globs: list[str]) -> bool:
    """Whether one of ``globs`` already matches the files of ``pattern``."""
    sample = _sample(pattern)
    return any(re.fullmatch(_regex(os.path.expanduser(g)), sample) for g in globs)


def _regex(pattern: str) -> str:
    """A glob as a regex: ``**`` any folders, ``*`` and ``?`` within one name."""
    parts = re.split(r"(\*\*/?|\*|\?)", pattern)
    table = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return "".join(table.get(p, re.escape(p)) for p in parts)


def _doc(path: Path, old: bytes | None) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse((old or b"").decode("utf-8"))
    except (UnicodeDecodeError, TOMLKitError) as exc:
        raise Unparsable(path, f"not valid TOML ({exc})") from exc


def configured(doc: Any) -> list[str] | None:
    sessions = doc.get("sessions")
    value = sessions.get("paths") if isinstance(sessions, dict) else None
    return [str(v) for v in value] if isinstance(value, list) else None


def glob_edit(pattern: str) -> Edit:
    """An edit of config.toml that adds ``pattern`` to ``sessions.paths`` when no glob there
    covers it (the defaults count while the key is not set), or takes it out again."""
    wanted = shown_glob(pattern)

    def edit(path: Path, old: bytes | None, remove: bool) -> bytes | None:
        doc = _doc(path, old)
        current = configured(doc)
        if remove:
            if current is None or wanted not in current:
                return old
            doc["sessions"]["paths"].remove(wanted)
            return tomlkit.dumps(doc).encode("utf-8")
        if covered(pattern, DEFAULT_SESSION_GLOBS if current is None else current):
            return old
        sessions = doc.get("sessions")
        if sessions is None:
            sessions = tomlkit.table()
            doc.add("sessions", sessions)
        elif not isinstance(sessions, dict):
            raise Unparsable(path, "its sessions is not a table")
        if current is None:  # the defaults stay indexed
            array = tomlkit.array()
            array.extend([*DEFAULT_SESSION_GLOBS, wanted])
            array.multiline(True)
            sessions["paths"] = array
        else:
            sessions["paths"].append(wanted)
        return tomlkit.dumps(doc).encode("utf-8")

    return edit
