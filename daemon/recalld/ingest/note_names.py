"""Where ``remember`` may write: a note name made safe and confined to a memory folder.

The same confinement as ``get`` (:mod:`recalld.retrieval.access`), from the writing side: no
``..``, no path through a symbolic link (the walker does not follow folder links, and a linked
note could lead anywhere), nothing outside the memory folders, and only names the memory filter
indexes (so what is written is also found). Characters that file systems or shells trip over
become ``-``; a name without a known extension gets ``.md``.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from recalld.errors import BadRequest, Forbidden
from recalld.ingest.filters import PathFilter

_UNSAFE = re.compile(r"[\x00-\x1f\x7f<>:\"|?*\\]")
MAX_NAME_BYTES = 255
MAX_DEPTH = 8  # folders below the memory folder a note may be created in


def daily_note_name(pattern: str, when: float | None = None) -> str:
    """``memory.daily_note`` for a day: ``YYYY``, ``MM`` and ``DD`` become the local date."""
    day = time.localtime(when)
    return (
        pattern.replace("YYYY", f"{day.tm_year:04d}")
        .replace("MM", f"{day.tm_mon:02d}")
        .replace("DD", f"{day.tm_mday:02d}")
    )


def clean_name(name: str, extensions: Sequence[str]) -> list[str]:
    """The parts of a relative note name, made safe; BadRequest / Forbidden saying why not."""
    if not isinstance(name, str) or not name.strip():
        raise BadRequest("the note name is empty; give a name such as MEMORY.md")
    parts = [p for p in name.strip().replace(os.sep, "/").split("/") if p not in ("", ".")]
    if any(p.strip() == ".." for p in parts):
        raise Forbidden(f"{name[:200]!r} climbs out with '..': notes stay in the memory folders")
    cleaned = [_UNSAFE.sub("-", p).strip().lstrip(".").strip() for p in parts]
    if not cleaned or any(not p for p in cleaned):
        raise BadRequest(f"{name[:200]!r} is not a usable note name")
    if len(cleaned) > MAX_DEPTH + 1:
        raise BadRequest(f"{name[:200]!r} is nested too deep (at most {MAX_DEPTH} folders)")
    if not cleaned[-1].lower().endswith(tuple(extensions)):
        cleaned[-1] += ".md"
    for part in cleaned:
        if len(os.fsencode(part)) > MAX_NAME_BYTES:
            raise BadRequest(f"a part of the note name is over {MAX_NAME_BYTES} bytes long")
    return cleaned


def note_path(
    name: str,
    roots: Sequence[Path],
    memory_filter: PathFilter,
    *,
    create_root: bool = False,
    refuse: Callable[[Path], None] | None = None,
) -> Path:
    """The file to write for note ``name`` (relative to the first memory folder, or an absolute
    path inside one); parent folders are created, never through a link.

    ``refuse`` sees the file's path before any folder is made, and raises to stop the write
    (a forgotten note: nothing may be left on disk)."""
    if not roots:
        raise BadRequest("no memory folder is configured (memory.paths)")
    given = Path(os.path.expanduser(name.strip())) if isinstance(name, str) else Path()
    root = roots[0]
    rel_name = name
    if given.is_absolute():
        match = next((r for r in roots if _inside(given, r)), None)
        if match is None:
            raise Forbidden(
                f"{name[:200]} is outside the memory folders ({', '.join(map(str, roots))}): "
                "notes are written only there"
            )
        root, rel_name = match, str(given.relative_to(match))
    parts = clean_name(rel_name, memory_filter.extensions)
    if refuse is not None:
        refuse(root.joinpath(*parts))
    _check_root(root, create_root)
    folder = root
    for part in parts[:-1]:
        folder = _child_folder(folder, part)
    path = folder / parts[-1]
    _check_leaf(path)
    if not memory_filter.file_ok(path, root):
        raise BadRequest(
            f"{path} would not be indexed (extensions: {', '.join(memory_filter.extensions)}; "
            "no dot folders or editor litter): choose another name"
        )
    return path


def _inside(path: Path, root: Path) -> bool:
    norm = Path(os.path.normpath(path))
    return norm == root or root in norm.parents


def _check_root(root: Path, create: bool) -> None:
    if create:
        root.mkdir(parents=True, exist_ok=True)
    if not root.is_dir():
        raise BadRequest(
            f"the memory folder {root} does not exist (unmounted?): nothing was written"
        )


def _child_folder(folder: Path, name: str) -> Path:
    """``folder/name`` as a real folder (created if missing), refused if it is a link."""
    child = folder / name
    try:
        st = os.lstat(child)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):  # made by another writer meanwhile
            os.mkdir(child, 0o700)
        st = os.lstat(child)
    if stat.S_ISLNK(st.st_mode):
        raise Forbidden(
            f"{child} is a symbolic link: recalld writes notes only in real folders "
            "(links may lead out of the memory folders)"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise BadRequest(f"{child} is a file, not a folder")
    return child


def _check_leaf(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise Forbidden(f"{path} is a symbolic link: write to the note it points to instead")
    if not stat.S_ISREG(st.st_mode):
        raise BadRequest(f"{path} is not a regular file")
