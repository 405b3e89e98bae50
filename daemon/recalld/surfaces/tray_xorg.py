"""Fixes and additions to pystray's X11 backend (pystray 0.19.5): recalld's tray on plain X11.

pystray's X backend has no menu and shows the title only as the icon window's name, which X11
trays do not display; this module adds recalld's own popup menu
(:mod:`recalld.surfaces.tray_menu_x11`) on a left or right click, paints the icon over the tray's
own background (such trays have no alpha channel: transparent pixels were left to whatever the
window held), and fixes docking and cross-thread requests (see :func:`icon_class`).
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

# Where the tray's background cannot be read (a tray of another depth): a neutral light grey.
FALLBACK_BACKGROUND = (214, 214, 214)

# The mixins below override methods of pystray's (untyped) X11 Icon, which they are combined
# with in icon_class: to the type checker they derive from Any.
_IconBase: Any = object


def icon_class(base: Any) -> Any:
    """pystray's ``Icon`` class, with fixes when it is the X11 backend (pystray 0.19.5).

    - It has no menu, and handles ButtonPress without selecting it on its window, so clicks
      never arrive (pystray issue #151): a left or right click (on release, when no grab is
      held) now opens ``popup`` (a :class:`~recalld.surfaces.tray_menu_x11.PopupMenu` set on the
      icon after it is made); without one a left click runs the default item, Sync now.
    - It pastes the RGBA icon onto black, so transparent pixels show as a black square (or
      noise). The window now takes its parent's background (ParentRelative) and the icon is
      blended onto what the tray paints there.
    - It asks the tray to dock the icon again on every show and image change, and trays
      such as trayer then now and then shrink it to one pixel wide, or leave it unmapped:
      it now asks once per tray, and repaints the image in place.
    - It docks only when shown, so a tray (panel) that starts after it never shows it: it
      now also docks when a tray announces itself (a MANAGER message on the root window).
    - It sends the requests of other threads (set the title, the image, show) to its X loop
      thread over the loop's own connection, and python-xlib can leave such a request
      queued while the loop blocks reading that connection: the tray hangs or shows a stale
      title. Those messages go over a second connection instead, and the loop flushes what
      it changes at once.

    The overridden drawing methods run where pystray runs the originals: in its X loop thread.
    """
    if not base.__module__.endswith("_xorg"):
        return base
    return type("XorgIcon", (_Docking, _SideMessages, _Painting, base), {})


def _xlib(name: str) -> Any:
    """A python-xlib module, imported only when the X11 backend is in use."""
    return importlib.import_module(f"Xlib.{name}")


def _x() -> Any:
    """Xlib's constants (``Xlib.X``)."""
    return _xlib("X")


# Messages of other threads go over one second connection, made on first use.
_SIDE_LOCK = threading.Lock()


class _Docking(_IconBase):  # type: ignore[misc]  # pystray is untyped
    """Clicks open the popup; the icon docks once per tray, and again when a new tray starts."""

    popup: Any = None
    _systray_manager: Any = None  # set by pystray: the tray window that docked us

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        x = _x()
        manager = self._display.intern_atom("MANAGER")
        self._display.screen().root.change_attributes(event_mask=x.StructureNotifyMask)
        on_message = self._message_handlers[x.ClientMessage]

        def on_client_message(event: Any) -> None:
            if event.client_type == manager and event.data[1][1] == self._net_system_tray_sx:
                self._redock()
            else:
                on_message(event)

        self._message_handlers[x.ClientMessage] = on_client_message
        self._message_handlers[x.ButtonPress] = lambda event: None
        self._message_handlers[x.ButtonRelease] = self._on_button_release

    def _on_button_release(self, event: Any) -> None:
        if self.popup is not None and event.detail in (1, 3):
            self.popup.toggle(event.root_x, event.root_y)
        elif event.detail == 1:
            self()  # no menu to show: the default action

    def _assert_docked(self) -> None:
        # One request per tray: pystray asked again on every show and image change, and
        # a second request for a docked window can leave it unmapped on the root window.
        if self._systray_manager is None:
            self._dock_window()
        assert self._systray_manager

    def _dock_quietly(self) -> bool:
        """Dock if a tray runs; else say so once (pystray logs a traceback each time)."""
        try:
            self._assert_docked()
            self._said_no_tray = False
            return True
        except AssertionError:
            if not getattr(self, "_said_no_tray", False):
                self._said_no_tray = True
                log.warning(
                    "no system tray runs on display %s: the icon appears when one starts",
                    self._display.get_display_name(),
                )
            return False

    def _show(self) -> None:
        self._dock_quietly()

    def _on_destroy_notify(self, event: Any) -> None:
        manager = self._systray_manager
        if manager is None or event.window.id != manager.id:
            return  # only the tray's own end matters (our window's is the loop's)
        self._systray_manager = None
        self._dock_quietly()  # another tray may have taken over

    def _redock(self) -> None:
        owner = self._get_systray_manager()
        docked = self._systray_manager
        if owner is not None and docked is not None and owner.id == docked.id:
            return  # the tray we asked already (it announced itself just after we asked)
        self._systray_manager = None
        if not self._dock_quietly():
            return
        self._icon_data = None
        self._draw()
        self._display.flush()


class _SideMessages(_IconBase):  # type: ignore[misc]  # pystray is untyped
    """Requests of other threads reach the X loop over a second connection, never stuck."""

    _side_display: Any = None

    def _send_message(
        self, window: Any, client_type: int, l0: int = 0, l1: int = 0, l2: int = 0, l3: int = 0
    ) -> None:
        if threading.current_thread() is getattr(self, "_thread", None):
            super()._send_message(window, client_type, l0, l1, l2, l3)
            return
        with _SIDE_LOCK:
            if self._side_display is None:
                self._side_display = _xlib("display").Display(self._display.get_display_name())
            side = self._side_display
            # An empty event mask delivers it to the window's creator: the loop connection.
            side.send_event(
                side.create_resource_object("window", window.id),
                _xlib("protocol.event").ClientMessage(
                    window=window.id,
                    client_type=client_type,
                    data=(32, (_x().CurrentTime, l0, l1, l2, l3)),
                ),
                event_mask=_x().NoEventMask,
            )
            side.flush()


class _Painting(_IconBase):  # type: ignore[misc]  # pystray is untyped
    """The window takes the tray's background and the icon is blended onto it, flushed at once."""

    _icon_data: Any  # set by pystray: the image as last painted (None: paint it anew)

    def _create_window(self) -> Any:
        window = super()._create_window()
        x = _x()
        window.change_attributes(
            event_mask=x.ExposureMask
            | x.StructureNotifyMask
            | x.ButtonPressMask
            | x.ButtonReleaseMask
        )
        return window

    def _assert_icon_data(self, width: int, height: int) -> None:
        if self._icon_data and self._icon_data.size == (width, height):
            return
        image = importlib.import_module("PIL.Image")
        icon = self._icon.convert("RGBA").resize((width, height), image.Resampling.LANCZOS)
        background = self._background(width, height).convert("RGBA")
        data = image.alpha_composite(background, icon).convert("RGB")
        data.tostring = data.tobytes  # what older python-xlib calls
        self._icon_data = data

    def _background(self, width: int, height: int) -> Any:
        """What the tray paints behind the icon, read back from the X server."""
        image = importlib.import_module("PIL.Image")
        try:
            window = self._window
            parent = window.query_tree().parent
            depth = window.get_geometry().depth
            if parent.id != self._display.screen().root.id and (
                parent.get_geometry().depth == depth == 24
            ):
                window.change_attributes(background_pixmap=_x().ParentRelative)
                window.clear_area(0, 0, width, height)
                raw = window.get_image(0, 0, width, height, _x().ZPixmap, 0xFFFFFFFF)
                if len(raw.data) == width * height * 4:
                    return image.frombytes("RGB", (width, height), raw.data, "raw", "BGRX")
        except Exception:  # noqa: BLE001 - X errors here only cost the exact background
            pass
        return image.new("RGB", (width, height), FALLBACK_BACKGROUND)

    def _update_icon(self) -> None:
        if self._systray_manager is None and not self._dock_quietly():
            return  # drawn once a tray docks it
        self._icon_data = None
        self._draw()
        self._icon_valid = True
        self._display.flush()

    def _update_title(self) -> None:
        super()._update_title()
        self._display.flush()
