"""``recalld tray``: a tray icon that shows the daemon's state; a client like any other.

The tray runs in its own process (pystray wants the main thread; the daemon stays headless).
What it shows is decided without a display (:mod:`recalld.surfaces.tray_view`); the watch loop
and the menu actions live in :mod:`recalld.surfaces.tray_app`. This module picks the backend and
runs it:

- AppIndicator / StatusNotifier (pystray's ``appindicator`` backend), or a GTK status icon
  (``gtk``), where PyGObject and the typelibs are installed: the desktop draws the menu.
- Otherwise on X11 (``xorg``): pystray's X backend with recalld's own popup menu
  (:mod:`recalld.surfaces.tray_xorg`, :mod:`recalld.surfaces.tray_menu_x11`), opened by a left
  or right click.
- macOS and Windows: pystray's own backends, with native menus.

``PYSTRAY_BACKEND`` (pystray's own variable) forces one. Ctrl-C exits with 130, SIGTERM with 0;
both remove the icon first. pystray and Pillow are optional (``recalld[tray]``) and imported
only here, at run time.
"""

from __future__ import annotations

import importlib.util
import logging
import signal
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.surfaces import exit_codes
from recalld.surfaces.tray_app import STATE_FILE_ENV, TrayApp, open_folder
from recalld.surfaces.tray_icons import draw_icon
from recalld.surfaces.tray_view import MenuEntry, View, header_lines, menu_entries, view_for

__all__ = [
    "MenuEntry",
    "TrayApp",
    "View",
    "backend_name",
    "build_menu",
    "header_lines",
    "main",
    "menu_entries",
    "open_folder",
    "prefer_desktop_menu",
    "system_gi_dir",
    "view_for",
]

log = logging.getLogger(__name__)


def backend_name(icon_cls: Any) -> str:
    """The pystray backend an ``Icon`` class belongs to (``xorg``, ``appindicator``, ...)."""
    return str(icon_cls.__module__).rsplit(".", 1)[-1].lstrip("_")


SYSTEM_SITE_DIRS = ("/usr/lib/python3/dist-packages", "/usr/lib64/python3/site-packages")
TYPELIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu/girepository-1.0",
    "/usr/lib/aarch64-linux-gnu/girepository-1.0",
    "/usr/lib64/girepository-1.0",
    "/usr/lib/girepository-1.0",
)
INDICATORS = ("AyatanaAppIndicator3-0.1", "AppIndicator3-0.1")


def system_gi_dir(
    site_dirs: tuple[str, ...] = SYSTEM_SITE_DIRS, typelib_dirs: tuple[str, ...] = TYPELIB_DIRS
) -> Path | None:
    """The system's PyGObject folder, when this Python cannot import ``gi`` (a venv) but the
    system has it built for this very Python, with GTK 3 and an AppIndicator library."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ""
    site = next((Path(d) for d in site_dirs if (Path(d) / "gi" / f"_gi{suffix}").is_file()), None)
    typelibs = {p.stem for d in typelib_dirs if Path(d).is_dir() for p in Path(d).glob("*.typelib")}
    if site is None or "Gtk-3.0" not in typelibs or not typelibs & set(INDICATORS):
        return None
    return site


def prefer_desktop_menu() -> str | None:
    """Make AppIndicator usable where the system has it; else why recalld's own menu is used."""
    if sys.platform in ("darwin", "win32") or paths.env("PYSTRAY_BACKEND"):
        return None
    if importlib.util.find_spec("gi") is not None:
        return None
    site = system_gi_dir()
    if site is not None:
        # Last on the path: this venv's own packages still win over the system's.
        sys.path.append(str(site))
        return None
    return (
        "no PyGObject with GTK 3 and AppIndicator (python3-gi, gir1.2-gtk-3.0, "
        "gir1.2-ayatanaappindicator3-0.1), so recalld's own X11 menu is used: "
        "left or right click on the icon"
    )


def build_menu(app: TrayApp, icon_quit: Callable[[], None]) -> Any:
    """The pystray menu (desktop backends): header lines, then the actions, rebuilt per update."""
    import pystray

    def act(action: str) -> Callable[[], None]:
        return icon_quit if action == "quit" else (lambda: app.run_action(action))

    def items() -> Any:
        view = app.view
        for line in header_lines(view):
            yield pystray.MenuItem(line, None, enabled=False)
        yield pystray.Menu.SEPARATOR
        for entry in menu_entries(view):
            if entry.action == "quit":
                yield pystray.Menu.SEPARATOR
            yield pystray.MenuItem(
                entry.label,
                act(entry.action),
                default=entry.default,
                enabled=entry.enabled,
                checked=None if entry.checked is None else (lambda _i, c=entry.checked: c),
            )

    return pystray.Menu(items)


def _wait_for_backend(icon: Any, xorg: bool) -> None:
    # pystray's X11 backend marks itself ready just before it records its loop thread, and a
    # property set from another thread in that gap fails; give it a moment to record it.
    deadline = time.monotonic() + 2.0
    while xorg and not hasattr(icon, "_thread") and time.monotonic() < deadline:
        time.sleep(0.01)


def _no_display(exc: BaseException) -> int:
    print(
        f"recalld tray: cannot create a tray icon ({type(exc).__name__}: {exc}); it needs a "
        "graphical session (on X11: DISPLAY set and a system tray running)",
        file=sys.stderr,
    )
    return 1


def _import_pystray() -> Any:
    """pystray, or an exit code when it is missing or there is no display."""
    try:
        import PIL.Image  # noqa: F401
        import pystray
    except ImportError as exc:
        print(
            f"recalld tray needs pystray and Pillow ({exc}): install recalld[tray] "
            "(pip install 'recalld[tray]')",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # noqa: BLE001 - pystray's X backend connects on import
        return _no_display(exc)
    return pystray


def main() -> int:
    """Entry point of ``recalld tray``: exit 0 (Quit, SIGTERM), 130 (Ctrl-C), 1 (no display)."""
    note = prefer_desktop_menu()
    pystray = _import_pystray()
    if isinstance(pystray, int):
        return pystray
    from recalld.surfaces.tray_xorg import icon_class

    backend = backend_name(pystray.Icon)
    xorg = backend == "xorg"
    hook = paths.env(STATE_FILE_ENV)
    shown: dict[str, Any] = {}
    app = TrayApp(state_file=Path(hook) if hook else None, facts={"backend": backend})

    app.display = _displayer(shown, xorg)
    run = _TrayRun(app, shown, xorg)
    try:
        icon = icon_class(pystray.Icon)(
            "recalld", draw_icon("offline"), app.view.title, menu=build_menu(app, run.quit)
        )
    except Exception as exc:  # noqa: BLE001 - e.g. Xlib DisplayNameError; pystray has no error tree
        return _no_display(exc)
    shown["icon"] = icon
    if xorg:
        shown["popup"] = _x11_popup(icon, app, run.quit)
    why = f" ({note})" if xorg and note else ""
    print(f"recalld tray: {backend} backend{why}", file=sys.stderr)
    return run.run(icon)


class _TrayRun:
    """One run of the tray: starting the app once the icon shows, and quitting once."""

    def __init__(self, app: TrayApp, shown: dict[str, Any], xorg: bool) -> None:
        self.app = app
        self.shown = shown  # the icon, its popup, and whether the icon's loop runs
        self.xorg = xorg
        self.exit_code = exit_codes.OK
        self._quitting, self._stopping = threading.Lock(), threading.Lock()

    def stop_icon(self) -> None:
        """Stop the icon's loop."""
        if self._stopping.acquire(blocking=False):  # once: a second stop would wait on a dead loop
            self.shown["icon"].stop()

    def quit(self, code: int = exit_codes.OK) -> None:
        """Quit with ``code`` (the menu's Quit, a signal); safe from any thread."""
        if not self._quitting.acquire(blocking=False):
            return  # a second Ctrl-C while the icon is going away
        self.exit_code = code
        self.app.stop()
        if self.shown.get("popup") is not None:
            self.shown["popup"].close()
        if self.shown.get("running"):
            self.stop_icon()  # else setup stops it: the X loop is not there to ask yet

    def setup(self, icon: Any) -> None:
        """Run by pystray once its loop is up: show the icon and start following the daemon."""
        _wait_for_backend(icon, self.xorg)
        self.shown["running"] = True
        if self._quitting.locked():  # a signal came during the start
            self.stop_icon()
            return
        icon.visible = True
        self.app.start()

    def run(self, icon: Any) -> int:
        """Run the icon until it is quit; the exit code."""
        _on_signals(lambda code: threading.Thread(target=self.quit, args=(code,)).start())
        try:
            icon.run(self.setup)
        except KeyboardInterrupt:  # before the handlers were in place, or a backend re-raised it
            self.exit_code = exit_codes.INTERRUPTED
        finally:
            self.app.stop()
        return self.exit_code


def _displayer(shown: dict[str, Any], xorg: bool) -> Callable[[View], None]:
    """What shows a new view: the icon's image, its title, the menu."""

    def display(view: View) -> None:
        icon = shown.get("icon")
        if icon is None or not shown.get("running"):
            return
        if shown.get("key") != view.icon_key():
            icon.icon = draw_icon(view.state, view.progress)
            shown["key"] = view.icon_key()
        title = view.title
        if xorg:  # X11 window names are Latin-1 (that backend shows the title as WM_NAME)
            title = title.encode("latin-1", "replace").decode("latin-1")
        icon.title = title
        if shown.get("popup") is not None:
            shown["popup"].refresh()
        else:
            icon.update_menu()

    return display


def _x11_popup(icon: Any, app: TrayApp, quit_: Callable[[], None]) -> Any:
    """recalld's own menu, attached to pystray's X11 icon."""
    from recalld.surfaces.tray_menu_x11 import PopupMenu, menu_rows

    def choose(action: str) -> None:
        quit_() if action == "quit" else app.run_action(action)

    popup = PopupMenu(
        icon._display.get_display_name(),
        lambda: menu_rows(app.view),
        choose,
        on_layout=(lambda layout: app.set_fact("menu", layout)) if app.state_file else None,
    )
    icon.popup = popup
    return popup


def _on_signals(stop: Callable[[int], None]) -> None:
    """Ctrl-C and SIGTERM remove the icon and end the loop (no traceback)."""

    def handler(signum: int, _frame: Any) -> None:
        # Only a flag-like hand-off here: the X loop may hold its connection's lock right now.
        stop(exit_codes.INTERRUPTED if signum == signal.SIGINT else exit_codes.OK)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
