"""A real X server (Xvfb), a real system tray (trayer) and real input (XTEST) for tray tests."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

XVFB_ARGS = ["-screen", "0", "640x400x24", "-nolisten", "tcp", "-noreset"]


class XServer:
    """Xvfb on a free display number (chosen by Xvfb itself through -displayfd).

    With ``-noreset``: by default an X server resets when its last client disconnects, and
    a client that connects during the reset gets its connection reset (ConnectionClosedError,
    ECONNRESET) or sees a server with none of its state. A desktop always has clients (the
    window manager, the panel); here the helpers below connect once per call, and a test of
    the popup alone has moments without any client: the next helper or menu connection then
    raced the reset.
    """

    def __init__(self) -> None:
        read, write_ = os.pipe()
        self.proc = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_), *XVFB_ARGS],
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


def click(xs: XServer, x: int, y: int, button: int = 1) -> None:
    """Move the pointer to (x, y) and click ``button`` there, through XTEST (real X input)."""
    from Xlib import X
    from Xlib.ext import xtest

    d = xs.connect()
    try:
        xtest.fake_input(d, X.MotionNotify, x=x, y=y)
        xtest.fake_input(d, X.ButtonPress, button)
        xtest.fake_input(d, X.ButtonRelease, button)
        d.sync()
    finally:
        d.close()


# A real system tray for X11, as a panel at the top of the screen (26 px: square 24 px icons).
TRAYER = [
    "trayer", "--edge", "top", "--align", "left", "--widthtype", "pixel", "--width", "120",
    "--heighttype", "pixel", "--height", "26", "--SetDockType", "false", "--transparent",
    "false", "--tint", "0xffffff",
]  # fmt: skip


def need_xvfb() -> None:
    """Skip unless Xvfb and the tray's X libraries are installed."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    # Not imported here: pystray's X backend connects to $DISPLAY as it is imported.
    for module in ("pystray", "Xlib"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install 'recalld[tray]')")


def xserver_running() -> Iterator[XServer]:
    """Body of an ``xserver`` fixture: a fresh Xvfb, stopped afterwards."""
    need_xvfb()
    xs = XServer()
    try:
        yield xs
    finally:
        xs.stop()


def find_window(xs: XServer, name: str) -> tuple[int, int, int, int] | None:
    """(x, y, width, height) of the mapped window called ``name``, or None."""
    from Xlib import X

    d = xs.connect()
    try:
        root = d.screen().root
        stack = list(root.query_tree().children)
        while stack:
            win = stack.pop()
            stack.extend(win.query_tree().children)
            if win.get_wm_name() != name or win.get_attributes().map_state != X.IsViewable:
                continue
            pos = root.translate_coords(win, 0, 0)
            geo = win.get_geometry()
            return pos.x, pos.y, geo.width, geo.height
        return None
    finally:
        d.close()


def move(xs: XServer, x: int, y: int) -> None:
    """Move the pointer to (x, y) through XTEST."""
    from Xlib import X
    from Xlib.ext import xtest

    d = xs.connect()
    try:
        xtest.fake_input(d, X.MotionNotify, x=x, y=y)
        d.sync()
    finally:
        d.close()


def press_key(xs: XServer, keysym_name: str) -> None:
    """Press and release a key (by keysym name, e.g. "Escape") through XTEST."""
    from Xlib import XK, X
    from Xlib.ext import xtest

    d = xs.connect()
    try:
        code = d.keysym_to_keycode(XK.string_to_keysym(keysym_name))
        xtest.fake_input(d, X.KeyPress, code)
        xtest.fake_input(d, X.KeyRelease, code)
        d.sync()
    finally:
        d.close()


def window_tree(xs: XServer) -> str:
    """Every window (depth, id, name, mapped, geometry): for failure messages."""
    d = xs.connect()
    try:
        lines, stack = [], [(w, 0) for w in d.screen().root.query_tree().children]
        while stack:
            win, depth = stack.pop()
            geo = win.get_geometry()
            mapped = win.get_attributes().map_state
            name = win.get_wm_name()
            lines.append(f"{'  ' * depth}{win.id:#x} {name!r} map={mapped} {geo.x},{geo.y} "
                         f"{geo.width}x{geo.height} depth={geo.depth}")  # fmt: skip
            stack.extend((child, depth + 1) for child in win.query_tree().children)
        return "\n".join(lines)
    finally:
        d.close()
