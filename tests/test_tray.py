"""``recalld tray``: the state machine, the icons and the watch loop (Xvfb: test_tray_x11)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import write
from daemon_process import DaemonProcess, wait_for
from recalld.surfaces.tray import TrayApp, View, menu_entries, view_for
from recalld_client import Client, is_running

PIL = pytest.importorskip("PIL")

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
NOW = time.mktime((2026, 3, 14, 15, 9, 26, 0, 0, -1))


def event(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "state": "idle",
        "provider": "local/all-MiniLM-L6-v2",
        "degraded": None,
        "progress": {"files_done": 0, "files_total": 0},
        "files": 3,
        "chunks": 1204,
        "last_sync": NOW - 60,
        "last_error": None,
        "pending": 0,
        "paused": False,
    }
    base.update(kw)
    return base


# the state machine ------------------------------------------------------------------------------


def test_idle() -> None:
    v = view_for(event(), now=NOW)
    assert (v.state, v.progress, v.online, v.paused) == ("idle", None, True, False)
    assert v.title.splitlines() == [
        "recalld: idle",
        "provider: local/all-MiniLM-L6-v2",
        "3 files, 1,204 chunks",
        "last sync: 15:08:26",
    ]
    assert "1 file," in view_for(event(files=1), now=NOW).title
    assert "last sync: never" in view_for(event(last_sync=None), now=NOW).title
    assert "2026-03-13" in view_for(event(last_sync=NOW - 86400), now=NOW).title


def test_syncing_with_progress() -> None:
    v = view_for(event(state="syncing", progress={"files_done": 5, "files_total": 20}), now=NOW)
    assert v.state == "syncing" and v.progress == 0.25
    assert v.title.startswith("recalld: syncing 5/20 files (25 %)\n")
    unknown = view_for(event(state="syncing", progress={"files_done": 0, "files_total": 0}))
    assert unknown.state == "syncing" and unknown.progress is None
    rebuild = view_for(event(state="reindexing", progress={"files_done": 9, "files_total": 9}))
    assert rebuild.state == "syncing" and rebuild.progress == 1.0
    assert rebuild.title.startswith("recalld: reindexing 9/9 files (100 %)")
    assert rebuild.icon_key() == ("syncing", 50)


def test_degraded_keyword_only_or_reranker_down() -> None:
    v = view_for(event(degraded="no embedding provider is configured", provider="none"))
    assert v.state == "degraded"
    assert "keyword-only" in v.title and "degraded: no embedding provider" in v.title
    r = view_for(event(last_error="reranker unavailable: 401 from Cohere"))
    assert r.state == "degraded" and "reranker unavailable" in r.title and "error:" not in r.title


def test_error() -> None:
    v = view_for(event(last_error="embedding failed: ollama at 127.0.0.1:11434 refused"))
    assert v.state == "error"
    assert "error: embedding failed" in v.title
    # An error outranks degraded; syncing outranks both (the ring shows work is going on).
    assert view_for(event(last_error="x", degraded="y")).state == "error"
    assert view_for(event(state="syncing", last_error="x")).state == "syncing"


def test_paused() -> None:
    v = view_for(event(state="paused", paused=True))
    assert v.state == "paused" and v.paused and "not watching" in v.title
    syncing = view_for(event(state="syncing", paused=True))
    assert syncing.state == "syncing" and "watching paused" in syncing.title
    pause = next(e for e in menu_entries(v) if e.action == "pause")
    assert pause.label == "Resume watching" and pause.checked is None and pause.enabled


def test_offline() -> None:
    v = view_for(None, offline_reason="no recalld daemon is listening at /run/x.sock")
    assert v.state == "offline" and not v.online
    assert v.title.startswith("recalld: offline\n") and "/run/x.sock" in v.title
    entries = {e.action: e for e in menu_entries(v)}
    assert not entries["sync"].enabled and not entries["reindex"].enabled
    assert not entries["pause"].enabled and entries["pause"].checked is None
    assert entries["open"].enabled and entries["quit"].enabled
    assert entries["start"].enabled and entries["start"].default and not entries["sync"].default
    assert "start" not in {e.action for e in menu_entries(view_for(event()))}


def test_title_is_clipped() -> None:
    v = view_for(event(last_error="x" * 500), limit=127)
    assert len(v.title) <= 127 and v.title.endswith("...")
    assert all(len(line) <= 72 for line in view_for(event(last_error="y" * 500)).title.split("\n"))


# icons ------------------------------------------------------------------------------------------


def test_icons_are_distinct_rgba_64() -> None:
    from recalld.surfaces.tray_icons import STATES, draw_icon

    images = {state: draw_icon(state) for state in STATES}
    for state, img in images.items():
        assert img.mode == "RGBA" and img.size == (64, 64), state
    blobs = {state: img.tobytes() for state, img in images.items()}
    assert len(set(blobs.values())) == len(STATES)
    # Each filled state has its own dominant colour.
    dominant = {s: max(img.getcolors(64 * 64))[1] for s, img in images.items() if s != "offline"}
    assert len(set(dominant.values())) == len(dominant)
    # The ring grows with progress.
    from PIL import ImageChops

    low, high = draw_icon("syncing", 0.1).convert("RGB"), draw_icon("syncing", 0.9).convert("RGB")
    assert ImageChops.difference(low, high).getbbox() is not None
    with pytest.raises(ValueError, match="unknown tray state"):
        draw_icon("sleepy")
    ARTIFACTS.mkdir(exist_ok=True)
    for state, img in images.items():
        img.save(ARTIFACTS / f"tray-icon-{state}.png")
    draw_icon("syncing", 0.4).save(ARTIFACTS / "tray-icon-syncing-40.png")


# the watch loop against a real daemon (no display) ----------------------------------------------


def test_a_daemon_started_on_demand_is_announced() -> None:
    title = view_for(event(on_demand="mcp")).title
    assert "started on demand by recalld mcp: stops when idle" in title
    assert "on demand" not in view_for(event()).title


def test_the_offline_menu_starts_the_daemon(home: Path) -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n")
    app = TrayApp(socket_path=home / "run" / "recalld.sock", backoff=(0.05, 0.3))
    app.start()
    try:
        wait_for(lambda: app.view.state == "offline")
        start = next(e for e in menu_entries(app.view) if e.action == "start")
        assert start.label == "Start recalld"
        app.run_action("start")  # the real `recalld start` for this RECALLD_HOME
        wait_for(lambda: app.view.online, timeout=180)
        assert app.note is None
        status = app.client.status()["daemon"]
        assert status["started_by"] == "start" and not status["on_demand"]
    finally:
        app.stop()
        with (
            contextlib.suppress(Exception),
            Client(home / "run" / "recalld.sock", reconnect=False) as client,
        ):
            client.shutdown()
        wait_for(lambda: not is_running(home / "run" / "recalld.sock", timeout=0.5), timeout=60)


def config(home: Path) -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.2\n")
    write(home / "memory" / "tray.md", "# Tray\n\nThe tray shows the daemon's state.\n")


@pytest.mark.slow
def test_app_follows_daemon_through_restart(home: Path) -> None:
    config(home)
    shown: list[View] = []
    opened: list[Path] = []
    app = TrayApp(
        socket_path=home / "run" / "recalld.sock",
        display=shown.append,
        state_file=home / "tray" / "state.json",
        opener=opened.append,
        backoff=(0.05, 0.3),
    )
    app.start()
    wait_for(lambda: app.view.state == "offline")
    daemon = DaemonProcess(home).start()
    try:
        wait_for(lambda: app.view.state == "idle" and "1 file," in app.view.title, timeout=60)
        app.run_action("pause")
        wait_for(lambda: app.view.state == "paused" and app.view.paused)
        app.run_action("pause")
        wait_for(lambda: app.view.state == "idle" and not app.view.paused)
        app.run_action("open")
        wait_for(lambda: opened == [home / "memory"])
        daemon.stop()
        wait_for(lambda: app.view.state == "offline")
        daemon.start()
        state_file = home / "tray" / "state.json"
        # The file is written just after the view is shown: wait for it rather than the view.
        wait_for(lambda: json.loads(state_file.read_text())["state"] == "idle", timeout=60)
        # Start-up syncs may show "syncing" around idle; the order of the rest is fixed.
        states = [v.state for v in shown if v.state != "syncing"]
        runs = [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]
        assert runs[:4] == ["offline", "idle", "paused", "idle"]
        assert runs[4:6] == ["offline", "idle"]
        state = json.loads(state_file.read_text())
        assert state["online"] is True and state["seen"][0] == "offline"
        assert Path(state["icons"]["paused"]).is_file()
    finally:
        app.stop()
        daemon.stop()


# a real tray under Xvfb -------------------------------------------------------------------------
