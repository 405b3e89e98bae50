"""The index's files on disk: free space, write errors, memory roots that went away, leftovers
of interrupted rebuilds, durable renames, and the rebuild's test hook.

Test hook (tests/test_reliability_crash.py): when ``RECALLD_TEST_PHASE_LOG`` names a file, the
full rebuild appends the name of each phase it reaches to it, and stops at the phase named by
``RECALLD_TEST_PAUSE_AT`` until the process is killed. Unset (always, outside tests), it is a no-op.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from pathlib import Path

import apsw

from recalld.errors import IndexError_

log = logging.getLogger(__name__)

MIN_FREE_BYTES = 256 * 1024  # a sync with less free space left fails at once, before embedding


def test_phase(name: str) -> None:
    """The rebuild's test hook (see the module docstring); a no-op unless the env var is set."""
    phase_log = os.environ.get("RECALLD_TEST_PHASE_LOG")
    if not phase_log:
        return
    with open(phase_log, "a", encoding="utf-8") as fh:
        fh.write(name + "\n")
    if os.environ.get("RECALLD_TEST_PAUSE_AT") == name:
        while True:
            time.sleep(1)


def root_problem(root: Path, was_mount: bool) -> str | None:
    """Why a memory root cannot be read now (its indexed files are then kept), or None."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"not accessible ({exc.strerror or exc})"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    try:
        with os.scandir(root) as entries:
            empty = next(entries, None) is None
    except OSError as exc:
        return f"cannot be listed ({exc.strerror or exc})"
    if was_mount and empty and not os.path.ismount(root):
        return "not mounted (it was a mount point when indexed)"
    return None


def describe_write_error(exc: BaseException, index_path: Path) -> str:
    """A clear message for a failed index write (a full disk above all)."""
    full = isinstance(exc, apsw.FullError) or (
        isinstance(exc, OSError) and exc.errno in (28, 122)  # ENOSPC, EDQUOT
    )
    if full:
        return (
            f"the disk holding the index ({index_path.parent}) is full ({exc}); searches use "
            "what is indexed, indexing resumes by itself once space is freed"
        )
    return str(exc)


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def remove_stale_rebuilds(index_path: Path) -> None:
    """Delete temporary rebuild files (and their -wal, -shm, -journal) left by a process that
    died mid-rebuild; a live process's (an in-process `recalld reindex`) are kept."""
    prefix = f"{index_path.name}.rebuild-"
    for leftover in index_path.parent.glob(prefix + "*"):
        pid_text = leftover.name[len(prefix) :].split("-")[0]
        if not pid_text.isdigit():
            continue
        pid = int(pid_text)
        if pid != os.getpid() and writer_alive(pid, leftover):
            continue  # another process is rebuilding right now
        log.info("removing %s, left by an interrupted rebuild", leftover.name)
        try:
            leftover.unlink(missing_ok=True)
        except OSError as exc:  # space that stays taken; nothing else depends on it
            log.warning("could not remove %s (%s)", leftover, exc)


def writer_alive(pid: int, leftover: Path) -> bool:
    """Whether the process ``pid`` that named ``leftover`` after itself may still write it.

    Not when it is gone, a zombie (killed, not yet reaped by its parent), or a later process
    that got the same pid: one that started after the file was last written cannot be its
    writer (the writer started before it created the file).
    """
    if not pid_alive(pid):
        return False
    started = process_start(pid)
    if started is None:
        return True  # this system cannot say more: keep the file
    if started == 0.0:
        return False  # a zombie
    try:
        written = leftover.stat().st_mtime
    except OSError:
        return True  # gone meanwhile: nothing to remove
    return started <= written + START_SLACK_S


START_SLACK_S = 2.0  # boot time is whole seconds; a clock stepped since boot shifts the rest


def process_start(pid: int) -> float | None:
    """When ``pid`` started (epoch seconds), 0.0 for a zombie, None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    if fields[0] in ("Z", "X"):  # state: zombie or dead
        return 0.0
    try:
        ticks = int(fields[19])  # starttime, in clock ticks after boot (proc(5) field 22)
    except (IndexError, ValueError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (no-op where folders cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_free_space(index_path: Path) -> None:
    """Fail a write early, before any embedding work, when the index's disk is full."""
    try:
        st = os.statvfs(index_path.parent)
    except (OSError, AttributeError):
        return
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        raise IndexError_(
            f"the disk holding the index ({index_path.parent}) is full ({free // 1024} KiB "
            "free); searches use what is indexed, indexing resumes by itself once space is freed"
        )
