"""The one rule every path passes before the indexer reads it, and the read that keeps to it.

Watcher batches, the full sync's walk, explicit ``sync`` paths, the removal of stale rows and
the transcript globs all ask :meth:`PathRule.check`. A path is admitted when:

* its name is valid UTF-8 (SQLite TEXT and msgpack cannot hold the lone surrogates that
  Python uses for other bytes; such a file is skipped and named with ``\\xNN`` escapes),
* it lies under a root and the name filter accepts it (extension, no dot folders, no litter),
* its real path (every link resolved) lies under the real path of a root, and passes the
  name filter there too (a link ``notes.md -> .env`` is refused), and
* what it resolves to is a regular file (not a folder, pipe, socket or device).

A link inside a root that points to a file inside a root is admitted and indexed under the
link's own name: ``get`` serves it the same way (it resolves, then checks), and users keep
notes linked between folders. A link that leads out, directly or through a linked folder, is
refused. :func:`open_checked` then opens the checked file without following a link swapped
in after the check, and verifies that the descriptor is the inode that was checked.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from recalld.ingest.filters import PathFilter

# Reasons that are not worth a line in status: the file is simply not one we index.
EXCLUDED = "excluded by the name filter"
OUTSIDE = "outside the memory folders"


@dataclass(frozen=True)
class Verdict:
    """What the rule decided for one path."""

    ok: bool
    reason: str = ""  # why not (empty when ok)
    real: str = ""  # the resolved path to open (when ok)
    st: os.stat_result | None = None  # stat of ``real`` at check time (when ok)
    transient: bool = False  # the file could not be looked at now: keep what is indexed

    @property
    def reported(self) -> bool:
        """Whether the refusal belongs in ``status.skipped_files``."""
        return not self.ok and self.reason not in (EXCLUDED, OUTSIDE)


def shown(path: Path | str) -> str:
    """A path as UTF-8 text: bytes that are not UTF-8 become ``\\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def name_problem(path: Path | str) -> str | None:
    """Why a file name cannot be stored as text, or None."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not valid UTF-8 (shown with \\x escapes); rename it to index it"
    return None


def inside(real: str, real_roots: Sequence[str]) -> bool:
    """Whether a resolved path is one of (or under one of) the resolved roots."""
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in real_roots)


class PathRule:
    """The admission rule for memory files (see the module docstring)."""

    def __init__(self, roots: Sequence[Path], filter_: PathFilter) -> None:
        self.roots = list(roots)
        self.real_roots = [os.path.realpath(r) for r in self.roots]
        self._real_of = {
            r: (len(str(r)), real) for r, real in zip(self.roots, self.real_roots, strict=True)
        }
        self.filter = filter_

    def root_of(self, path: Path) -> Path | None:
        """The memory root that holds ``path`` (by name, before links are resolved)."""
        for root in self.roots:
            if path == root or root in path.parents:
                return root
        return None

    def check(self, path: Path) -> Verdict:
        """Apply the rule to ``path`` (any path: a watcher's, a sync request's, an old row's)."""
        problem = name_problem(path)
        if problem:
            return Verdict(False, problem)
        root = self.root_of(path)
        if root is None:
            return Verdict(False, OUTSIDE)
        if not self.filter.file_ok(path, root):
            return Verdict(False, EXCLUDED)
        return self._check_resolved(path)

    def check_walked(
        self, path: Path, root: Path, is_link: bool, real_base: str | None = None
    ) -> Verdict:
        """The rule for a file the walker found under ``root`` (a memory root, or a folder
        whose real path ``real_base`` was checked). The walker never follows links
        and prunes folders by name, so unless the file itself is a link its real path is the
        root's plus the rest: no realpath per file (a no-op resync of 10k files is all this)."""
        problem = name_problem(path)
        if problem:
            return Verdict(False, problem)
        if is_link:
            return self._check_resolved(path)
        if real_base is None:
            cut, real_base = self._real_of[root]
        else:
            cut = len(str(root))
        return self.check_real(real_base + str(path)[cut:])

    def _check_resolved(self, path: Path) -> Verdict:
        try:
            real = os.path.realpath(path)
        except OSError as exc:  # a link swapped for a file while it was resolved (EINVAL)
            return Verdict(False, f"it changed while being checked ({exc})", transient=True)
        if not inside(real, self.real_roots):
            return Verdict(False, f"a link out of the memory folders (to {shown(real)})")
        if real != str(path) and not self._target_ok(real):
            # notes.md -> .env or -> .git/config: inside the root, but not a file we index
            return Verdict(False, f"a link to a file that is not indexed ({shown(real)})")
        return self.check_real(real)

    def _target_ok(self, real: str) -> bool:
        """Whether a link's resolved target passes the name filter under its real root."""
        target = Path(real)
        return any(
            inside(real, [r]) and self.filter.file_ok(target, Path(r)) for r in self.real_roots
        )

    def check_real(self, real: str) -> Verdict:
        """The resolved file must be a regular file we can look at."""
        try:
            st = os.lstat(real)
        except (FileNotFoundError, NotADirectoryError):
            return Verdict(False, "gone")
        except OSError as exc:
            return Verdict(False, f"cannot stat: {exc.strerror or exc}", transient=True)
        if not stat.S_ISREG(st.st_mode):  # a FIFO named notes.md would block a read forever
            return Verdict(False, "not a regular file (a folder, pipe, socket or device)")
        return Verdict(True, real=real, st=st)


class Swapped(OSError):
    """The file changed identity between the check and the open (a link swapped in)."""


def open_checked(verdict: Verdict, real_roots: Sequence[str]) -> int:
    """Open the checked file read-only without following links; the caller closes the fd.

    ``O_NOFOLLOW`` refuses a link put in place of the file itself, the inode comparison refuses
    any other file, and the descriptor's own path (``/proc/self/fd``) catches a folder on the
    way that was swapped for a link.
    """
    assert verdict.st is not None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(verdict.real, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last part is a link now
            raise Swapped(exc.errno, "it became a link after it was checked") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (
            verdict.st.st_dev,
            verdict.st.st_ino,
        ):
            raise Swapped(0, "it was replaced by another file while being read")
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = verdict.real  # no /proc (macOS): O_NOFOLLOW and the inode check remain
        if not inside(where, real_roots):
            raise Swapped(0, "a folder on its path became a link out of the memory folders")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_checked(verdict: Verdict, real_roots: Sequence[str], limit: int) -> bytes:
    """The checked file's bytes (at most ``limit + 1``, so callers see it is over the limit)."""
    fd = open_checked(verdict, real_roots)
    try:
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            data = os.read(fd, min(left, 1 << 20))
            if not data:
                break
            chunks.append(data)
            left -= len(data)
        return b"".join(chunks)
    finally:
        os.close(fd)
