"""The index file's health: a writable home, a bounded integrity check at start, and moving a
damaged index aside so that it can be rebuilt from the files.

The index is derived data: every note and transcript is still on disk. So a damaged index is
never repaired in place; it is moved aside (``index.sqlite.corrupt-<UTC time>``, the newest
:data:`KEEP_CORRUPT` kept for a post-mortem) and a fresh one is built from the files.

    problem = quick_check(index_path, budget_s=CHECK_BUDGET_S)   # None when healthy
    if problem:
        aside = move_aside(index_path)
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import apsw
import sqlite_vec

from recalld.errors import IndexError_

log = logging.getLogger(__name__)

# ``PRAGMA quick_check`` reads every page once. Measured on a 100k-chunk index (277 MB, 384-d
# vectors) on a busy 2-core box: 1.1 s with the file in the page cache, 3.1 s cold. A slow or
# network disk may take far longer: past this budget the start goes on unchecked (said in the
# log), and corruption met later is handled like corruption found at start.
CHECK_BUDGET_S = 20.0
# Written beside the index when the daemon closed it cleanly, taken away when it opens it: an
# index closed cleanly is checked after the socket listens (searches answer meanwhile; at 1M
# chunks the check reads 5 GB for 10-18 s), any other one before the daemon serves from it.
CLEAN_MARK_SUFFIX = ".closed-cleanly"
KEEP_CORRUPT = 3  # damaged index files kept aside, newest first
_SUFFIXES = ("-wal", "-shm", "-journal")
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class HomeNotWritable(IndexError_):
    """The folder of the index (or of the socket) cannot be written."""


def is_corruption(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the index file is damaged."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, apsw.CorruptError | apsw.NotADBError):
            return True
        text = str(exc)
        if "database disk image is malformed" in text or "file is not a database" in text:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def is_index_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is about the index itself (disk full, I/O error, damage), not one file.

    Per-file loops catch everything else so that one bad file never stops the others; these
    must go up, so that the whole sync fails, is retried, and a damaged file is moved aside.
    """
    return isinstance(exc, apsw.FullError | apsw.IOError) or is_corruption(exc)


def ensure_writable(folder: Path, what: str) -> None:
    """Create ``folder`` if needed and prove that files can be made in it, or raise one clear
    :class:`HomeNotWritable` (a read-only home, a folder of another user)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".recalld-write-test-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        if exc.errno not in _NOT_WRITABLE and not isinstance(exc, PermissionError):
            raise
        raise HomeNotWritable(
            f"cannot write the {what} folder {folder} ({exc.strerror or exc}): make it writable "
            "for this user, or point RECALLD_HOME at a folder that is"
        ) from None


def mark_clean(index: Path) -> None:
    """Note that the daemon closed ``index`` cleanly (every write committed, nothing open)."""
    with contextlib.suppress(OSError):  # without the mark the next start checks first: safe
        Path(f"{index}{CLEAN_MARK_SUFFIX}").touch(mode=0o600)


def take_clean_mark(index: Path) -> bool:
    """Whether ``index`` was closed cleanly; the mark is removed (a crash from now on leaves
    none, so the start after it checks the index before serving)."""
    try:
        Path(f"{index}{CLEAN_MARK_SUFFIX}").unlink()
    except OSError:
        return False
    return True


def quick_check(path: Path, budget_s: float = CHECK_BUDGET_S) -> str | None:
    """What ``PRAGMA quick_check`` finds wrong with the index at ``path``, or None when it is
    fine, missing, or the check ran out of its time budget (logged)."""
    if not path.exists():
        return None
    started = time.monotonic()
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    except apsw.Error as exc:
        return _problem(exc)
    try:
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        deadline = started + budget_s
        conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(5)")]
    except apsw.InterruptError:
        log.warning(
            "the index check did not finish within %g s: starting unchecked (%s)", budget_s, path
        )
        return None
    except apsw.Error as exc:
        return _problem(exc)
    finally:
        with contextlib.suppress(apsw.Error):
            conn.close()
    log.info("index check: %s in %.2f s", rows[:1], time.monotonic() - started)
    if rows == ["ok"]:
        return None
    return "; ".join(rows)[:500]


def _problem(exc: apsw.Error) -> str | None:
    if is_corruption(exc):
        return str(exc)
    raise IndexError_(f"cannot check the index: {exc}") from exc


def move_aside(path: Path) -> Path:
    """Rename a damaged index (and its WAL) to ``<name>.corrupt-<UTC time>``; keep the newest
    :data:`KEEP_CORRUPT`. Returns the new name."""
    # Microseconds: two moves in one second still sort in the order they happened.
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    if path.exists():
        os.replace(path, aside)
    wal = Path(f"{path}-wal")
    if wal.exists():
        os.replace(wal, Path(f"{aside}-wal"))  # it may hold the last good pages
    for suffix in ("-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    _prune(path)
    log.warning("moved the damaged index aside to %s", aside)
    return aside


def _prune(path: Path) -> None:
    # The names hold the UTC time they were moved aside at, so they sort oldest first.
    kept = sorted(
        (p for p in path.parent.glob(f"{path.name}.corrupt-*") if not p.name.endswith(_SUFFIXES)),
        reverse=True,
    )
    for old in kept[KEEP_CORRUPT:]:
        for suffix in ("", *_SUFFIXES):
            Path(f"{old}{suffix}").unlink(missing_ok=True)
