"""recalld's own popup menu for X11 trays, where pystray's X backend has none.

A right (or left) click on the tray icon opens it at the pointer: the state and provider lines
as grey header lines, then Sync now, Reindex, Pause/Resume, Open memory folder and Quit. A click
on an item runs it; Escape, a click outside or a second click on the icon closes it; the arrow
keys and Return work too.

The menu is drawn with Pillow (:func:`render_menu`, testable without a display) and shown in an
override-redirect window on a connection of its own, in a thread of its own, so pystray's X loop
never waits on it. Pillow draws the text, so no X core fonts are needed (many desktops lack them).
"""

from __future__ import annotations

import importlib
import logging
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recalld.surfaces.tray_view import View, header_lines, menu_entries

log = logging.getLogger(__name__)

WINDOW_NAME = "recalld menu"
PAD_X, ROW_H, SEP_H, FONT_PX = 12, 24, 9, 13
MIN_WIDTH = 200
BACKGROUND = (246, 246, 246)
TEXT = (24, 24, 24)
GREY = (112, 112, 112)
DISABLED = (168, 168, 168)
HIGHLIGHT = (47, 111, 214)
LINE = (208, 208, 208)
GRAB_TRIES_S = 1.0  # another client may hold the pointer for a moment after the click


@dataclass(frozen=True)
class MenuRow:
    """One row: a header line, an action, or a separator (``kind``)."""

    kind: str  # header | item | separator
    label: str = ""
    action: str = ""
    enabled: bool = False
    checked: bool | None = None


def menu_rows(view: View) -> list[MenuRow]:
    """Header lines, a separator, the actions, a separator, Quit."""
    rows = [MenuRow("header", line) for line in header_lines(view)]
    rows.append(MenuRow("separator"))
    for entry in menu_entries(view):
        if entry.action == "quit":
            rows.append(MenuRow("separator"))
        rows.append(MenuRow("item", entry.label, entry.action, entry.enabled, entry.checked))
    return rows


def row_boxes(rows: list[MenuRow]) -> list[tuple[int, int]]:
    """The (top, bottom) pixel span of each row."""
    boxes, y = [], 1
    for row in rows:
        h = SEP_H if row.kind == "separator" else ROW_H
        boxes.append((y, y + h))
        y += h
    return boxes


def row_at(rows: list[MenuRow], y: int) -> int | None:
    """The index of the row at height ``y``, or None (outside, or between rows)."""
    for i, (top, bottom) in enumerate(row_boxes(rows)):
        if top <= y < bottom:
            return i
    return None


def _font() -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=FONT_PX)
    except (TypeError, ImportError, OSError):  # Pillow < 10.1 or no FreeType: the bitmap font
        return ImageFont.load_default()


def render_menu(rows: list[MenuRow], highlight: int | None = None) -> Any:
    """The menu as an RGB ``PIL.Image``; ``highlight`` is the row under the pointer."""
    from PIL import Image, ImageDraw

    font = _font()
    boxes = row_boxes(rows)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    widths = [probe.textlength(r.label, font=font) for r in rows if r.label]
    width = max(MIN_WIDTH, int(max(widths, default=0)) + 2 * PAD_X + 20)
    height = boxes[-1][1] + 1 if boxes else 2
    img = Image.new("RGB", (width, height), BACKGROUND)
    d = ImageDraw.Draw(img)
    d.rectangle((0, 0, width - 1, height - 1), outline=GREY)
    for i, (row, (top, bottom)) in enumerate(zip(rows, boxes, strict=True)):
        if row.kind == "separator":
            mid = (top + bottom) // 2
            d.line((4, mid, width - 5, mid), fill=LINE)
            continue
        colour = GREY if row.kind == "header" else TEXT if row.enabled else DISABLED
        if i == highlight and row.kind == "item" and row.enabled:
            d.rectangle((1, top, width - 2, bottom - 1), fill=HIGHLIGHT)
            colour = (255, 255, 255)
        x = PAD_X + (20 if row.kind == "item" else 0)
        d.text((x, (top + bottom) // 2), row.label, fill=colour, font=font, anchor="lm")
        if row.checked:  # a check mark drawn as two lines: no font needs the glyph
            y = (top + bottom) // 2
            d.line([(PAD_X, y), (PAD_X + 4, y + 4), (PAD_X + 11, y - 5)], fill=colour, width=2)
    return img


class PopupMenu:
    """The popup: ``toggle`` opens it at a point (or closes it); ``choose`` gets the action.

    ``rows`` is asked for the current rows while the menu is open, so it follows the daemon.
    """

    def __init__(
        self,
        display_name: str,
        rows: Callable[[], list[MenuRow]],
        choose: Callable[[str], None],
        on_layout: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> None:
        self.display_name = display_name
        self.rows = rows
        self.choose = choose
        self.on_layout = on_layout  # told where the menu and its rows are (None: closed)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._close = threading.Event()
        self._dirty = threading.Event()
        self._ending = threading.Event()  # the open menu is going away on its own

    @property
    def is_open(self) -> bool:
        """Whether the menu is shown (or about to be).

        Not once its loop has ended: the thread lives on a moment to run the chosen action.
        """
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._ending.is_set()

    def toggle(self, x: int, y: int) -> None:
        """Open the menu at root coordinates (x, y), or close it when it is open."""
        with self._lock:
            thread = self._thread
            if thread is not None and thread.is_alive():
                if not self._ending.is_set():
                    self._close.set()
                    return
                thread.join(1.0)  # a menu just closed by a click or a key: open a new one
            self._close.clear()
            self._ending.clear()
            self._thread = threading.Thread(
                target=self._run, args=(x, y), name="recalld-tray-menu", daemon=True
            )
            self._thread.start()

    def refresh(self) -> None:
        """Redraw with the current rows (the daemon's state changed)."""
        self._dirty.set()

    def close(self, wait: float = 2.0) -> None:
        """Close the menu if it is open."""
        self._close.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait)

    def _run(self, x: int, y: int) -> None:
        chosen = None
        try:
            chosen = _MenuWindow(self, x, y).loop()
        except Exception:  # a menu that fails must not take the tray down with it
            log.exception("the tray menu failed")
        self._tell(None)
        if chosen is not None:
            self.choose(chosen)

    def _tell(self, layout: dict[str, Any] | None) -> None:
        if self.on_layout is not None:
            try:
                self.on_layout(layout)
            except Exception:
                log.debug("the menu layout hook failed", exc_info=True)


class _MenuWindow:
    """One open menu: its window, grabs and event loop (on its own X connection)."""

    def __init__(self, menu: PopupMenu, x: int, y: int) -> None:
        self.menu = menu
        self.X = importlib.import_module("Xlib.X")
        self.XK = importlib.import_module("Xlib.XK")
        self.d = importlib.import_module("Xlib.display").Display(menu.display_name)
        self.rows = menu.rows()
        self.highlight: int | None = None
        self.pressed = False
        img = render_menu(self.rows)
        screen = self.d.screen()
        w, h = img.size
        # At the pointer, kept on screen: below it for a tray at the top, above for the bottom.
        x = max(0, min(x, screen.width_in_pixels - w))
        y = y + 2 if y + h < screen.height_in_pixels else max(0, y - h - 2)
        X = self.X
        self.win = screen.root.create_window(
            x, y, w, h, 0, screen.root_depth,
            X.InputOutput, X.CopyFromParent,
            background_pixel=screen.white_pixel,
            override_redirect=True,
            event_mask=X.ExposureMask | X.ButtonPressMask | X.ButtonReleaseMask
            | X.PointerMotionMask | X.KeyPressMask | X.StructureNotifyMask,
        )  # fmt: skip
        self.win.set_wm_name(WINDOW_NAME)
        self.win.set_wm_class("recalld-menu", "recalld")
        self.gc = self.win.create_gc()
        self.win.map()
        self.win.raise_window()

    def loop(self) -> str | None:
        """Show the menu until an item is chosen (its action) or it is dismissed (None)."""
        try:
            if not self._grab():
                log.warning("the tray menu could not grab the pointer; it stays open until clicked")
            self.draw()
            while not self.menu._close.is_set():
                if self.menu._dirty.is_set():
                    self.menu._dirty.clear()
                    self.rows = self.menu.rows()
                    self.draw()
                if not self.d.pending_events():
                    select.select([self.d.fileno()], [], [], 0.2)
                    continue
                done, action = self.handle(self.d.next_event())
                if done:
                    return action
            return None
        finally:
            self.menu._ending.set()
            self.d.ungrab_pointer(self.X.CurrentTime)
            self.d.ungrab_keyboard(self.X.CurrentTime)
            self.win.destroy()
            self.d.close()

    def _grab(self) -> bool:
        X = self.X
        mask = X.ButtonPressMask | X.ButtonReleaseMask | X.PointerMotionMask
        deadline = time.monotonic() + GRAB_TRIES_S
        while True:
            pointer = self.win.grab_pointer(
                False, mask, X.GrabModeAsync, X.GrabModeAsync, X.NONE, X.NONE, X.CurrentTime
            )
            if pointer == X.GrabSuccess:
                self.win.grab_keyboard(False, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime)
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def draw(self) -> None:
        img = render_menu(self.rows, self.highlight)
        geo = self.win.get_geometry()
        if (geo.width, geo.height) != img.size:
            self.win.configure(width=img.size[0], height=img.size[1])
        self.win.put_pil_image(self.gc, 0, 0, img)
        self.d.flush()
        at = self.win.translate_coords(self.d.screen().root, 0, 0)
        rows = [
            {"label": r.label, "action": r.action, "kind": r.kind, "enabled": r.enabled,
             "top": top, "bottom": bottom}
            for r, (top, bottom) in zip(self.rows, row_boxes(self.rows), strict=True)
        ]  # fmt: skip
        x, y = -at.x, -at.y  # translate_coords gives the root's origin in the window
        self.menu._tell({"x": x, "y": y, "width": img.size[0], "height": img.size[1],
                         "rows": rows, "highlight": self.highlight})  # fmt: skip

    def handle(self, ev: Any) -> tuple[bool, str | None]:
        """(done, action) after one X event."""
        X = self.X
        if ev.type == X.Expose:
            self.draw()
        elif ev.type == X.DestroyNotify:
            return True, None
        elif ev.type == X.MotionNotify:
            self._hover(self._row(ev))
        elif ev.type == X.ButtonPress:
            if self._row(ev) is None and not self._inside(ev):
                return True, None  # a click outside closes the menu
            self.pressed = True
        elif ev.type == X.ButtonRelease and self.pressed:
            return self._activate(self._row(ev))
        elif ev.type == X.KeyPress:
            return self._key(self.d.keycode_to_keysym(ev.detail, 0))
        return False, None

    def _key(self, sym: int) -> tuple[bool, str | None]:
        XK = self.XK
        if sym == XK.XK_Escape:
            return True, None
        if sym in (XK.XK_Return, XK.XK_KP_Enter, XK.XK_space):
            return self._activate(self.highlight)
        if sym in (XK.XK_Down, XK.XK_Up):
            usable = [i for i, r in enumerate(self.rows) if r.kind == "item" and r.enabled]
            if usable:
                step = 1 if sym == XK.XK_Down else -1
                if self.highlight in usable:
                    at = (usable.index(self.highlight) + step) % len(usable)
                else:
                    at = 0 if step > 0 else -1
                self._hover(usable[at])
        return False, None

    def _activate(self, index: int | None) -> tuple[bool, str | None]:
        if index is None:
            return False, None
        row = self.rows[index]
        if row.kind != "item" or not row.enabled:
            return False, None  # headers and greyed items do nothing; the menu stays
        return True, row.action

    def _hover(self, index: int | None) -> None:
        if index != self.highlight:
            self.highlight = index
            self.draw()

    def _inside(self, ev: Any) -> bool:
        geo = self.win.get_geometry()
        return bool(0 <= ev.event_x < geo.width and 0 <= ev.event_y < geo.height)

    def _row(self, ev: Any) -> int | None:
        return row_at(self.rows, ev.event_y) if self._inside(ev) else None
