"""The watcher reports changes, not reads: a grep over the memory folder costs nothing."""

from __future__ import annotations

import time
from pathlib import Path

from recalld.ingest.filters import PathFilter
from recalld.ingest.watcher import Watcher


def test_reads_are_not_events_but_writes_are(tmp_path: Path) -> None:
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nhello\n")
    batches: list[list[Path]] = []
    watcher = Watcher([tmp_path], PathFilter(), 0.2, batches.append)
    seen: list[str] = []
    original = watcher.dirty.mark

    def mark(path: Path) -> None:
        seen.append(str(path))
        original(path)

    watcher.dirty.mark = mark  # type: ignore[method-assign]
    watcher.start()
    try:
        time.sleep(0.3)
        for _ in range(200):
            note.read_text()  # opens and read-only closes
        time.sleep(0.8)
        assert seen == [] and batches == []
        note.write_text("# Note\n\nchanged\n")
        deadline = time.monotonic() + 10
        while not batches and time.monotonic() < deadline:
            time.sleep(0.05)
        assert batches and batches[0] == [note]
    finally:
        watcher.stop()
