"""Progress a person can see: counts across a job's syncs, the daemon's log, the CLI's bar.

The end-to-end test copies 2,000 notes into the memory folder of a real daemon while it runs
(one folder copied at once, then notes one by one, as a file manager and a script would) and
samples ``status`` and the ``watch`` stream during the job.
"""

from __future__ import annotations

import io
import os
import pty
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, make_engine, write
from daemon_process import DaemonProcess
from recalld.ingest.sync_report import Progress
from recalld.surfaces.cli import describe_sync_report
from recalld.surfaces.progress_bar import ProgressBar
from recalld.surfaces.tray import view_for

NOTES = 2000


def note(i: int) -> str:
    return f"# Note {i}\n\nSmall note number {i} about topic {i % 37} and project {i % 11}.\n"


def test_a_job_counts_each_file_once_across_syncs(home: Path, local_embedder: Any) -> None:
    """A folder walked, then its files announced again: one count each, done never drops."""
    mem = home / "memory"
    files = [write(mem / "in" / f"n{i}.md", note(i)) for i in range(6)]
    engine = make_engine(home, local_embedder)
    try:
        engine.job = job = Progress()
        seen: list[tuple[int, int]] = []
        engine.on_progress = lambda p: seen.append((p.files_done, p.files_total))
        engine.sync([mem / "in"])  # the folder, walked
        engine.sync(files[:4])  # the same files, announced one by one
        write(mem / "late.md", note(99))
        engine.sync([*files[4:], mem / "late.md"])
        assert (job.files_total, job.files_done, job.files_changed, job.syncs) == (7, 7, 7, 3)
        # A note written again while the job runs (a copy seen half-done, then whole) is read
        # twice but stays one changed file: "7 files checked (8 changed)" read as nonsense.
        write(mem / "late.md", note(100))
        engine.sync([mem / "late.md"])
        assert (job.files_total, job.files_done, job.files_changed, job.syncs) == (7, 7, 7, 4)
        dones = [d for d, _ in seen]
        assert dones == sorted(dones) and max(t for _, t in seen) == 7
        # Without a job (the CLI, a rebuild) every sync counts afresh.
        engine.job = None
        engine.sync(files[:2])
        assert (engine.progress.files_total, engine.progress.files_done) == (2, 2)
    finally:
        engine.close()


def copy_in(src: Path, mem: Path) -> None:
    """Half the notes as one folder copy, the rest one by one (a script writing notes)."""
    shutil.copytree(src / "a", mem / "a")
    (mem / "b").mkdir()
    for f in sorted((src / "b").iterdir()):
        shutil.copy(f, mem / "b" / f.name)
        time.sleep(0.001)


def _ring(p: dict[str, Any]) -> float:
    """The tray's ring: files done, then (keyword first) the vectors filled in behind them."""
    pending, total = p.get("vectors_pending") or 0, p.get("vectors_total") or 0
    if p["files_done"] >= p["files_total"] and pending and total:
        return float((total - pending) / total)
    return float(p["files_done"] / NOTES)


@pytest.mark.slow
def test_copying_2000_notes_shows_true_progress(home: Path, tmp_path: Path) -> None:
    (home / "config.toml").write_text(
        "[sessions]\npaths = []\n[sync]\ndebounce_s = 0.5\nprogress_log_s = 1.0\n"
    )
    src = tmp_path / "src"
    for i in range(NOTES):
        write(src / ("a" if i < NOTES // 2 else "b") / f"note-{i:04}.md", note(i))
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        events: list[dict[str, Any]] = []

        def watch() -> None:
            with daemon.client() as c:
                for event in c.watch():
                    events.append(event)
                    done = event["state"] == "idle" and not event["pending"]
                    if done and event.get("files") == NOTES:
                        return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        copier = threading.Thread(target=copy_in, args=(src, home / "memory"))
        copier.start()
        samples = sample_until_done(daemon, copier)
        watcher.join(60)
    finally:
        daemon.stop()

    busy = [s for s in samples if s["state"] == "syncing"]
    assert len(busy) >= 5, samples
    # The total grows while the watcher reports the notes, reaches 2,000 and stays there.
    full = [i for i, s in enumerate(busy) if s["files_total"] == NOTES]
    assert full, busy
    wrong = [s for s in busy[full[0] :] if s["files_total"] != NOTES]
    assert not wrong, wrong
    assert all(s["files_total"] <= NOTES for s in samples), samples
    dones = [s["files_done"] for s in busy]
    assert dones == sorted(dones), dones  # never goes back, though batches follow each other
    for s in busy:  # pending is the work left, not a count of queued batches
        left = s["files_total"] - s["files_done"]
        assert left <= s["pending"] <= left + 1, s
    assert samples[-1]["pending"] == 0 and samples[-1]["memory_files"] == NOTES

    # The tray's ring: the share of the job done, never above what is indexed by much.
    rings = [(view_for(e).progress, e) for e in events if e["state"] == "syncing"]
    late = [(r, e) for r, e in rings if r is not None and e["progress"]["files_total"] == NOTES]
    assert late and all(r == _ring(e["progress"]) for r, e in late)

    log = daemon.log.read_text()
    lines = [line for line in log.splitlines() if "sync progress:" in line]
    assert lines, log[-3000:]
    assert any(f"/{NOTES:,} files" in line for line in lines), lines
    assert f"sync done: {NOTES:,} files checked ({NOTES:,} changed" in log, log[-3000:]


def sample_until_done(daemon: DaemonProcess, copier: threading.Thread) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = []
    deadline = time.monotonic() + 240
    with daemon.client() as c:
        copy_end = None
        while time.monotonic() < deadline:
            if copy_end is None and not copier.is_alive():
                copy_end = time.monotonic()
            copied = None if copy_end is None else time.monotonic() - copy_end
            st = c.status()
            p = st["progress"]
            samples.append(
                {
                    "state": st["state"],
                    "files_done": p["files_done"],
                    "files_total": p["files_total"],
                    "pending": st["daemon"]["pending"],
                    "memory_files": st["counts"]["memory_files"],
                    "copied": copied,
                }
            )
            last = samples[-1]
            idle = last["state"] == "idle" and not last["pending"]
            if copied is not None and idle and last["memory_files"] == NOTES:
                return samples
            time.sleep(0.2)
    raise AssertionError(f"the job did not finish: {samples[-5:]}")


# the command line -------------------------------------------------------------------------------


@pytest.fixture
def busy_daemon(home: Path) -> Any:
    """A daemon over 600 notes, watching off: `sync --wait` does all the work it shows."""
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\nwatch = false\n")
    daemon = DaemonProcess(home).start()
    daemon.wait_idle()
    for i in range(600):
        write(home / "memory" / f"n{i:03}.md", note(i))
    yield daemon
    daemon.stop()


@pytest.mark.slow
def test_sync_wait_prints_progress_lines_and_a_sentence(busy_daemon: DaemonProcess) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", "sync", "--wait"],
        env=env_for(busy_daemon.home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("sync done in ") and "600 changed" in proc.stdout
    assert "{" not in proc.stdout  # a sentence, not the daemon's JSON
    lines = [line for line in proc.stderr.splitlines() if "/600 files" in line]
    assert lines and "\r" not in proc.stderr, proc.stderr  # plain lines: not a terminal
    assert "chunks/s" in lines[0] and "files/s" in lines[0]


@pytest.mark.slow
def test_sync_wait_draws_a_bar_on_a_terminal(busy_daemon: DaemonProcess) -> None:
    env = env_for(busy_daemon.home)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command on a pseudo-terminal
        os.execve(
            sys.executable, [sys.executable, "-m", "recalld.surfaces.cli", "sync", "--wait"], env
        )
    out = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    text = out.decode()
    assert os.waitstatus_to_exitcode(status) == 0, text
    frames = [f for f in text.split("\r") if "[" in f and "/600 files" in f]
    assert frames, text
    assert "#" in frames[-1] and "chunks/s" in frames[-1]
    assert "sync done in " in text and "600 changed" in text


def test_status_watch_needs_a_daemon(home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", "status", "--watch"],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 4 and "recalld serve" in proc.stderr


def test_describe_sync_report_forms() -> None:
    queued = describe_sync_report({"queued": True, "job": "full"}, "sync")
    assert queued.startswith("sync queued") and "status --watch" in queued
    report = {
        "files_seen": 3,
        "files_changed": 2,
        "files_unchanged": 1,
        "files_removed": 1,
        "files_skipped": 0,
        "chunks_written": 4,
        "chunks_embedded": 3,
        "seconds": 0.5,
        "vectors_pending": True,
    }
    waited = describe_sync_report({"queued": False, "job": "reindex", "report": report}, "reindex")
    assert waited.startswith("reindex done in 0.5 s: 4 note files checked, 2 changed")
    assert "wait for vectors" in waited
    assert describe_sync_report(report) == describe_sync_report({"report": report})


def test_bar_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    bar = ProgressBar(out, tty=False)
    p = Progress(phase="indexing", files_total=10, files_done=4, chunks_done=7).as_dict(waiting=2)
    bar.update(p)
    bar.update(p)  # within the interval: not repeated
    bar.close()
    assert out.getvalue().count("\n") == 1 and "4/12 files (33 %), 2 waiting" in out.getvalue()


def _ctrl_c_reaches(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """``start()``'s child with Ctrl-C at its default, as in a terminal: a suite started in the
    background by a non-interactive shell ignores SIGINT, and a child inherits an ignored
    signal (a handled one is reset to the default at exec)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return start()
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.slow
def test_status_watch_follows_a_job_until_ctrl_c(busy_daemon: DaemonProcess) -> None:
    env = env_for(busy_daemon.home)
    cmd = [sys.executable, "-m", "recalld.surfaces.cli"]
    watch = _ctrl_c_reaches(
        lambda: subprocess.Popen(
            [*cmd, "status", "--watch"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    )
    try:
        time.sleep(1.0)  # connected: its first line is the idle state before the job
        queued = subprocess.run([*cmd, "sync"], env=env, capture_output=True, text=True)
        assert queued.stdout.startswith("sync queued: "), queued.stdout
        busy_daemon.wait_idle()
        time.sleep(1.0)
    finally:
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
    assert watch.returncode == 0, err
    lines = out.decode().splitlines()
    assert lines[0].startswith("idle: 0 files"), lines
    syncing = [i for i, line in enumerate(lines) if line.startswith("syncing: ")]
    assert syncing and any("/600 files" in lines[i] for i in syncing), lines
    done = lines.index(next(line for line in lines if line.startswith("idle: 600 files")))
    assert done > max(syncing) and "600/600 files (100 %)" in lines[max(syncing)], lines


def test_bar_on_a_terminal_redraws_one_line() -> None:
    out = io.StringIO()
    bar = ProgressBar(out, tty=True)
    p = Progress(phase="indexing", files_total=8, files_done=2, chunks_done=5).as_dict()
    bar.update(p, "syncing")
    frame = out.getvalue()
    assert frame.startswith("\rsyncing    [######------------------] 2/8 files · 5 chunks")
    bar.close(keep=True)
    assert out.getvalue() == frame + "\n"  # status --watch leaves its last line


def test_rates_are_those_of_the_job_not_of_the_time_since(home: Path, local_embedder: Any) -> None:
    for i in range(3):
        write(home / "memory" / f"n{i}.md", f"# Note {i}\n\nText {i}.\n")
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        done = eng.progress.as_dict()
        assert done["files_done"] == 3 and done["files_per_s"] > 0
        time.sleep(0.3)  # an idle daemon's status, later: the job's figures, unchanged
        later = eng.progress.as_dict()
        assert later["files_per_s"] == done["files_per_s"]
        assert later["elapsed_s"] == done["elapsed_s"]
    finally:
        eng.close()
    job = Progress(phase="indexing")
    job.add(["a", "b"])
    job.finish("a")
    running = job.as_dict()["elapsed_s"]
    time.sleep(0.05)
    assert job.as_dict()["elapsed_s"] > running  # a running job's clock runs
