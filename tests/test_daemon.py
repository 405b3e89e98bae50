"""End-to-end: a real daemon process, real socket, real watcher, real model."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, wait_for
from recalld.index.store import Store
from recalld_client import BadRequest, Forbidden


def config(home: Path, extra: str = "") -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n" + extra)


@pytest.fixture
def daemon(home: Path) -> Iterator[DaemonProcess]:
    config(home)
    write(home / "memory" / "start.md", "# Start\n\nThe daemon indexes this on start-up.\n")
    d = DaemonProcess(home).start()
    d.wait_idle()
    yield d
    d.stop()


def paths_of(res: Any) -> list[str]:
    return [Path(r["path"]).name for r in res["results"]]


def test_edit_delete_move_through_watcher(daemon: DaemonProcess, home: Path) -> None:
    mem = home / "memory"
    with daemon.client() as c:
        assert "start.md" in paths_of(c.search("indexes on start-up", mode="keyword"))
        write(mem / "recipes" / "soup.md", "# Soup\n\nA lentil soup with cumin and lemon.\n")
        wait_for(lambda: "soup.md" in paths_of(c.search("lentil cumin", mode="keyword")))
        # Keyword first: the chunk is searchable before its vector is written (a back-fill
        # step a moment later; on a loaded host the first hybrid search can come before it).
        wait_for(lambda: c.status()["vectors"]["vectors_pending"] == 0)
        hit = c.search("lentil soup")["results"][0]
        assert hit["scores"]["vector"] is not None and hit["source"] == "memory"
        # editor-style save: write a temp file and rename it over the original
        tmp = mem / "recipes" / ".soup.md.swp"
        tmp.write_text("# Soup\n\nA pumpkin soup with ginger.\n")
        tmp.replace(mem / "recipes" / "soup.md")
        wait_for(lambda: "soup.md" in paths_of(c.search("pumpkin ginger", mode="keyword")))
        assert c.search("lentil cumin", mode="keyword")["results"] == []
        # move a whole folder
        shutil.move(str(mem / "recipes"), str(mem / "kitchen"))
        wait_for(
            lambda: any(
                "kitchen" in r["path"]
                for r in c.search("pumpkin ginger", mode="keyword")["results"]
            )
        )
        wait_for(
            lambda: (
                not any(
                    "recipes" in r["path"]
                    for r in c.search("pumpkin ginger", mode="keyword")["results"]
                )
            )
        )
        (mem / "kitchen" / "soup.md").unlink()
        wait_for(lambda: c.search("pumpkin ginger", mode="keyword")["results"] == [])
        st = c.status()
        assert st["counts"]["chunks"] == st["counts"]["fts_rows"] == st["counts"]["vectors"]


def test_errors_over_the_socket(daemon: DaemonProcess) -> None:
    with daemon.client() as c:
        with pytest.raises(Forbidden):
            c.get("/etc/passwd")
        with pytest.raises(BadRequest):
            c.search("")
        assert c.search("daemon")["results"]  # still serving
        events = c.watch()
        first = next(iter(events))
        assert first["state"] in ("idle", "syncing") and first["provider"].startswith("local/")


def test_concurrent_searches_during_reindex(daemon: DaemonProcess, home: Path) -> None:
    for i in range(60):
        write(
            home / "memory" / "bulk" / f"n{i}.md",
            f"# Note {i}\n\nThe harbour ferry number {i} leaves at dawn.\n",
        )
    with daemon.client() as c:
        c.sync(wait=True)
    errors: list[str] = []
    empties: list[int] = []
    counts = [0] * 8
    stop = threading.Event()

    def searcher(n: int) -> None:
        with daemon.client() as c:
            while not stop.is_set():
                try:
                    res = c.search("harbour ferry dawn", max_results=3)
                    if not res["results"]:
                        empties.append(n)
                    counts[n] += 1
                except Exception as exc:  # noqa: BLE001
                    errors.append(repr(exc))

    threads = [threading.Thread(target=searcher, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    try:
        with daemon.client(timeout=300) as c:
            report = c.reindex(wait=True)
        assert report["report"]["files_seen"] == 61
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == [] and empties == []
    assert all(n > 0 for n in counts)


@pytest.mark.slow
def test_kill9_during_sync_recovers(home: Path) -> None:
    config(home)
    for i in range(150):
        write(
            home / "memory" / f"f{i:03}.md",
            f"# File {i}\n\nParagraph about topic {i} and the lighthouse keeper.\n\n"
            f"Second paragraph {i}: inventory of the storeroom, shelf {i % 7}.\n",
        )
    d = DaemonProcess(home).start()
    try:
        with d.client() as c:
            wait_for(lambda: c.status()["progress"]["files_done"] >= 20, timeout=120, step=0.02)
        d.kill9()
        store = Store(home / "index.sqlite", readonly=True)
        assert store.integrity_ok()
        partial = store.counts()
        assert partial["chunks"] == partial["fts_rows"]
        store.close()
        d.start()
        d.wait_idle()
        store = Store(home / "index.sqlite", readonly=True)
        counts = store.counts()
        assert store.integrity_ok()
        assert counts["files"] == 150
        assert counts["chunks"] == counts["fts_rows"] == counts["vectors"]
        store.close()
    finally:
        d.stop()


@pytest.mark.slow
def test_second_daemon_refused_and_stale_socket_replaced(daemon: DaemonProcess, home: Path) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", "serve"],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 4
    assert "already running" in second.stderr and "Traceback" not in second.stderr
    assert "index check" not in second.stderr  # refused before it opened the first one's index
    daemon.kill9()
    assert daemon.socket.exists()  # stale socket left by the crash
    daemon.start()
    with daemon.client() as c:
        assert c.hello()["pid"] == daemon.proc.pid  # type: ignore[union-attr]
