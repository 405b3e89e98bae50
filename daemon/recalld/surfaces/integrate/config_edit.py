"""Editing an agent's config file safely: parse or refuse, back up once, write atomically.

Every file ``recalld integrate`` changes goes through :class:`Ledger`, which keeps (in the data
dir's ``integrations.json``) the file's bytes before recalld first touched it and a hash of what
recalld last wrote. ``--remove`` puts the old bytes back when the hash still matches (nothing
else changed the file since), so the file is as it was byte for byte; otherwise only recalld's
entries are taken out and every other change stays.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class Unparsable(Exception):
    """A config file that recalld cannot read; it is never written."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}; left unchanged (fix it, then run this again)")
        self.path = path


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def digest(data: bytes | None) -> str:
    """A hash of a file's content ("" for a missing file)."""
    return "" if data is None else hashlib.sha256(data).hexdigest()


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (readers never see half).

    The file keeps its permission bits (a config holding tokens stays private).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- JSON ----------------------------------------------------------------------------------------


def load_json(path: Path, data: bytes | None) -> dict[str, Any]:
    """The JSON object in ``data`` (empty for a missing or empty file), key order kept."""
    if data is None or not data.strip():
        return {}
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise Unparsable(path, f"not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise Unparsable(path, f"holds a JSON {type(value).__name__}, not an object")
    return value


def dump_json(value: Mapping[str, Any], like: bytes | None) -> bytes:
    """``value`` as JSON, indented like the file it replaces (two spaces for a new file)."""
    indent: int | str = 2
    if like:
        for line in like.decode("utf-8", "replace").splitlines()[1:]:
            stripped = line.lstrip(" \t")
            if stripped and len(stripped) < len(line):
                lead = line[: len(line) - len(stripped)]
                indent = lead if "\t" in lead else len(lead)
                break
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    ends_with_newline = like is None or like.endswith(b"\n")
    return (text + ("\n" if ends_with_newline else "")).encode("utf-8")


# --- the ledger of changed files ----------------------------------------------------------------


#: The ledger's "wrote" once someone else changed the file too: it matches no file's hash.
EDITED = "edited by others"


class Ledger:
    """What ``recalld integrate`` changed: per file, the backup and the hash of what it wrote."""

    def __init__(self, data_dir: Path) -> None:
        self.folder = data_dir / "integrations"
        self.path = self.folder / "ledger.json"

    def _load(self) -> dict[str, Any]:
        data = read_bytes(self.path)
        if data is None:
            return {}
        try:
            value = json.loads(data)
        except ValueError:
            return {}  # a damaged ledger only costs the byte-for-byte restore
        return value if isinstance(value, dict) else {}

    def _save(self, entries: Mapping[str, Any]) -> None:
        atomic_write(self.path, json.dumps(entries, indent=2).encode(), mode=0o600)

    def entry(self, path: Path) -> dict[str, Any] | None:
        """The record of ``path``, if recalld changed it."""
        value = self._load().get(str(path))
        return value if isinstance(value, dict) else None

    def changed_by(self, path: Path, agent: str) -> bool:
        """Whether ``agent``'s integration changed ``path`` (a record from before agents were
        named counts for every agent)."""
        entry = self.entry(path)
        if entry is None:
            return False
        agents = entry.get("agents")
        return not isinstance(agents, list) or agent in agents

    def before_change(self, path: Path, original: bytes | None, agent: str) -> bool:
        """Back ``original`` up the first time recalld changes ``path``, and note that ``agent``
        changed it. True when recalld's last write is still what the file holds (so a later
        restore keeps no one else's edit), for :meth:`after_change`."""
        entries = self._load()
        entry = entries.get(str(path))
        if isinstance(entry, dict):
            agents = entry.get("agents")
            if isinstance(agents, list) and agent not in agents:
                agents.append(agent)
                self._save(entries)
            return bool(entry.get("wrote") == digest(original))
        backup = ""
        if original is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            name = f"{path.name.lstrip('.')}.{digest(str(path).encode())[:8]}.{stamp}.bak"
            backup = str(self.folder / name)
            atomic_write(Path(backup), original, mode=0o600)
        entries[str(path)] = {
            "existed": original is not None,
            "backup": backup,
            "wrote": "",
            "agents": [agent],
        }
        self._save(entries)
        return True

    def after_change(self, path: Path, kept: bool) -> None:
        """Remember what ``path`` holds now that recalld wrote it; when someone else had changed
        it before (``kept`` False), never restore it byte for byte: their edit would go."""
        entries = self._load()
        if str(path) in entries:
            entries[str(path)]["wrote"] = digest(read_bytes(path)) if kept else EDITED
            self._save(entries)

    def restore(self, path: Path, agent: str) -> bool:
        """Put the bytes from before recalld's first change back, when no other agent's change
        is in the file and nothing else changed it since recalld wrote it. True when restored;
        the record is dropped either way, unless another agent's change is still in the file."""
        entries = self._load()
        entry = entries.get(str(path))
        if not isinstance(entry, dict):
            return False
        agents = entry.get("agents")
        if isinstance(agents, list) and any(a != agent for a in agents):
            return False
        del entries[str(path)]
        restored = False
        if entry.get("wrote") == digest(read_bytes(path)):
            if not entry.get("existed"):
                path.unlink(missing_ok=True)
                restored = True
            elif (old := read_bytes(Path(str(entry.get("backup"))))) is not None:
                atomic_write(path, old)
                restored = True
        self._save(entries)
        return restored

    def released(self, path: Path, agent: str, before: bytes | None) -> None:
        """``agent``'s change is out of ``path`` (``before``: the bytes it had): the others'
        record stays, with the new bytes as recalld's own write when it held recalld's last."""
        entries = self._load()
        entry = entries.get(str(path))
        if not isinstance(entry, dict):
            return
        agents = entry.get("agents")
        left = [a for a in agents if a != agent] if isinstance(agents, list) else []
        if not left:
            del entries[str(path)]
        else:
            kept = entry.get("wrote") == digest(before)
            entry["agents"] = left
            entry["wrote"] = digest(read_bytes(path)) if kept else EDITED
        self._save(entries)
