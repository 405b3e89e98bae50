"""``recalld tray``: the pure state machine, the icons, the watch loop, and a real tray on Xvfb."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, wait_for
from recalld.tray import TrayApp, View, menu_entries, view_for

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
    assert pause.checked is True and pause.enabled


def test_offline() -> None:
    v = view_for(None, offline_reason="no recalld daemon is listening at /run/x.sock")
    assert v.state == "offline" and not v.online
    assert v.title.startswith("recalld: offline\n") and "/run/x.sock" in v.title
    entries = {e.action: e for e in menu_entries(v)}
    assert not entries["sync"].enabled and not entries["reindex"].enabled
    assert not entries["pause"].enabled and entries["pause"].checked is False
    assert entries["open"].enabled and entries["quit"].enabled
    assert entries["sync"].default


def test_title_is_clipped() -> None:
    v = view_for(event(last_error="x" * 500), limit=127)
    assert len(v.title) <= 127 and v.title.endswith("...")
    assert all(len(line) <= 72 for line in view_for(event(last_error="y" * 500)).title.split("\n"))


# icons ------------------------------------------------------------------------------------------


def test_icons_are_distinct_rgba_64() -> None:
    from recalld.tray_icons import STATES, draw_icon

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


def config(home: Path) -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.2\n")
    write(home / "memory" / "tray.md", "# Tray\n\nThe tray shows the daemon's state.\n")


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


class XServer:
    """Xvfb on a free display number (chosen by Xvfb itself through -displayfd)."""

    def __init__(self) -> None:
        read, write_ = os.pipe()
        self.proc = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_), "-screen", "0", "400x200x24", "-nolisten", "tcp"],
            pass_fds=(write_,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(write_)
        with os.fdopen(read) as f:
            number = f.readline().strip()
        if not number:
            self.proc.kill()
            raise RuntimeError("Xvfb did not report a display number")
        self.display = f":{number}"

    def connect(self) -> Any:
        from Xlib import display

        return display.Display(self.display)

    def screenshot(self, path: Path) -> Any:
        """A real screenshot of the root window (python-xlib GetImage), saved as PNG."""
        from PIL import Image
        from Xlib import X

        d = self.connect()
        try:
            root = d.screen().root
            geo = root.get_geometry()
            raw = root.get_image(0, 0, geo.width, geo.height, X.ZPixmap, 0xFFFFFFFF)
            img = Image.frombytes("RGB", (geo.width, geo.height), raw.data, "raw", "BGRX")
        finally:
            d.close()
        path.parent.mkdir(exist_ok=True)
        img.save(path)
        if shutil.which("import"):  # ImageMagick's own grab too, when it is installed
            env = dict(os.environ, DISPLAY=self.display)
            subprocess.run(
                ["import", "-window", "root", str(path.with_suffix(".import.png"))],
                env=env,
                check=False,
                timeout=30,
                capture_output=True,
            )
        return img

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def find_tray_window(xs: XServer) -> tuple[int, int, int, int, str] | None:
    """(x, y, width, height, title) of the recalld icon if a tray manager has docked it."""
    from Xlib import X

    d = xs.connect()
    try:
        root = d.screen().root
        stack = list(root.query_tree().children)
        while stack:
            win = stack.pop()
            stack.extend(win.query_tree().children)
            name = win.get_wm_name()
            if not isinstance(name, str) or not name.startswith("recalld"):
                continue
            parent = win.query_tree().parent
            if parent.id == root.id or win.get_attributes().map_state != X.IsViewable:
                return None  # exists but not docked (no tray manager took it)
            pos = root.translate_coords(win, 0, 0)
            geo = win.get_geometry()
            return pos.x, pos.y, geo.width, geo.height, name
        return None
    finally:
        d.close()


def click(xs: XServer, x: int, y: int) -> None:
    from Xlib import X
    from Xlib.ext import xtest

    d = xs.connect()
    try:
        xtest.fake_input(d, X.MotionNotify, x=x, y=y)
        xtest.fake_input(d, X.ButtonPress, 1)
        xtest.fake_input(d, X.ButtonRelease, 1)
        d.sync()
    finally:
        d.close()


# A real system tray for X11, as a panel at the top of the screen (26 px: square 24 px icons).
TRAYER = [
    "trayer", "--edge", "top", "--align", "left", "--widthtype", "request", "--heighttype",
    "pixel", "--height", "26", "--SetDockType", "false", "--transparent", "false",
    "--tint", "0xffffff",
]  # fmt: skip


@pytest.fixture
def xserver() -> Iterator[XServer]:
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    # Not imported here: pystray's X backend connects to $DISPLAY as it is imported.
    for module in ("pystray", "Xlib"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install 'recalld[tray]')")
    xs = XServer()
    yield xs
    xs.stop()


@pytest.mark.timeout(180)
def test_real_tray_on_xvfb(xserver: XServer, home: Path, tmp_path: Path) -> None:
    config(home)
    ARTIFACTS.mkdir(exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    # pystray's X backend docks into a system tray (XEMBED); trayer is a real one. It starts
    # after the tray icon, as a panel often does at login: the icon must dock all the same.
    has_tray_manager = shutil.which("trayer") is not None
    daemon = DaemonProcess(home).start()
    state_file = tmp_path / "tray" / "state.json"
    env = env_for(home) | {
        "DISPLAY": xserver.display,
        "PYSTRAY_BACKEND": "xorg",
        "RECALLD_TRAY_STATE_FILE": str(state_file),
    }
    tray_log = (tmp_path / "tray.log").open("wb")
    tray = subprocess.Popen(
        [sys.executable, "-m", "recalld.cli", "tray"],
        env=env,
        stdout=tray_log,
        stderr=subprocess.STDOUT,
    )
    procs.append(tray)

    def state() -> dict[str, Any]:
        assert tray.poll() is None, (tmp_path / "tray.log").read_text()
        try:
            return dict(json.loads(state_file.read_text()))
        except (OSError, ValueError):
            return {}

    def until(pred: Any, what: str, timeout: float = 60) -> None:
        try:
            wait_for(pred, timeout=timeout)
        except TimeoutError:
            log = (tmp_path / "tray.log").read_text()
            pytest.fail(f"tray: {what} did not happen; state {state()}; X {found()}\n{log}")

    def found() -> Any:
        return find_tray_window(xserver) if has_tray_manager else None

    def shot(name: str) -> None:
        xserver.screenshot(ARTIFACTS / f"tray-screen-{name}.png")
        if has_tray_manager:
            where = find_tray_window(xserver)
            assert where is not None, "the icon is not docked in the tray"
            x, y, w, h, _ = where
            # Still full size: repeated docking used to shrink it to one pixel wide in trayer.
            assert w >= 16 and h >= 16, where
            img = xserver.screenshot(tmp_path / "screen.png")
            img.crop((x, y, x + w, y + h)).save(ARTIFACTS / f"tray-docked-{name}.png")

    try:
        daemon.wait_idle()
        until(lambda: state().get("state") == "idle", "idle")
        st = state()
        assert "provider: local/" in st["title"] and "1 file," in st["title"]
        if has_tray_manager:
            assert found() is None  # no tray yet
            quiet = subprocess.DEVNULL
            procs.append(subprocess.Popen(TRAYER, env=env, stdout=quiet, stderr=quiet))
            until(lambda: found() is not None, "docking into a tray that started later", 30)
        shot("idle")
        if has_tray_manager:
            # The tooltip reaches X as the icon window's name (compared until both settle: an
            # event may land between the two reads).
            until(lambda: (found() or "")[4:] == (state()["title"],), "title reaching X", 30)
            where = find_tray_window(xserver)
            assert where is not None
            x, y, w, h, _ = where
            # A left click runs the default menu item (Sync now): the daemon syncs.
            with daemon.client() as c:
                before = c.status()["last_sync"]
                click(xserver, x + w // 2, y + h // 2)
                wait_for(lambda: c.status()["last_sync"] != before, timeout=30)

        # Many new files: the watcher queues a sync and the tray shows it with progress.
        for i in range(300):
            write(
                home / "memory" / "bulk" / f"note-{i:03}.md",
                f"# Note {i}\n\nBulk note number {i} about topic {i % 17}.\n",
            )
        with daemon.client() as c:
            c.sync()
        until(lambda: "syncing" in state().get("seen", [])[2:], "syncing")
        if state().get("state") == "syncing":
            shot("syncing")
        until(
            lambda: state().get("state") == "idle" and "301 files" in state()["title"],
            "idle after the bulk sync",
            90,
        )

        daemon.stop()
        until(lambda: state().get("state") == "offline", "offline", 30)
        shot("offline")
        assert "not running" in state()["title"]

        daemon.start()
        until(lambda: state().get("state") == "idle", "idle after the restart")
        seen = state()["seen"]
        # offline (no daemon yet), idle, ..., syncing (the bulk), ..., offline (stopped), ..., idle
        assert seen[0] == "offline" and seen[-1] == "idle"
        assert "offline" in seen[seen.index("syncing") :]
        for name, png in state()["icons"].items():
            shutil.copy(png, ARTIFACTS / f"tray-shown-{name}.png")
        assert {"idle", "syncing", "offline"} <= set(state()["icons"])
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        daemon.stop()
