"""File descriptors: the process's limit, how many are open, and what running out looks like.

Under systemd's default soft limit of 1,024, a flood of 3,000 connections took every descriptor:
the log filled with tracebacks, clients were told the daemon was not running, and a note
written meanwhile could not be read and was never indexed (issue 41 item 5). So the daemon
raises its soft limit to the hard one at start (:func:`raise_soft_limit`), the server keeps
``RESERVE`` descriptors out of reach of clients (for notes, the index, the model, the watcher),
and a file that could not be opened for want of descriptors (``OUT_OF_RESOURCES``) is read
again by a retry.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from typing import Final

log = logging.getLogger(__name__)

# Errors that say the process (or the system) has no descriptor to spare, not that a file is bad.
OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE})
# Descriptors clients may never take: SQLite connections and their WAL files, the model, the
# watcher, notes being read, the search helper's socket, and a margin.
RESERVE: Final = 128
# Where there is no hard limit (RLIM_INFINITY, macOS), raise the soft one this far.
_UNLIMITED_TARGET: Final = 65_536


def soft_limit() -> int | None:
    """The process's soft limit of open files (None where there is no such limit)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def raise_soft_limit() -> tuple[int | None, int | None]:
    """Raise the soft limit of open files to the hard one where allowed; (before, after).

    On macOS the kernel caps it below the hard limit (``OPEN_MAX``), so a refusal there keeps
    the old limit, with a log line, never an error.
    """
    try:
        import resource
    except ImportError:
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.info("open files limit stays at %d (raising it to %d: %s)", soft, target, exc)
        else:
            log.info("open files limit raised from %d to %d", soft, target)
            return soft, target
    return soft, soft


def open_fds() -> int | None:
    """Descriptors open in this process now (None where the system does not say)."""
    where = "/proc/self/fd" if sys.platform.startswith("linux") else "/dev/fd"
    try:
        return len(os.listdir(where)) - 1  # less the one listdir itself opened
    except OSError:
        return None
