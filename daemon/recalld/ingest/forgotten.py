"""Which files a set of tombstones covers (:mod:`recalld.index.tombstones` holds them).

The indexers ask :meth:`Forgotten.covers` before they read a file, so a forgotten file is never
read into the index again, whatever it becomes: a transcript that keeps growing after
``forget --session`` stays out. Matching is by path, so it costs no read, except for a
``project`` tombstone, which also looks for the ``cwd`` that transcripts record near their start
(Claude Code, Codex, OpenClaw all write one).

- ``path``: that file, or every file under that folder.
- ``glob``: ``fnmatch`` over the absolute path (``*`` also spans ``/``).
- ``session``: a transcript whose name is the id (``<id>.jsonl``), ends with it
  (``rollout-<time>-<id>.jsonl``), or that lies in a folder named by it (subagent sessions).
- ``project``: a transcript under ``projects/<name>`` (Claude Code's folder for a working
  directory, ``-home-me-work-billing``, matches ``billing`` too), a transcript whose recorded
  ``cwd`` is the name or ends with it, or a note in a top folder of that name in a memory folder.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from recalld.index import tombstones
from recalld.index.tombstones import Tombstone
from recalld.paths import glob_base

_CWD = re.compile(rb'"cwd"\s*:\s*"((?:[^"\\]|\\.){1,4096})"')
_HEAD_BYTES = 64 * 1024  # transcripts record their cwd in their first records
_cwd_cache: dict[str, str] = {}
_cwd_lock = threading.Lock()
_WALK_LIMIT = 200_000  # files a glob's folder is searched through for a match on disk


class Forgotten:
    """The tombstones of one index, ready to test paths against."""

    def __init__(self, stones: Iterable[Tombstone], memory_roots: Sequence[Path] = ()) -> None:
        self.stones = list(stones)
        self.roots = [str(r) for r in memory_roots]

    def __bool__(self) -> bool:
        return bool(self.stones)

    def covers(self, path: str | Path) -> Tombstone | None:
        """The first tombstone that covers ``path``, or None."""
        if not self.stones:
            return None
        text = str(path)
        for stone in self.stones:
            if _matches(stone, text, self.roots):
                return stone
        return None


def forgotten_stone(store: Any, config: Any, *paths: str | Path) -> Tombstone | None:
    """The tombstone of ``store`` that covers any of ``paths`` (``get`` serves none of them)."""
    forgotten = Forgotten(tombstones.all_of(store.conn), config.memory_roots())
    for path in paths:
        if (stone := forgotten.covers(path)) is not None:
            return stone
    return None


def undo_command(stone: Tombstone) -> str:
    """The command that lifts ``stone`` (``recalld forget ... --undo``), quoted for a shell."""
    if stone.kind in ("session", "project"):
        return f"recalld forget --{stone.kind} {shlex.quote(stone.value)} --undo"
    return f"recalld forget {shlex.quote(stone.value)} --undo"


def on_disk(stone: Tombstone, memory_roots: Sequence[Path]) -> bool:
    """Whether ``stone`` names something on disk that is not indexed (yet): a file or folder,
    a file a glob matches, a note folder of a project. A session is known by its index only."""
    if stone.kind == "path":
        return os.path.lexists(stone.value)
    if stone.kind == "project":
        name = stone.value.strip().rstrip("/")
        return "/" not in name and any((Path(r) / name).is_dir() for r in memory_roots)
    if stone.kind != "glob":
        return False
    seen = 0
    for folder, _, names in os.walk(glob_base(stone.value)):
        for name in names:
            if fnmatch.fnmatchcase(os.path.join(folder, name), stone.value):
                return True
        seen += len(names)
        if seen > _WALK_LIMIT:
            return True  # too many to look through for a forget: taken as a match
    return False


def nothing_matches(stone: Tombstone) -> str:
    """Why a forget that covers nothing is refused, and what to check."""
    what = {
        "path": f"{stone.value} is not indexed and does not exist",
        "glob": f"no file indexed or on disk matches {stone.value} (`*` also spans folders)",
        "session": f"no indexed transcript has the session id {stone.value!r} or one starting "
        "with it (a transcript's id is its file name without .jsonl, as search cites it)",
        "project": f"nothing indexed is of project {stone.value!r} (a transcript's working "
        "folder, by name or path, or a top folder of a memory folder)",
    }.get(stone.kind, f"nothing matches {stone.kind} {stone.value!r}")
    return f"{what}: nothing to forget, nothing recorded"


def _matches(stone: Tombstone, path: str, roots: Sequence[str]) -> bool:
    value = stone.value
    if stone.kind == "path":
        return path == value or path.startswith(value.rstrip(os.sep) + os.sep)
    if stone.kind == "glob":
        return fnmatch.fnmatchcase(path, value)
    if stone.kind == "session":
        return session_matches(path, value)
    if stone.kind == "project":
        return project_matches(path, value, roots)
    return False


def session_matches(path: str, session: str) -> bool:
    """Whether the transcript at ``path`` belongs to session ``session``."""
    p = Path(path)
    stem = p.name.rsplit(".", 1)[0]
    return stem == session or stem.endswith("-" + session) or session in p.parts[:-1]


def project_matches(path: str, project: str, roots: Sequence[str] = ()) -> bool:
    """Whether ``path`` (a transcript, or a note under a memory root) is of ``project``."""
    name = project.strip().rstrip("/")
    if not name:
        return False
    for root in roots:
        prefix = root.rstrip(os.sep) + os.sep
        if path.startswith(prefix):
            rel = path[len(prefix) :].split(os.sep)
            return len(rel) > 1 and rel[0] == name
    parts = Path(path).parts
    encoded = name.replace(os.sep, "-")
    for i, part in enumerate(parts[:-2]):
        if part == "projects":
            folder = parts[i + 1]
            if folder in (name, encoded) or folder.endswith("-" + encoded.lstrip("-")):
                return True
    cwd = transcript_cwd(path)
    return cwd is not None and (cwd == name or cwd.rstrip("/").endswith("/" + name.lstrip("/")))


def transcript_cwd(path: str) -> str | None:
    """The working directory a transcript records near its start (remembered once found)."""
    with _cwd_lock:
        known = _cwd_cache.get(path)
    if known is not None:
        return known
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        return None
    found = _CWD.search(head)
    if found is None:
        return None  # not yet written: looked for again next time
    cwd = found.group(1).decode("utf-8", "replace").replace("\\/", "/")
    with _cwd_lock:
        if len(_cwd_cache) > 10_000:
            _cwd_cache.clear()
        _cwd_cache[path] = cwd
    return cwd
