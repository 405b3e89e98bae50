"""Fault scenario against a real daemon: the disk fills up during a sync.

A real ``recalld serve`` process whose home is a real 24 MiB tmpfs (root in this container and
in CI): it reports the full disk, keeps serving searches, and catches up once space is freed.
"""

from __future__ import annotations

import errno
import time
from pathlib import Path

import apsw
import pytest

from conftest import write
from daemon_process import wait_for
from reliability_faults_support import memory_config, mount_tmpfs, names, umount
from reliability_support import Daemon, check_consistent, check_matches_disk

BULK = 300  # notes of the mid-sync fill (written while the test holds the write lock)


def fill_disk(path: Path) -> int:
    """Write ``path`` until the file system is full (ENOSPC); returns the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as fh:
        for block in (1 << 20, 1 << 16, 1 << 12, 1 << 9):
            try:
                while True:
                    written += fh.write(b"\0" * block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return written


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_disk_full_during_sync_reports_keeps_serving_and_catches_up(home: Path) -> None:
    disk = home / "disk"  # RECALLD_HOME of the daemon: index, socket; a 24 MiB tmpfs
    mount_tmpfs(disk, "24m")
    memory = home / "notes"  # the notes live on another (roomy) disk
    ballast = disk / "ballast"
    try:
        for i in range(8):
            write(memory / f"old{i}.md", f"# Old {i}\n\nThe quarry ledger entry {i} is filed.\n")
        memory_config(disk, [memory])
        daemon = Daemon(disk, log=home / "daemon.log").start()
        try:
            daemon.full_sync()
            with daemon.client() as c:
                assert "old3.md" in names(c.search("quarry ledger entry 3"))

                # 1. The disk is full before a sync starts.
                fill_disk(ballast)
                for i in range(5):
                    write(memory / f"new{i}.md", f"# New {i}\n\nThe walrus tariff {i} is due.\n")
                wait_for(lambda: "is full" in (c.status()["last_error"] or ""), timeout=60)
                st = c.status()
                assert str(disk) in st["last_error"], st["last_error"]
                assert st["daemon"]["retry_in_s"] is not None, "no retry scheduled"
                res = c.search("quarry ledger entry 5")
                assert "old5.md" in names(res) and res["mode"] == "hybrid"
                assert c.search("walrus tariff", mode="keyword")["results"] == []

                # Space comes back: the waiting notes are indexed without anyone asking.
                ballast.unlink()
                freed = time.monotonic()
                wait_for(lambda: c.status()["counts"]["memory_files"] == 13, timeout=90)
                recover_a = time.monotonic() - freed
                wait_for(lambda: c.status()["last_error"] is None, timeout=30)
                assert "new2.md" in names(c.search("walrus tariff 2"))
            # A restart: the clean stop checkpoints and deletes the WAL, so that the next
            # writes need new disk space (a grown WAL would otherwise be reused in place).
            daemon.stop()
            daemon.start()
            daemon.full_sync()
            with daemon.client() as c:
                # 2. The disk fills up in the middle of a sync. This test holds the index's
                # write lock while the notes arrive and the disk fills: the sync, past its
                # free-space check at its start, meets the full disk at its first write however
                # loaded the host is (a SIGSTOP at "syncing" raced the sync's writes under load;
                # filled after them, the next job's check reported it and SQLite never met
                # ENOSPC). The daemon waits for the lock (its busy timeout is 10 s).
                blocker = apsw.Connection(str(disk / "index.sqlite"))
                blocker.execute("BEGIN IMMEDIATE")
                try:
                    for i in range(BULK):
                        write(
                            memory / "bulk" / f"b{i:03}.md",
                            f"# Bulk {i}\n\nParagraph {i}: the heron counts {i * 7} silver "
                            f"pebbles near the weir number {i}, then flies to marsh {i % 5}.\n",
                        )
                    wait_for(lambda: c.status()["state"] == "syncing", timeout=60, step=0.01)
                    fill_disk(ballast)
                finally:
                    blocker.execute("ROLLBACK")
                    blocker.close()
                wait_for(lambda: "is full" in (c.status()["last_error"] or ""), timeout=90)
                # That sync had passed the free-space check at its start: SQLite itself hit
                # ENOSPC in the middle of it (later ones stop at the check, before embedding).
                wait_for(lambda: "database or disk is full" in daemon.log_tail(200_000))
                res = c.search("quarry ledger entry 1")
                assert "old1.md" in names(res), "search must keep answering on a full disk"
                ballast.unlink()
                freed = time.monotonic()
                wait_for(lambda: c.status()["counts"]["memory_files"] == 13 + BULK, timeout=120)
                recover_b = time.monotonic() - freed
                wait_for(lambda: c.status()["last_error"] is None, timeout=30)
                assert "b017.md" in names(c.search("heron silver pebbles weir number 17"))
            daemon.full_sync()
        finally:
            daemon.stop()
        check_consistent(disk / "index.sqlite", "after the disk was full twice")
        on_disk = check_matches_disk(disk / "index.sqlite", [memory], "after the disk was full")
        assert on_disk == 13 + BULK, on_disk
        print(f"disk full: caught up {recover_a:.1f} s / {recover_b:.1f} s after space was freed")
    finally:
        umount(disk)
