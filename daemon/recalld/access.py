"""``get``: line ranges of indexed files, refused outside the configured roots.

A path is resolved (symlinks and ``..`` included) before it is compared with the roots, so a
link inside a memory folder that points elsewhere is refused like the target itself would be.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from recalld.errors import BadRequest, Forbidden, NotFound

MAX_GET_LINES = 5_000
MAX_GET_BYTES = 4_000_000


def _glob_base(pattern: str) -> Path:
    """The folder part of a glob before its first magic part (``~/.claude/projects/**``)."""
    fixed: list[str] = []
    for part in Path(pattern).parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path()


def allowed_roots(memory_roots: Sequence[Path], session_globs: Sequence[str]) -> list[Path]:
    """Folders under which ``get`` may read: memory roots and the fixed part of session globs."""
    roots = [Path(os.path.realpath(r)) for r in memory_roots]
    for pattern in session_globs:
        base = _glob_base(pattern)
        if str(base) not in ("", "/", "."):
            roots.append(Path(os.path.realpath(base)))
    return roots


def resolve_path(raw: str, roots: Sequence[Path], is_indexed: Callable[[str], bool]) -> Path:
    """The real path of ``raw`` if it lies under one of ``roots``; else Forbidden."""
    if not isinstance(raw, str) or not raw.strip():
        raise BadRequest("get needs a 'path' string")
    if "\x00" in raw:
        raise BadRequest("the path contains a NUL byte")
    candidates: list[Path] = []
    given = Path(raw).expanduser()
    if given.is_absolute():
        candidates.append(given)
    else:
        candidates.extend(root / given for root in roots)
    for cand in candidates:
        # An indexed path is accepted as stored: it was checked when it was indexed.
        if is_indexed(str(cand)) and _under(Path(os.path.realpath(cand)), roots):
            return Path(os.path.realpath(cand))
    for cand in candidates:
        real = Path(os.path.realpath(cand))
        if _under(real, roots):
            return real
    raise Forbidden(
        f"{raw} is outside the memory and session folders recalld indexes; "
        "only indexed files can be read (see `recalld status` for the roots)"
    )


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def read_lines(
    path: Path,
    from_line: int = 1,
    lines: int | None = None,
    redact: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """Lines ``from_line .. from_line + lines - 1`` of a text file (1-based, clamped)."""
    if not isinstance(from_line, int) or isinstance(from_line, bool) or from_line < 1:
        raise BadRequest(f"from must be a line number >= 1, got {from_line!r}")
    if lines is not None and (not isinstance(lines, int) or isinstance(lines, bool) or lines < 1):
        raise BadRequest(f"lines must be a positive integer, got {lines!r}")
    want = min(lines if lines is not None else MAX_GET_LINES, MAX_GET_LINES)
    try:
        with path.open("rb") as fh:
            data = fh.read()
    except FileNotFoundError as exc:
        raise NotFound(f"{path} does not exist (deleted since it was indexed?)") from exc
    except IsADirectoryError as exc:
        raise BadRequest(f"{path} is a folder; give a file path") from exc
    except OSError as exc:
        raise NotFound(f"cannot read {path}: {exc.strerror}") from exc
    text = data.decode("utf-8", errors="replace")
    all_lines = text.split("\n")
    if all_lines and all_lines[-1] == "":
        all_lines.pop()
    total = len(all_lines)
    start = min(from_line, max(total, 1))
    chosen = all_lines[start - 1 : start - 1 + want]
    out: list[str] = []
    size = 0
    for line in chosen:
        line = line.rstrip("\r")
        if redact is not None:
            line = redact(line)
        size += len(line) + 1
        if size > MAX_GET_BYTES and out:
            break
        out.append(line)
    end = start + len(out) - 1 if out else start - 1
    return {
        "path": str(path),
        "start_line": start,
        "end_line": max(end, start - 1),
        "text": "\n".join(out),
        "total_lines": total,
    }
