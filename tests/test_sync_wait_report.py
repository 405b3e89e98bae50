"""``recalld sync --wait`` answers with the sync it waited for, through a real daemon.

A fresh home's first sync (the daemon's start) took 21 s for 40 notes; a ``sync --wait`` sent
meanwhile queued a sync of its own behind it, and answered with that one's figures alone: "0
changed, 40 unchanged ... in 0.001 s", after a progress bar that had shown all 40 changing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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


def test_the_counts_add_up_to_the_files_checked(home: Path) -> None:
    """Each file the sync looked at is counted once: a link refused at listing is checked and
    skipped, a note now over the size limit is skipped (its old rows dropped, not also counted
    as removed), a deleted one removed. Before: "4 note files checked, 1 changed, 1 unchanged,
    2 removed, 2 skipped" (six outcomes of four files)."""
    from conftest import make_engine

    memory = home / "memory"
    kept, grown, deleted = (write(memory / f"{n}.md", f"# {n}\n\nthe {n} note\n") for n in "abc")
    outside = write(home / "elsewhere" / "secret.md", "# out\n\nnot a memory note\n")
    engine = make_engine(home, None, memory__max_file_bytes=200)
    try:
        engine.sync()
        grown.write_text("# b\n\n" + "too long now " * 40 + "\n")
        deleted.unlink()
        (memory / "link.md").symlink_to(outside)
        write(memory / "d.md", "# d\n\nthe new note\n")
        report = engine.sync().as_dict()
    finally:
        engine.close()
    outcomes = ("files_changed", "files_unchanged", "files_removed", "files_skipped")
    assert [report[k] for k in outcomes] == [1, 1, 1, 2], report
    assert report["files_checked"] == 5 == sum(report[k] for k in outcomes), report
    assert kept.exists()
    line = describe_sync_report(report)
    assert "5 note files checked, 1 changed, 1 unchanged, 1 removed, 2 skipped" in line, line
    # The report a waiter gets of two syncs (the running one's work, then its own) adds up too.
    from recalld.serve.writer_jobs import merged_reports

    again = {**report, "files_changed": 0, "files_removed": 0, "files_unchanged": 2}
    merged = merged_reports([report, again])
    assert [merged[k] for k in outcomes] == [1, 1, 1, 2] and merged["files_checked"] == 5, merged


def test_a_sync_that_finds_nothing_new_says_the_index_was_up_to_date() -> None:
    """`recalld start` indexes everything before a first `sync --wait` asks; "0 changed, 6
    unchanged" read as if nothing had been indexed. Said only when nothing changed at all."""
    quiet = {"files_checked": 6, "files_changed": 0, "files_unchanged": 6, "chunks_written": 0}
    assert "already up to date" in describe_sync_report(quiet)
    changed = {**quiet, "files_changed": 1, "files_unchanged": 5, "chunks_written": 3}
    assert "already up to date" not in describe_sync_report(changed)
    removed = {**quiet, "files_removed": 1, "files_unchanged": 5}
    assert "already up to date" not in describe_sync_report(removed)
    empty = {**quiet, "files_checked": 0, "files_unchanged": 0}
    assert "already up to date" not in describe_sync_report(empty)
    grown = {**quiet, "sessions": {"files": 2, "messages": 4, "chunks_written": 0}}
    assert "already up to date" not in describe_sync_report(grown)


def test_a_note_deleted_between_listing_and_reading_is_removed_and_counted(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note that vanishes after the sync listed it (the race, made certain by deleting it
    as it is read) loses its rows now and counts as removed: before, it counted in no outcome
    and its old text stayed searchable until the next sync. A new note gone the same way is
    counted too."""
    from conftest import make_engine
    from recalld.ingest import indexer

    memory = home / "memory"
    kept = write(memory / "kept.md", "# kept\n\nthe kept heron note\n")
    doomed = write(memory / "doomed.md", "# doomed\n\nthe doomed egret note\n")
    engine = make_engine(home, None)
    try:
        engine.sync()
        doomed.write_text("# doomed\n\nthe doomed egret note, edited\n")
        fresh = write(memory / "fresh.md", "# fresh\n\nthe fresh ibis note\n")
        real = indexer.read_checked

        def vanishing(verdict: object, *args: object) -> bytes:
            path = getattr(verdict, "real", None)
            if path is not None and Path(path).name in ("doomed.md", "fresh.md"):
                Path(path).unlink()
                raise FileNotFoundError(2, "No such file or directory", str(path))
            return real(verdict, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(indexer, "read_checked", vanishing)
        report = engine.sync().as_dict()
        hits = engine.searcher.search({"query": "egret", "mode": "keyword"})["results"]
    finally:
        engine.close()
    assert not fresh.exists() and not doomed.exists() and kept.exists()
    outcomes = ("files_changed", "files_unchanged", "files_removed", "files_skipped")
    assert [report[k] for k in outcomes] == [0, 1, 2, 0], report
    assert report["files_checked"] == 3 == sum(report[k] for k in outcomes), report
    assert hits == []  # the deleted note's old text is not searchable


def test_counts_of_one_are_singular() -> None:
    """ "1 chunks written" after a one-line edit read as a typo; counts of one are singular."""
    one: dict[str, Any] = {"files_checked": 1, "files_changed": 1, "chunks_written": 1}
    one["sessions"] = {"files": 1, "messages": 1, "chunks_written": 1}
    line = describe_sync_report(one)
    assert "1 note file checked" in line and "; 1 chunk written" in line, line
    assert "1 transcript checked, 1 new message, 1 chunk" in line, line
    many = {**one, "files_checked": 1200, "chunks_written": 2}
    many["sessions"] = {"files": 3, "messages": 0, "chunks_written": 0}
    line = describe_sync_report(many)
    assert "1,200 note files checked" in line and "; 2 chunks written" in line, line
    assert "3 transcripts checked, 0 new messages, 0 chunks" in line, line
