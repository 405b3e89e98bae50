"""``get``: line ranges of indexed files, refused outside what recalld indexes.

A path is resolved (symlinks and ``..`` included) before it is compared with the roots, so a
link inside a memory folder that points elsewhere is refused like the target itself would be.
These checks are made at every read, on the file as it is then, never taken from the index or
the watcher (which may be paused or behind): an indexed note that has since become a link to
``.env`` is refused.
Inside the roots, only files recalld indexes (or would index) are served: memory files that pass
the memory filter (extensions, no dot folders, no editor litter) and transcripts that match a
``sessions.paths`` glob. So a ``.env`` or ``.git/config`` in a memory folder, or an agent's
credentials file next to its transcripts, is refused like a file outside the roots.

Nothing in a path is decoded or interpreted beyond ``~`` at its start: ``%2e%2e`` and
backslashes are plain characters of a file name on POSIX systems.

The file read is the file checked: :func:`open_checked` opens the resolved path one component at
a time with ``O_NOFOLLOW``, so a link swapped in between the check and the read is refused, not
followed (:class:`PathChanged`; the caller checks again).
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import glob
import io
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from recalld.errors import BadRequest, Forbidden, NotFound
from recalld.ingest.filters import PathFilter
from recalld.paths import glob_base

MAX_GET_LINES = 5_000
MAX_GET_BYTES = 4_000_000
MAX_PATH_BYTES = 4096  # PATH_MAX on Linux: no longer path can name a file
MAX_NAME_BYTES = 255  # NAME_MAX of every common file system

#: The source of an indexed path ("memory" | "sessions"), or None when it is not indexed.
SourceOf = Callable[[str], str | None]


@dataclass(frozen=True)
class Target:
    """A path ``get`` may read, and what kind of file it is."""

    path: Path  # the real path (symlinks resolved)
    source: str  # "memory" | "sessions" (transcript lines are redacted when served)


def allowed_roots(memory_roots: Sequence[Path], session_globs: Sequence[str]) -> list[Path]:
    """Folders under which ``get`` may read: memory roots and the fixed part of session globs."""
    roots = [Path(os.path.realpath(r)) for r in memory_roots]
    for pattern in session_globs:
        base = glob_base(pattern)
        if str(base) not in ("", "/", "."):
            roots.append(Path(os.path.realpath(base)))
    return roots


def check_path_text(raw: object) -> str:
    """``raw`` if it can name a file at all; else BadRequest saying why."""
    if not isinstance(raw, str) or not raw.strip():
        raise BadRequest("get needs a 'path' string")
    if "\x00" in raw:
        raise BadRequest("the path contains a NUL byte")
    try:
        encoded = os.fsencode(raw)
    except UnicodeEncodeError as exc:  # a lone surrogate that the file system encoding refuses
        raise BadRequest(f"the path is not valid text ({exc.reason})") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise BadRequest(
            f"the path is {len(encoded)} bytes long; no file path is longer than "
            f"{MAX_PATH_BYTES} bytes"
        )
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > MAX_NAME_BYTES:
        raise BadRequest(
            f"a component of the path is {longest} bytes long; file names are at most "
            f"{MAX_NAME_BYTES} bytes"
        )
    return raw


def exists(path: str | Path) -> bool:
    """Whether ``path`` exists; False (never an exception) for names the OS cannot look up."""
    try:
        os.stat(path)
    except (OSError, ValueError):
        return False
    return True


def _expand(raw: str) -> Path:
    try:
        return Path(raw).expanduser()
    except RuntimeError:  # "~nosuchuser/..."
        user = raw[1:].split("/", 1)[0]
        raise Forbidden(
            f"{raw[:200]} names the home folder of {user[:64]!r}, which does not exist; "
            "give a path inside the memory or session folders"
        ) from None


def resolve(
    raw: object,
    memory_roots: Sequence[Path],
    session_globs: Sequence[str],
    memory_filter: PathFilter,
    source_of: SourceOf,
) -> Target:
    """The real path of ``raw`` if ``get`` may read it; Forbidden / BadRequest otherwise.

    Relative paths are tried under each memory root, then under each transcript folder.
    """
    text = check_path_text(raw)
    mem = [Path(os.path.realpath(r)) for r in memory_roots]
    roots = allowed_roots(memory_roots, session_globs)
    given = _expand(text)
    if given.is_absolute():
        candidates = [given]
    else:  # the first root that has it (a link counts), else the first root
        tried = [root / given for root in roots]
        candidates = [c for c in tried if os.path.lexists(c)] or tried[:1]
    inside = False
    for cand in candidates:
        real = _real(cand, text)
        if not _under(real, roots):
            continue
        inside = True
        if os.path.isdir(real):
            raise BadRequest(f"{text[:300]} is a folder; give a file path")
        # The file read now must pass the rules now, whatever the index says: a note indexed
        # last week may have become a link to .env while the watcher was paused or behind.
        root = next((r for r in mem if _under(real, [r])), None)
        note = root is not None and memory_filter.file_ok(real, root)
        transcript = session_match(real, session_globs)
        indexed = source_of(str(cand)) or source_of(str(real))
        if transcript and (indexed == "sessions" or not note):
            return Target(real, "sessions")
        if note:
            return Target(real, "memory")
    if inside and not given.is_absolute() and not any(os.path.lexists(c) for c in candidates):
        # Under no root, so nothing to refuse: "not found" lets a shell command read it in
        # its own folder instead (cli_paths: `.claude/projects/...` typed in ~).
        raise NotFound(f"{text[:300]} is not under the memory or session folders ({tried[0]})")
    if inside:
        raise Forbidden(
            f"{text[:300]} is not a file recalld indexes: only memory files "
            f"({', '.join(memory_filter.extensions)}, outside dot folders) and transcripts "
            "matching sessions.paths can be read"
        )
    raise Forbidden(
        f"{text[:300]} is outside the memory and session folders recalld indexes; "
        "only indexed files can be read (see `recalld status` for the roots)"
    )


def _real(path: Path, text: str) -> Path:
    """``path`` with every link resolved; PathChanged when a link changes while it is read
    (``realpath`` then fails with EINVAL: the link it saw is a file by the time it reads it)."""
    try:
        return Path(os.path.realpath(path))
    except OSError as exc:
        raise PathChanged(f"{text[:300]} changed while it was being resolved") from exc


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def session_match(path: Path, session_globs: Sequence[str]) -> bool:
    """Whether ``path`` is one of the files the transcript globs match (glob semantics: ``*``
    stays within a folder and skips dot names, ``**`` spans folders)."""
    for pattern in session_globs:
        expanded = os.path.expanduser(pattern)
        base = glob_base(expanded)
        if str(base) in ("", "."):
            continue
        tail = Path(expanded).parts[len(base.parts) :]
        for folder in {base, Path(os.path.realpath(base))}:
            try:
                rel = path.relative_to(folder)
            except ValueError:
                continue
            if _match_parts(rel.parts, tuple(tail)):
                return True
    return False


def _match_parts(parts: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    @functools.cache
    def match(i: int, j: int) -> bool:
        if j == len(pats):
            return i == len(parts)
        if pats[j] == "**":
            if match(i, j + 1):
                return True
            return i < len(parts) and not parts[i].startswith(".") and match(i + 1, j)
        if i == len(parts) or not _name_match(parts[i], pats[j]):
            return False
        return match(i + 1, j + 1)

    return match(0, 0)


def _name_match(name: str, pattern: str) -> bool:
    if name.startswith(".") and not pattern.startswith("."):
        return False
    if not glob.has_magic(pattern):
        return name == pattern
    return fnmatch.fnmatchcase(name, pattern)


def read_lines(
    path: Path,
    from_line: int = 1,
    lines: int | None = None,
    redact: Callable[[str], str] | None = None,
    whole: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """Lines ``from_line .. from_line + lines - 1`` of a text file (1-based; the end is clamped,
    a start past the end is :class:`NotFound` saying how many lines the file has).

    The file is streamed, never read whole: a get of a few lines of a 1 GB transcript costs two
    passes over it but at most :data:`MAX_GET_BYTES` of memory; a single line longer than that
    is cut there. ``redact`` is applied to each line. ``whole`` is applied to the whole file's
    text before lines are taken (a secret that spans lines; it must keep the line count), so
    such a file is read whole, up to :data:`MAX_WHOLE_BYTES`; past that, ``whole`` is applied
    to one line at a time.
    """
    if not isinstance(from_line, int) or isinstance(from_line, bool) or from_line < 1:
        raise BadRequest(f"from must be a line number >= 1, got {_short(from_line)}")
    if lines is not None and (not isinstance(lines, int) or isinstance(lines, bool) or lines < 1):
        raise BadRequest(f"lines must be a positive integer, got {_short(lines)}")
    want = min(lines if lines is not None else MAX_GET_LINES, MAX_GET_LINES)
    with open_checked(path) as opened:
        fh, redact = _whole_applied(opened, whole, redact)
        total = _count_lines(fh)
        if from_line > max(total, 1):  # clamping would answer with lines nobody asked for
            raise NotFound(
                f"{path} has {total} line{'' if total == 1 else 's'}: line {from_line} "
                "is past its end"
            )
        start = from_line
        fh.seek(0)
        _skip_lines(fh, start - 1)
        out: list[str] = []
        size = 0
        while len(out) < want:
            raw = fh.readline(MAX_GET_BYTES + 1)
            if not raw:
                break
            if len(raw) > MAX_GET_BYTES and not raw.endswith(b"\n"):
                raw = raw[:MAX_GET_BYTES]
                _skip_lines(fh, 1)  # the rest of the over-long line
            line = raw.rstrip(b"\n").decode("utf-8", errors="replace").rstrip("\r")
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


MAX_WHOLE_BYTES = 16_000_000  # above this a note is redacted line by line (not held whole)


def _whole_applied(
    fh: BinaryIO, whole: Callable[[str], str] | None, redact: Callable[[str], str] | None
) -> tuple[BinaryIO, Callable[[str], str] | None]:
    """``fh`` with ``whole`` applied to all its text (as a copy in memory), or ``fh`` itself
    and ``whole`` as the per-line function when the file is too big to hold."""
    if whole is None:
        return fh, redact
    data = fh.read(MAX_WHOLE_BYTES + 1)
    if len(data) > MAX_WHOLE_BYTES:
        fh.seek(0)
        return fh, whole
    text = whole(data.decode("utf-8", errors="replace"))
    return io.BytesIO(text.encode("utf-8", errors="surrogatepass")), redact


class PathChanged(NotFound):
    """A component of a checked path became a link (or stopped being a folder) before it was
    opened: the caller checks the path again (see :func:`open_checked`)."""


_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_checked(path: Path) -> BinaryIO:
    """The regular file at the real path ``path``, opened without following any link.

    ``path`` is what :func:`resolve` checked: absolute, with every link already resolved. It is
    opened one component at a time, each relative to its parent folder's descriptor with
    ``O_NOFOLLOW``, so the descriptor read is the file that was checked: if any component was
    swapped for a link since (``note.md -> ~/.ssh/id_ed25519``), the open fails with
    :class:`PathChanged` instead of following it. Never blocks on a FIFO or device.
    """
    if not path.is_absolute():
        raise BadRequest(f"{path} is not an absolute path")
    parts = path.parts[1:]
    if not parts or any(p in (".", "..") for p in parts):
        raise BadRequest(f"{path} is not a file path")
    fd = os.open("/", _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            child = _open_dir(fd, name, path)
            os.close(fd)
            fd = child
        leaf = _open_at(fd, parts[-1], _FILE_FLAGS, path)
    finally:
        os.close(fd)
    return _regular(leaf, path)


def _open_dir(parent: int, name: str, path: Path) -> int:
    """The folder ``name`` inside ``parent``, never through a link."""
    fd = _open_at(parent, name, _DIR_FLAGS, path)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # O_PATH opens a link itself: refuse it
            raise PathChanged(f"{path} changed while it was being opened (a folder became a link)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_at(parent: int, name: str, flags: int, path: Path) -> int:
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError as exc:
        raise NotFound(f"{path} does not exist (deleted since it was indexed?)") from exc
    except IsADirectoryError as exc:
        raise BadRequest(f"{path} is a folder; give a file path") from exc
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):  # a link where none was
            raise PathChanged(f"{path} changed while it was being opened (now a link)") from exc
        raise NotFound(f"cannot read {path}: {exc.strerror}") from exc


def _regular(fd: int, path: Path) -> BinaryIO:
    """``fd`` as a blocking binary file if it is a regular file; closed and refused otherwise."""
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise BadRequest(f"{path} is a folder; give a file path")
        if not stat.S_ISREG(mode):
            raise BadRequest(f"{path} is not a regular file (a pipe, socket or device)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _count_lines(fh: BinaryIO) -> int:
    total = 0
    last = b""
    while chunk := fh.read(1 << 20):
        total += chunk.count(b"\n")
        last = chunk[-1:]
    return total + (1 if last and last != b"\n" else 0)


def _skip_lines(fh: BinaryIO, n: int) -> None:
    """Move past the next ``n`` newlines (or to the end)."""
    while n > 0:
        pos = fh.tell()
        chunk = fh.read(1 << 20)
        if not chunk:
            return
        count = chunk.count(b"\n")
        if count < n:
            n -= count
            continue
        idx = -1
        for _ in range(n):
            idx = chunk.index(b"\n", idx + 1)
        fh.seek(pos + idx + 1)
        return


def _short(value: object, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
