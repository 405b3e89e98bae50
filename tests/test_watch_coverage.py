"""Which folders inotify watches (the kernel's own list), and how a gap is shown."""

from __future__ import annotations

import errno
import time
from pathlib import Path

from recalld.ingest.filters import PathFilter
from recalld.ingest.watch_coverage import Coverage, unwatched_folders, watch_problem
from recalld.ingest.watcher import Watcher
from recalld.surfaces.tray import view_for


def test_unwatched_folders_come_from_the_kernels_list(tmp_path: Path) -> None:
    for name in ("a/b", "c", ".git/objects"):
        (tmp_path / name).mkdir(parents=True)
    assert unwatched_folders(tmp_path, PathFilter()) == [tmp_path]  # nothing watched yet
    watcher = Watcher([tmp_path], PathFilter(), 0.2, lambda batch: None, scan_interval_s=0.5)
    watcher.start()
    try:
        assert unwatched_folders(tmp_path, PathFilter()) == []
        assert watcher.warnings() == []
        (tmp_path / "d").mkdir()  # watched by watchdog's own thread a moment later
        time.sleep(1.5)  # three periodic checks: no false alarm
        assert watcher.warnings() == []
    finally:
        watcher.stop()


def test_a_gap_is_a_warning_and_a_degraded_tray(tmp_path: Path) -> None:
    coverage = Coverage()
    problem = watch_problem(OSError(errno.ENOSPC, "x"))
    coverage.set(tmp_path, [tmp_path / "a", tmp_path / "b"], problem)
    [line] = coverage.warnings(30.0)
    assert "2 folders not watched" in line and "every 30 s" in line
    assert "max_user_watches" in line
    view = view_for({"state": "idle", "provider": "none", "watch_warnings": [line]})
    assert view.state == "degraded" and "not watching every folder" in view.title
    assert "warning: inotify watch limit reached" in view.title
    coverage.set(tmp_path, [], "")
    assert coverage.warnings(30.0) == [] and not coverage.degraded()
