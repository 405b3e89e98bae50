"""The tray's menu without a display: rows, drawing, hit testing, the opener, pystray's menu."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recalld.surfaces.tray_app import open_folder
from recalld.surfaces.tray_menu_x11 import (
    BACKGROUND,
    DISABLED,
    GREY,
    HIGHLIGHT,
    TEXT,
    MenuRow,
    menu_rows,
    render_menu,
    row_at,
    row_boxes,
)
from recalld.surfaces.tray_view import View, header_lines, menu_entries, view_for

pytest.importorskip("PIL")

IDLE = {
    "state": "idle",
    "provider": "local/all-MiniLM-L6-v2",
    "files": 3,
    "chunks": 12,
    "last_sync": time.time(),
}


def test_rows_show_state_and_provider_then_every_action() -> None:
    rows = menu_rows(view_for(IDLE))
    assert [r.label for r in rows if r.kind == "header"][:2] == [
        "recalld: idle",
        "provider: local/all-MiniLM-L6-v2",
    ]
    assert not any(r.enabled for r in rows if r.kind != "item")
    items = [(r.action, r.label, r.enabled) for r in rows if r.kind == "item"]
    assert items == [
        ("sync", "Sync now", True),
        ("reindex", "Reindex", True),
        ("pause", "Pause watching", True),
        ("open", "Open memory folder", True),
        ("quit", "Quit", True),
    ]
    kinds = [r.kind for r in rows]
    assert kinds[kinds.index("item") - 1] == "separator"  # headers, a line, the actions
    assert kinds[-2:] == ["separator", "item"]  # a line before Quit


def test_paused_offers_resume_and_offline_greys_daemon_actions() -> None:
    paused = view_for(IDLE | {"state": "paused", "paused": True})
    pause = next(e for e in menu_entries(paused) if e.action == "pause")
    assert pause.label == "Resume watching" and pause.checked is None  # an action, not a state
    offline = {r.action: r.enabled for r in menu_rows(view_for(None)) if r.kind == "item"}
    assert offline == {
        "start": True,
        "sync": False,
        "reindex": False,
        "pause": False,
        "open": True,
        "quit": True,
    }
    assert [e.action for e in menu_entries(view_for(None)) if e.default] == ["start"]
    assert header_lines(view_for(None))[0] == "recalld: offline"


def test_header_is_limited() -> None:
    view = View("error", "\n".join(f"line {i}" for i in range(20)))
    assert header_lines(view) == [f"line {i}" for i in range(6)]


def test_hit_testing_matches_the_drawn_rows() -> None:
    rows = menu_rows(view_for(IDLE))
    boxes = row_boxes(rows)
    img = render_menu(rows)
    assert img.size[1] == boxes[-1][1] + 1 and img.size[0] >= 200
    for i, (top, bottom) in enumerate(boxes):
        assert row_at(rows, top) == i and row_at(rows, bottom - 1) == i
    assert row_at(rows, 0) is None and row_at(rows, img.size[1] + 5) is None


def _colours(img: object, box: tuple[int, int]) -> set[tuple[int, int, int]]:
    from PIL import Image

    assert isinstance(img, Image.Image)
    strip = img.crop((0, box[0], img.size[0], box[1]))
    return {c for _, c in strip.getcolors(strip.size[0] * strip.size[1]) or []}


def test_drawing_headers_items_highlight_and_check_mark() -> None:
    rows = menu_rows(view_for(IDLE | {"state": "paused", "paused": True}))
    boxes = row_boxes(rows)
    plain = render_menu(rows)
    header = _colours(plain, boxes[0])
    assert BACKGROUND in header and GREY in header and TEXT not in header
    sync = next(i for i, r in enumerate(rows) if r.action == "sync")
    assert TEXT in _colours(plain, boxes[sync]) and HIGHLIGHT not in _colours(plain, boxes[sync])
    lit = render_menu(rows, highlight=sync)
    assert HIGHLIGHT in _colours(lit, boxes[sync]) and (255, 255, 255) in _colours(lit, boxes[sync])
    # Headers never light up; greyed items are drawn grey.
    assert render_menu(rows, highlight=0).tobytes() == plain.tobytes()
    greyed = [MenuRow("item", "Sync now", "sync", enabled=False)]
    assert DISABLED in _colours(render_menu(greyed), row_boxes(greyed)[0])
    # The pause item is an action ("Resume watching"), drawn without a check mark; a check item
    # would differ from it.
    pause = next(i for i, r in enumerate(rows) if r.action == "pause")
    assert rows[pause].label == "Resume watching"
    top, bottom = boxes[pause]

    def left_of(row: MenuRow) -> bytes:
        return render_menu([*rows[:pause], row]).crop((0, top, 40, bottom)).tobytes()

    shown = plain.crop((0, top, 40, bottom)).tobytes()
    assert shown == left_of(MenuRow("item", rows[pause].label, "pause", True, False))
    assert shown != left_of(MenuRow("item", rows[pause].label, "pause", True, True))


def test_opener_command_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.txt"
    script = tmp_path / "show folder.sh"  # a space: the command is split like a shell would
    script.write_text(
        f'#!/bin/sh\nprintf "%s|%s" "$1" "$2" > "{out}.tmp" && mv "{out}.tmp" "{out}"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("RECALLD_TRAY_OPENER", f"'{script}' --new-window")
    folder = tmp_path / "memory"
    open_folder(folder)
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert out.read_text() == f"--new-window|{folder}" and folder.is_dir()


def test_missing_opener_says_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALLD_TRAY_OPENER", str(tmp_path / "no-such-opener"))
    with pytest.raises(OSError, match="cannot run"):
        open_folder(tmp_path / "memory")
    monkeypatch.delenv("RECALLD_TRAY_OPENER")
    monkeypatch.setenv("PATH", str(tmp_path))  # no xdg-open anywhere
    if sys.platform.startswith("linux"):
        with pytest.raises(OSError, match="RECALLD_TRAY_OPENER"):
            open_folder(tmp_path / "memory")


def test_desktop_menu_lists_state_and_actions() -> None:
    """The menu given to pystray's desktop backends (AppIndicator, GTK): same lines and actions.

    Built in a subprocess: pystray picks its backend once per process, on import.
    """
    code = """
from recalld.surfaces.tray import build_menu, TrayApp
from recalld.surfaces.tray_view import view_for
import time
app = TrayApp(socket_path=__import__("pathlib").Path("/nonexistent.sock"))
app.view = view_for({"state": "idle", "provider": "none", "last_sync": time.time()})
menu = build_menu(app, lambda: None)
for item in menu.items:
    print(repr(item.text), item.enabled, item.checked)
"""
    env = dict(os.environ, PYSTRAY_BACKEND="dummy")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "'recalld: idle' False None"
    assert lines[1] == "'provider: none' False None"
    assert "'Sync now' True None" in lines
    assert "'Pause watching' True None" in lines  # an action, not a check item
    assert lines[-1] == "'Quit' True None"


def test_system_pygobject_is_found_only_when_complete(tmp_path: Path) -> None:
    import sysconfig

    from recalld.surfaces.tray import system_gi_dir

    site, typelibs = tmp_path / "dist-packages", tmp_path / "girepository-1.0"
    (site / "gi").mkdir(parents=True)
    typelibs.mkdir()
    dirs = ((str(site),), (str(typelibs),))
    assert system_gi_dir(*dirs) is None  # no compiled gi for this Python
    (site / "gi" / f"_gi{sysconfig.get_config_var('EXT_SUFFIX')}").write_bytes(b"")
    (typelibs / "Gtk-3.0.typelib").write_bytes(b"")
    assert system_gi_dir(*dirs) is None  # GTK but no AppIndicator library
    (typelibs / "AyatanaAppIndicator3-0.1.typelib").write_bytes(b"")
    assert system_gi_dir(*dirs) == site
    (typelibs / "Gtk-3.0.typelib").unlink()
    assert system_gi_dir(*dirs) is None
