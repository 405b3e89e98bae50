"""A damaged index and a read-only home (issue 14, item 9), through a real ``recalld serve``.

- A page of garbage in the middle of the index, or a truncated file: the daemon checks the index
  at start, moves the bad file aside (``index.sqlite.corrupt-<time>``), rebuilds from the files,
  says so in ``status``, and every edit made afterwards is indexed (before: "malformed" in status
  and 190 of 300 edits never indexed).
- The same damage while the daemon runs: the first write or read that meets it starts the same
  recovery.
- A read-only home: one sentence and exit code 6, no traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, wait_for
from recalld.index import index_health
from recalld.surfaces.cli import EXIT_INDEX
from recalld_client import IndexUnavailable
from reliability_support import check_matches_disk, drop_file_permission_override

pytestmark = pytest.mark.timeout(600)

N_NOTES = 300
PAGE = 4096


def note(i: int, version: str) -> str:
    return f"# Note {i}\n\nThe {version} ferry number {i} leaves at dawn for keeper{i}.\n"


@pytest.fixture()
def home() -> Iterator[Path]:
    home = Path(tempfile.mkdtemp(prefix="rcd-idx-", dir="/tmp"))
    (home / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n'
    )
    for i in range(N_NOTES):
        write(home / "memory" / f"n{i:03d}.md", note(i, "first"))
    subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", "sync"],
        env=env_for(home),
        check=True,
        capture_output=True,
        timeout=300,
    )
    yield home
    os.chmod(home, 0o755)
    shutil.rmtree(home, ignore_errors=True)


def checkpoint(index: Path) -> None:
    """Move every page from the WAL into the main file, so that damage there is seen."""
    conn = apsw.Connection(str(index))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def garble_middle_page(index: Path, of: str | None = None) -> None:
    """Random bytes over the file's middle page, or over the middle leaf page of table ``of``."""
    pages = index.stat().st_size // PAGE
    assert pages > 10, f"index too small to damage in the middle ({pages} pages)"
    page = pages // 2
    if of is not None:
        conn = apsw.Connection(str(index))
        try:
            leaves = [
                int(r[0])
                for r in conn.execute(
                    "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY 1",
                    (of,),
                )
            ]
        finally:
            conn.close()
        page = leaves[len(leaves) // 2] - 1  # dbstat counts pages from 1
    with index.open("r+b") as fh:
        fh.seek(page * PAGE)
        fh.write(os.urandom(PAGE))


def edit_all(home: Path, version: str) -> None:
    for i in range(N_NOTES):
        (home / "memory" / f"n{i:03d}.md").write_text(note(i, version))


def rebuilt(d: DaemonProcess) -> dict[str, object]:
    """Wait until the daemon is idle with every note indexed; its status."""
    status: dict[str, object] = {}

    def done() -> bool:
        nonlocal status
        try:
            status = d.wait_idle(timeout=300)
        except IndexUnavailable:  # a status that met the damage first: recovery is under way
            return False
        counts = status["counts"]
        return isinstance(counts, dict) and counts["files"] == N_NOTES

    wait_for(done, timeout=300, step=0.2)
    return status


def aside_files(index: Path) -> list[Path]:
    return sorted(index.parent.glob("index.sqlite.corrupt-*"))


def check_recovered(d: DaemonProcess, status: dict[str, object], context: str) -> None:
    index = d.home / "index.sqlite"
    moved = aside_files(index)
    assert moved, f"no damaged file was kept aside; {context}"
    warnings = status["warnings"]
    assert isinstance(warnings, list)
    assert any("damaged" in w and str(moved[-1]) in w for w in warnings), warnings
    # Every edit made after the rebuild is indexed (before: 190 of 300 never were).
    edit_all(d.home, "second")
    deadline = time.monotonic() + 120
    while True:
        d.wait_idle()
        try:
            check_matches_disk(index, [d.home / "memory"], context)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert "Traceback" not in d.log_tail(1_000_000).split("sync failed")[0], d.log_tail()


@pytest.mark.parametrize("closed", ["crashed", "cleanly"])
def test_a_garbage_page_is_found_at_start_moved_aside_and_rebuilt(home: Path, closed: str) -> None:
    """Checked before serving after a crash, after the start when it was closed cleanly (the
    damage then came from outside: a disk, another program): recovered either way."""
    index = home / "index.sqlite"
    checkpoint(index)
    garble_middle_page(index)
    assert index_health.quick_check(index) is not None, "the damage was not even detectable"
    if closed == "cleanly":
        index_health.mark_clean(index)
    started = time.monotonic()
    d = DaemonProcess(home).start()
    try:
        status = rebuilt(d)
        took = time.monotonic() - started
        print(f"\ngarbage page ({closed}): corrupt to rebuilt ({N_NOTES} notes) in {took:.1f} s")
        check_recovered(d, status, f"garbage page at start, closed {closed}")
    finally:
        d.stop()


def test_a_clean_close_is_marked_and_checked_after_start(home: Path) -> None:
    """The mark: written by a clean stop, taken by the next start (which checks after it
    listens), absent after a kill -9 (so that start checks before serving)."""
    index = home / "index.sqlite"
    mark = Path(f"{index}{index_health.CLEAN_MARK_SUFFIX}")
    d = DaemonProcess(home).start()
    d.wait_idle()
    assert not mark.exists()
    d.stop()
    assert mark.exists() and mark.stat().st_mode & 0o077 == 0
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        assert not mark.exists(), "the start did not take the mark"
        wait_for(lambda: "index check: ['ok']" in d.log_tail(1_000_000), timeout=60)
        log = d.log_tail(1_000_000).split("recalld listening on")
        assert "index check" not in log[-2] and "index check: ['ok']" in log[-1], (
            "the check of a cleanly closed index ran before the socket listened"
        )
        assert d.proc is not None
        d.proc.kill()
        d.proc.wait(10)
    finally:
        d.stop()
    assert not mark.exists(), "a killed daemon left the mark"


@pytest.mark.parametrize("keep", ["half", "header"])
def test_a_truncated_index_is_moved_aside_and_rebuilt(home: Path, keep: str) -> None:
    index = home / "index.sqlite"
    checkpoint(index)
    os.truncate(index, index.stat().st_size // 2 if keep == "half" else 50)
    d = DaemonProcess(home).start()
    try:
        check_recovered(d, rebuilt(d), f"truncated ({keep})")
    finally:
        d.stop()
    assert "Traceback" not in d.log_tail(1_000_000)


@pytest.mark.slow
def test_damage_while_running_is_recovered_and_no_edit_is_lost(home: Path) -> None:
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        index = home / "index.sqlite"
        checkpoint(index)
        # A page the edits read: a leaf of the files table (the file's middle page may be an
        # FTS5 segment leaf, which a delete or insert never reads).
        garble_middle_page(index, of="files")
        started = time.monotonic()
        edit_all(home, "middle")  # these writes meet the damage
        wait_for(lambda: bool(aside_files(index)), timeout=60)
        status = rebuilt(d)
        print(f"\ndamage while running: recovered in {time.monotonic() - started:.1f} s")
        check_recovered(d, status, "damage while running")
        assert d.proc is not None and d.proc.poll() is None
    finally:
        d.stop()


def test_the_start_check_is_time_bounded(home: Path, caplog: pytest.LogCaptureFixture) -> None:
    index = home / "index.sqlite"
    checkpoint(index)
    assert index_health.quick_check(index) is None  # healthy
    started = time.monotonic()
    assert index_health.quick_check(index, budget_s=0.0) is None  # out of time: unchecked
    assert time.monotonic() - started < 1.0
    assert "did not finish within 0 s" in caplog.text


def test_at_most_three_damaged_files_are_kept(tmp_path: Path) -> None:
    index = tmp_path / "index.sqlite"
    moved = []
    for n in range(5):
        index.write_bytes(b"garbage %d" % n)
        Path(f"{index}-wal").write_bytes(b"wal")
        moved.append(index_health.move_aside(index))
        assert not index.exists() and not Path(f"{index}-wal").exists()
    kept = [p for p in aside_files(index) if not p.name.endswith("-wal")]
    assert kept == sorted(moved[-3:])
    assert [p.read_bytes() for p in kept] == [b"garbage 2", b"garbage 3", b"garbage 4"]
    assert len(list(tmp_path.glob("*-wal"))) == 3


@pytest.mark.slow
def test_in_process_commands_on_a_damaged_index_say_what_to_do(home: Path) -> None:
    index = home / "index.sqlite"
    checkpoint(index)
    garble_middle_page(index)
    done = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", "status"],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_INDEX, done.stdout + done.stderr
    assert "the index is damaged" in done.stderr and "recalld serve" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_read_only_home_gets_one_sentence_and_exit_code_6(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(home / "memory" / "a.md", "# A note\n")
    (home / "config.toml").write_text('[embedding]\nprovider = "none"\n')
    os.chmod(home, 0o555)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "recalld.surfaces.cli", "serve"],
            env=env_for(home),
            capture_output=True,
            text=True,
            timeout=60,
            # root ignores file modes; without these capabilities it cannot
            preexec_fn=drop_file_permission_override if os.geteuid() == 0 else None,
        )
    finally:
        os.chmod(home, 0o755)
    assert done.returncode == EXIT_INDEX, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"cannot write the index folder {home}" in lines[0]
    assert "Traceback" not in done.stderr
    assert not (home / "index.sqlite").exists()


def test_damage_met_by_a_read_gives_an_index_error_and_recovers(home: Path) -> None:
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        index = home / "index.sqlite"
        checkpoint(index)
        pages = index.stat().st_size // PAGE
        with index.open("r+b") as fh:  # every page but the header: any read meets the damage
            for page in range(1, pages):
                fh.seek(page * PAGE)
                fh.write(os.urandom(PAGE))
        with d.client(timeout=30) as c, pytest.raises(IndexUnavailable, match="damaged"):
            for i in range(20):  # a read served from a cached page may not notice yet
                c.search(f"keeper{i} ferry", mode="keyword")
                c.status()
        wait_for(lambda: bool(aside_files(index)), timeout=60)
        check_recovered(d, rebuilt(d), "damage met by a read")
        assert "failed with an unexpected error" not in d.log_tail(1_000_000)  # not internal
    finally:
        d.stop()
