"""``recalld tray`` on a real X server (Xvfb) with a real system tray (trayer) and real clicks.

The tray runs as ``recalld tray`` in a subprocess against a real daemon; the tests click with
XTEST, take screenshots with GetImage, and check what the daemon did. They follow the tray
through its state file (``RECALLD_TRAY_STATE_FILE``), waiting on conditions, never on sleeps.
With ``RECALLD_TRAY_SCREENSHOT`` set, the open menu's screenshot is also written to
``/tmp/recalld-tray-menu.png`` (or to the path it names, if it ends in ``.png``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, wait_for
from recalld.surfaces.tray_icons import COLOURS
from tray_xserver import (
    TRAYER,
    XServer,
    click,
    find_tray_window,
    find_window,
    move,
    press_key,
    window_tree,
    xserver_running,
)

pytest.importorskip("PIL")
MENU = "recalld menu"


@pytest.fixture
def xserver() -> Iterator[XServer]:
    yield from xserver_running()


def config(home: Path) -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.2\n")
    write(home / "memory" / "tray.md", "# Tray\n\nThe tray shows the daemon's state.\n")


class Tray:
    """``recalld tray`` in a subprocess on ``xs``, followed through its state file."""

    def __init__(self, xs: XServer, home: Path, tmp: Path, env: dict[str, str] | None = None):
        self.xs, self.tmp = xs, tmp
        self.state_file = tmp / "tray" / "state.json"
        self.log = tmp / "tray.log"
        self.env = env_for(home) | {
            "DISPLAY": xs.display,
            "PYSTRAY_BACKEND": "xorg",
            "RECALLD_TRAY_STATE_FILE": str(self.state_file),
            **(env or {}),
        }
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "recalld.surfaces.cli", "tray"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def state(self) -> dict[str, Any]:
        assert self.proc.poll() is None, self.log.read_text()
        try:
            return dict(json.loads(self.state_file.read_text()))
        except (OSError, ValueError):
            return {}

    def until(self, pred: Callable[[], Any], what: str, timeout: float = 60) -> None:
        try:
            wait_for(pred, timeout=timeout)
        except TimeoutError:
            windows = window_tree(self.xs)
            pytest.fail(f"{what} did not happen; state {self.state()}\n{windows}\n{self.logs()}")

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def icon(self) -> tuple[int, int, int, int]:
        where = find_tray_window(self.xs)
        assert where is not None, "the icon is not docked in the tray"
        return where[:4]

    def open_menu(self, button: int = 3) -> dict[str, Any]:
        """Click the icon; wait for the menu window; return its layout (rows with their spans)."""
        x, y, w, h = self.icon()
        click(self.xs, x + w // 2, y + h // 2, button)
        self.until(lambda: (self.state().get("menu") or {}).get("rows"), "the menu opening", 20)
        # The layout the tray reports is where X really shows a window. The menu is laid out
        # again when the status it shows changes (a row's text, so its width: 235 reported
        # while X still had 231 on a loaded machine), so wait for the two to agree.
        agreed: dict[str, Any] = {}

        def matches() -> bool:
            layout = dict(self.state().get("menu") or {})
            where = find_window(self.xs, MENU)
            box = tuple(layout.get(k) for k in ("x", "y", "width", "height"))
            agreed.update(layout if where == box else {})
            return where == box

        self.until(matches, "the reported menu layout matching its X window", 20)
        return agreed

    def choose(self, action: str) -> None:
        """Open the menu and click the item that runs ``action``."""
        layout = self.open_menu()
        row = next(r for r in layout["rows"] if r["action"] == action)
        assert row["enabled"], row
        click(self.xs, layout["x"] + 40, layout["y"] + (row["top"] + row["bottom"]) // 2)
        if action == "quit":  # the tray may be gone before its state says the menu closed
            return
        self.until(lambda: self.state().get("menu") is None, f"the menu closing after {action}")
        assert find_window(self.xs, MENU) is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def tray_host(xserver: XServer) -> Iterator[subprocess.Popen[bytes]]:
    if shutil.which("trayer") is None:
        pytest.skip("trayer is not installed (apt-get install trayer): no X11 system tray")
    env = dict(os.environ, DISPLAY=xserver.display)
    quiet = subprocess.DEVNULL
    proc = subprocess.Popen(TRAYER, env=env, stdout=quiet, stderr=quiet)
    yield proc
    proc.terminate()
    proc.wait(10)


def saved_menu_screenshot(img: Any) -> Path | None:
    """Also write the open menu where the lead can show it, when asked to."""
    wanted = os.environ.get("RECALLD_TRAY_SCREENSHOT")
    if not wanted:
        return None
    path = Path(wanted) if wanted.endswith(".png") else Path("/tmp/recalld-tray-menu.png")
    img.save(path)
    return path


def check_icon_pixels(img: Any, box: tuple[int, int, int, int], state: str) -> None:
    """The docked icon shows the state's colour, and the tray's own background where the icon
    is transparent (its corners): no black square, no noise."""
    x, y, w, h = box
    icon = img.crop((x, y, x + w, y + h)).convert("RGB")
    pixels = [c for _, c in icon.getcolors(w * h) or []]
    counts = {c: n for n, c in icon.getcolors(w * h) or []}

    def near(a: tuple[int, ...], b: tuple[int, ...], tol: int) -> bool:
        return max(abs(p - q) for p, q in zip(a, b, strict=True)) <= tol

    in_colour = sum(counts[c] for c in pixels if near(c, COLOURS[state], 16))
    assert in_colour >= w * h // 20, f"too little {state} colour: {sorted(counts.items())[:8]}"
    # The tray's background is the colour just beside the icon in the panel.
    beside = img.convert("RGB").getpixel((x + w + 2, y + h // 2))
    assert beside != (0, 0, 0)
    for corner in ((0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1)):
        colour = icon.getpixel(corner)
        assert near(colour, beside, 3), f"corner {corner} is {colour}, not the tray's {beside}"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_menu_runs_every_action(
    xserver: XServer, tray_host: Any, home: Path, tmp_path: Path
) -> None:
    config(home)
    opened = tmp_path / "opened.txt"
    opener = tmp_path / "opener.sh"
    # Written whole then renamed: the test never reads half a file.
    script = f'printf "%s" "$1" > "{opened}.tmp" && mv "{opened}.tmp" "{opened}"'
    opener.write_text(f"#!/bin/sh\n{script}\n")
    opener.chmod(0o755)
    daemon = DaemonProcess(home).start()
    tray = Tray(xserver, home, tmp_path, {"RECALLD_TRAY_OPENER": str(opener)})
    try:
        daemon.wait_idle()
        tray.until(lambda: tray.state().get("state") == "idle", "idle")
        tray.until(lambda: find_tray_window(xserver) is not None, "docking")
        assert tray.state()["backend"] == "xorg"
        check_icon_pixels(xserver.screenshot(tmp_path / "icon.png"), tray.icon(), "idle")

        # A right click opens the menu: the state and provider lines, then every action.
        layout = tray.open_menu(button=3)
        rows = layout["rows"]
        headers = [r["label"] for r in rows if r["kind"] == "header"]
        assert headers[0] == "recalld: idle" and headers[1].startswith("provider: local/")
        assert not any(r["enabled"] for r in rows if r["kind"] == "header")
        actions = [r["action"] for r in rows if r["kind"] == "item"]
        assert actions == ["sync", "reindex", "pause", "open", "quit"]
        # The pointer over an item lights it up.
        sync = next(i for i, r in enumerate(rows) if r["action"] == "sync")
        move(
            xserver, layout["x"] + 60, layout["y"] + (rows[sync]["top"] + rows[sync]["bottom"]) // 2
        )
        tray.until(lambda: tray.state()["menu"]["highlight"] == sync, "the item lighting up", 20)
        shot = xserver.screenshot(tmp_path / "menu.png")
        saved_menu_screenshot(
            shot.crop(
                (0, 0, layout["x"] + layout["width"] + 40, layout["y"] + layout["height"] + 30)
            )
        )
        check_menu_pixels(shot, layout, lit=sync)

        # The keys: Down from the item under the pointer to the next, Up wraps round to Quit.
        press_key(xserver, "Down")
        tray.until(lambda: tray.state()["menu"]["highlight"] == sync + 1, "Down moving on", 20)
        press_key(xserver, "Up")
        press_key(xserver, "Up")
        quit_row = len(rows) - 1
        tray.until(lambda: tray.state()["menu"]["highlight"] == quit_row, "Up wrapping round", 20)
        press_key(xserver, "Escape")  # Escape closes it, and runs nothing
        tray.until(lambda: tray.state().get("menu") is None, "Escape closing the menu")
        assert find_window(xserver, MENU) is None
        tray.open_menu(button=1)  # a left click opens it too; a click outside closes it
        click(xserver, 630, 390)
        tray.until(lambda: tray.state().get("menu") is None, "a click outside closing the menu")

        with daemon.client() as c:
            before = c.status()["last_sync"]
            tray.choose("sync")
            wait_for(lambda: c.status()["last_sync"] != before, timeout=30)
            # Reindex builds a new index file and swaps it in.
            index = Path(c.status()["index_path"])
            inode = index.stat().st_ino
            tray.choose("reindex")
            wait_for(lambda: index.stat().st_ino != inode, timeout=60)
            daemon.wait_idle()
            tray.choose("pause")
            wait_for(lambda: c.status()["daemon"]["paused"] is True)
            tray.until(lambda: tray.state().get("state") == "paused", "the tray showing paused")
            layout = tray.open_menu()
            pause = next(r for r in layout["rows"] if r["action"] == "pause")
            assert pause["label"] == "Resume watching"
            assert layout["rows"][0]["label"].startswith("recalld: paused")

            def labels() -> list[str]:
                return [r["label"] for r in (tray.state().get("menu") or {}).get("rows", [])]

            # An open menu follows the daemon: resumed elsewhere, its lines change in place.
            c.call("pause", {"paused": False})
            tray.until(
                lambda: labels()[:1] == ["recalld: idle"] and "Pause watching" in labels(),
                "the open menu following the daemon",
            )
            press_key(xserver, "Escape")
            tray.until(lambda: tray.state().get("menu") is None, "Escape closing the menu")
            c.call("pause", {"paused": True})
            tray.until(lambda: tray.state().get("state") == "paused", "the tray showing paused")
            tray.choose("pause")  # now "Resume watching"
            wait_for(lambda: c.status()["daemon"]["paused"] is False)

        tray.choose("open")
        wait_for(lambda: opened.exists())
        assert opened.read_text() == str(home / "memory")

        tray.choose("quit")
        assert tray.proc.wait(20) == 0, tray.logs()
        assert find_tray_window(xserver) is None  # the icon left the tray
        assert "Traceback" not in tray.logs(), tray.logs()
    finally:
        tray.stop()
        daemon.stop()


def check_menu_pixels(shot: Any, layout: dict[str, Any], lit: int) -> None:
    """The open menu on screen: its background, dark text on the items, grey header text, and
    the item under the pointer (``lit``) in the highlight colour."""
    from recalld.surfaces.tray_menu_x11 import BACKGROUND, GREY, HIGHLIGHT, TEXT

    x, y = layout["x"], layout["y"]
    menu = shot.crop((x, y, x + layout["width"], y + layout["height"])).convert("RGB")
    colours = dict((c, n) for n, c in menu.getcolors(menu.size[0] * menu.size[1]) or [])
    assert max(colours, key=lambda c: colours[c]) == BACKGROUND  # not noise: one background

    def has_ink(row: dict[str, Any], ink: tuple[int, int, int]) -> bool:
        strip = menu.crop((0, row["top"], menu.size[0], row["bottom"]))
        return any(c == ink for _, c in strip.getcolors(strip.size[0] * strip.size[1]) or [])

    for i, row in enumerate(layout["rows"]):
        if row["kind"] == "header":
            assert has_ink(row, GREY), row
        elif i == lit:
            assert has_ink(row, HIGHLIGHT) and not has_ink(row, TEXT), row
        elif row["kind"] == "item" and row["enabled"]:
            assert has_ink(row, TEXT) and not has_ink(row, HIGHLIGHT), row


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_signal_removes_icon_and_exits_cleanly(
    xserver: XServer, tray_host: Any, home: Path, tmp_path: Path, sig: int, code: int
) -> None:
    tray = Tray(xserver, home, tmp_path)  # no daemon: the tray shows offline all the same
    try:
        tray.until(lambda: tray.state().get("state") == "offline", "offline")
        tray.until(lambda: find_tray_window(xserver) is not None, "docking")
        check_icon_pixels(xserver.screenshot(tmp_path / "icon.png"), tray.icon(), "offline")
        tray.proc.send_signal(sig)
        assert tray.proc.wait(20) == code, tray.logs()
        assert find_tray_window(xserver) is None
        assert "Traceback" not in tray.logs(), tray.logs()
    finally:
        tray.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_tray_follows_the_daemon_in_a_tray_that_starts_later(
    xserver: XServer, home: Path, tmp_path: Path
) -> None:
    if shutil.which("trayer") is None:
        pytest.skip("trayer is not installed (apt-get install trayer): no X11 system tray")
    config(home)
    daemon = DaemonProcess(home).start()
    tray = Tray(xserver, home, tmp_path)
    trayer = None
    try:
        daemon.wait_idle()
        tray.until(lambda: tray.state().get("state") == "idle", "idle")
        assert "provider: local/" in tray.state()["title"] and "1 file," in tray.state()["title"]
        # The panel starts after the icon, as one often does at login: the icon docks all the same.
        assert find_tray_window(xserver) is None
        tray.until(lambda: "no system tray runs on display" in tray.logs(), "the no-tray warning")
        env = dict(os.environ, DISPLAY=xserver.display)
        trayer = subprocess.Popen(
            TRAYER, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        tray.until(lambda: find_tray_window(xserver) is not None, "docking into a later tray", 30)
        # The tooltip reaches X as the icon window's name (compared until both settle).
        tray.until(
            lambda: (find_tray_window(xserver) or "")[4:] == (tray.state()["title"],),
            "the title reaching X",
            30,
        )
        # Many new files: the watcher queues a sync and the tray shows it with progress.
        for i in range(300):
            write(home / "memory" / "bulk" / f"note-{i:03}.md", f"# Note {i}\n\nBulk note {i}.\n")
        with daemon.client() as c:
            c.sync()
        tray.until(lambda: "syncing" in tray.state().get("seen", [])[2:], "syncing")
        tray.until(
            lambda: tray.state().get("state") == "idle" and "301 files" in tray.state()["title"],
            "idle after the bulk sync",
            90,
        )
        x, y, w, h = tray.icon()
        assert w >= 16 and h >= 16  # repeated docking used to shrink it to one pixel in trayer
        check_icon_pixels(xserver.screenshot(tmp_path / "idle.png"), (x, y, w, h), "idle")

        daemon.stop()
        tray.until(lambda: tray.state().get("state") == "offline", "offline", 30)
        assert "not running" in tray.state()["title"]
        check_icon_pixels(xserver.screenshot(tmp_path / "offline.png"), tray.icon(), "offline")
        daemon.start()
        tray.until(lambda: tray.state().get("state") == "idle", "idle after the restart")
        seen = tray.state()["seen"]
        # offline (no daemon yet), idle, ..., syncing (the bulk), ..., offline (stopped), ..., idle
        assert seen[0] == "offline" and seen[-1] == "idle"
        assert "offline" in seen[seen.index("syncing") :]
        assert {"idle", "syncing", "offline"} <= set(tray.state()["icons"])
        assert "Traceback" not in tray.logs(), tray.logs()  # no tray yet is no error
    finally:
        tray.stop()
        if trayer is not None:
            trayer.terminate()
            trayer.wait(10)
        daemon.stop()


def test_menu_stays_on_screen_and_reports_the_clicked_item(xserver: XServer) -> None:
    """The popup alone, in this process: opened near the bottom-right corner (a panel at the
    bottom) it opens above and left of the pointer, fully on screen."""
    from recalld.surfaces.tray_menu_x11 import PopupMenu, menu_rows
    from recalld.surfaces.tray_view import view_for

    chosen: list[str] = []
    layouts: list[dict[str, Any] | None] = []
    rows = menu_rows(view_for({"state": "idle", "provider": "none", "files": 1, "chunks": 1}))
    menu = PopupMenu(xserver.display, lambda: rows, chosen.append, on_layout=layouts.append)
    menu.toggle(630, 390)
    wait_for(lambda: find_window(xserver, MENU) is not None)
    x, y, w, h = find_window(xserver, MENU) or (0, 0, 0, 0)
    assert x + w <= 640 and y + h <= 390 and x >= 0 and y >= 0, (x, y, w, h)
    wait_for(lambda: bool(layouts) and layouts[-1] is not None)
    reindex = next(r for r in (layouts[-1] or {})["rows"] if r["action"] == "reindex")
    click(xserver, x + 50, y + (reindex["top"] + reindex["bottom"]) // 2)
    wait_for(lambda: chosen == ["reindex"] and layouts[-1] is None)
    assert find_window(xserver, MENU) is None and not menu.is_open
    # Opened and closed again without a click: close() from another thread.
    menu.toggle(10, 10)
    wait_for(lambda: find_window(xserver, MENU) is not None)
    menu.close()
    wait_for(lambda: find_window(xserver, MENU) is None)
    assert chosen == ["reindex"]
