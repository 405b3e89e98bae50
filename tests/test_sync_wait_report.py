"""``recalld sync --wait`` answers with the sync it waited for, through a real daemon.

A fresh home's first sync (the daemon's start) took 21 s for 40 notes; a ``sync --wait`` sent
meanwhile queued a sync of its own behind it, and answered with that one's figures alone: "0
changed, 40 unchanged ... in 0.001 s", after a progress bar that had shown all 40 changing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import write
from daemon_process import DaemonProcess
from recalld.surfaces.cli_output import describe_sync_report

pytestmark = pytest.mark.timeout(120)

NOTES = 400


def test_a_wait_during_the_first_sync_reports_that_sync(home: Path) -> None:
    (home / "config.toml").write_text('[sessions]\npaths = []\n[embedding]\nprovider = "none"\n')
    for i in range(NOTES):
        body = "\n\n".join(
            f"## Part {j}\n\nThe heron {i} waits by weir {j} at dawn." for j in range(8)
        )
        write(home / "memory" / f"n{i:03}.md", f"# Note {i}\n\n{body}\n")
    daemon = DaemonProcess(home).start()
    try:
        with daemon.client(timeout=120) as c:
            deadline = time.monotonic() + 60
            while (st := c.status())["state"] != "syncing" or not st["progress"]["files_total"]:
                assert time.monotonic() < deadline, st
                time.sleep(0.01)
            assert st["progress"]["files_done"] < NOTES, "the first sync ended before the test"
            res = c.sync(wait=True)
    finally:
        daemon.stop()
    report = res["report"]
    assert report["files_changed"] == NOTES, report
    assert report["files_unchanged"] == 0 and report["files_seen"] == NOTES, report
    assert report["chunks_written"] >= NOTES and report["syncs"] == 2, report
    line = describe_sync_report(res)
    assert f"{NOTES} changed, 0 unchanged" in line, line
    assert not line.startswith("sync done in 0.0"), line
