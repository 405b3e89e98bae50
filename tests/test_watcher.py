"""The watcher reports changes, not reads (a grep over the memory folder costs nothing), and a
root that now leads to another folder."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import linked_vaults
from recalld.ingest.filters import PathFilter
from recalld.ingest.watcher import ROOT_CHECK_S, Watcher


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


@pytest.mark.slow
def test_a_root_whose_symlink_is_repointed_is_handed_over(tmp_path: Path) -> None:
    """The watcher watches resolved folders: a re-pointed root symlink must be reported."""
    _, two, link = linked_vaults(tmp_path)
    moved: list[list[Path]] = []
    watcher = Watcher(
        [link.resolve()],
        PathFilter(),
        0.2,
        lambda batch: None,
        roots_now=lambda: [link.resolve()],
        on_roots_moved=moved.append,
    )
    watcher.start()
    try:
        time.sleep(ROOT_CHECK_S + 0.5)
        assert moved == []  # nothing moved: nothing said
        link.unlink()
        link.symlink_to(two)
        deadline = time.monotonic() + 3 * ROOT_CHECK_S + 2
        while not moved and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(ROOT_CHECK_S + 0.5)
        assert moved == [[two.resolve()]]  # once, with the new folder
    finally:
        watcher.stop()
