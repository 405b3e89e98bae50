"""``recalld tray``: a tray icon that shows the daemon's state; a client like any other.

The tray runs in its own process (pystray wants the main thread; the daemon stays headless) and
subscribes to the daemon's ``watch`` stream in a background thread, reconnecting with backoff
while the daemon is offline or restarting. Everything that decides what to show is pure:

    event (a watch status map, or None when offline) --view_for--> View(state, title, progress)
    View --tray_icons.draw_icon--> image;   View --menu_entries--> menu labels and states

so it is tested without a display. pystray and Pillow are optional (``recalld[tray]``) and
imported only here, at run time.

Debug hook: with ``RECALLD_TRAY_STATE_FILE=/path/state.json`` the tray writes its current view
as JSON to that file on every change (state, title, progress, paused, online, the states shown
so far) and saves the icon it shows as ``icon-<state>.png`` beside it. Tests use it to follow the
tray without reading pixels.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.tray_icons import draw_icon

log = logging.getLogger(__name__)

STATE_FILE_ENV = "RECALLD_TRAY_STATE_FILE"
# Windows truncates tooltips at 127 characters; elsewhere long titles are only unwieldy.
TITLE_LIMIT = 127 if sys.platform == "win32" else 400
LINE_LIMIT = 72
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 5.0


@dataclass(frozen=True)
class View:
    """What the tray shows: a state (one icon each), a tooltip title, ring progress."""

    state: str  # idle | syncing | paused | degraded | error | offline
    title: str
    progress: float | None = None  # 0..1 while syncing, when the total is known
    paused: bool = False
    online: bool = False

    def icon_key(self) -> tuple[str, int | None]:
        """What the icon image depends on (progress in 2 % steps: no redraw per file)."""
        return self.state, None if self.progress is None else round(self.progress * 50)


def view_for(
    event: Mapping[str, Any] | None,
    *,
    offline_reason: str | None = None,
    note: str | None = None,
    now: float | None = None,
    limit: int = TITLE_LIMIT,
) -> View:
    """The view of one ``watch`` event (None: no daemon answers)."""
    if event is None:
        lines = ["recalld: offline", "the daemon is not running"]
        if offline_reason and offline_reason.startswith("too many connections"):
            lines = ["recalld: busy", "the daemon runs but serves too many connections"]
        if offline_reason:
            lines.append(_clip(offline_reason))
        lines.append("retrying in the background")
        return View("offline", _title(lines, note, limit))

    raw_state = str(event.get("state") or "idle")
    paused = bool(event.get("paused")) or raw_state == "paused"
    degraded = event.get("degraded")
    error = event.get("last_error")
    if error and str(error).startswith("reranker"):
        # A reranker that is down degrades ranking; it is not a failure of the index.
        degraded, error = degraded or str(error), None
    progress = None
    if raw_state in ("syncing", "reindexing"):
        state = "syncing"
        p = event.get("progress") or {}
        total, done = int(p.get("files_total") or 0), int(p.get("files_done") or 0)
        head = f"recalld: {raw_state}"
        if total > 0:
            progress = min(done / total, 1.0)
            head += f" {done}/{total} files ({100 * progress:.0f} %)"
        vp, vt = int(p.get("vectors_pending") or 0), int(p.get("vectors_total") or 0)
        if vp and vt and done >= total:  # keyword first: every file in, vectors behind
            progress = (vt - vp) / vt
            head += f", vectors {vt - vp:,}/{vt:,} ({100 * progress:.0f} %)"
    elif error:
        state, head = "error", "recalld: error"
    elif degraded:
        state, head = "degraded", "recalld: degraded (keyword-only)"
    elif event.get("watch_warnings"):  # inotify limits: changes are found by periodic scans
        state, head = "degraded", "recalld: not watching every folder (scanning)"
    elif paused:
        state, head = "paused", "recalld: paused, not watching for changes"
    else:
        state, head = "idle", "recalld: idle"

    lines = [head, f"provider: {event.get('provider') or 'none'}"]
    if degraded:
        lines.append(_clip(f"degraded: {degraded}"))
    if error:
        lines.append(_clip(f"error: {error}"))
    lines.extend(_clip(f"warning: {w}") for w in event.get("watch_warnings") or [])
    files, chunks = event.get("files"), event.get("chunks")
    if files is not None or chunks is not None:
        lines.append(f"{_count(files, 'file')}, {_count(chunks, 'chunk')}")
    lines.append(f"last sync: {_when(event.get('last_sync'), now)}")
    if paused and state != "paused":
        lines.append("watching paused")
    return View(state, _title(lines, note, limit), progress, paused, online=True)


def _title(lines: list[str], note: str | None, limit: int) -> str:
    if note:
        lines = [*lines, _clip(note)]
    return _clip("\n".join(lines), limit)


def _clip(text: str, limit: int = LINE_LIMIT) -> str:
    text = " ".join(text.split()) if "\n" not in text else text
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _count(n: Any, noun: str) -> str:
    if not isinstance(n, int):
        return f"? {noun}s"
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _when(ts: Any, now: float | None) -> str:
    if not isinstance(ts, int | float) or ts <= 0:
        return "never"
    now = time.time() if now is None else now
    then, today = time.localtime(ts), time.localtime(now)
    if then[:3] == today[:3]:
        return time.strftime("%H:%M:%S", then)
    return time.strftime("%Y-%m-%d %H:%M", then)


@dataclass(frozen=True)
class MenuEntry:
    """One menu line: label, whether it can be used, whether it shows a check mark."""

    action: str
    label: str
    enabled: bool = True
    checked: bool | None = None  # None: not a check item
    default: bool = False  # what a left click does where the backend has no menu (X11)


def menu_entries(view: View) -> list[MenuEntry]:
    """The menu for ``view``, top to bottom (a separator goes before Quit)."""
    live = view.online
    return [
        MenuEntry("sync", "Sync now", enabled=live, default=True),
        MenuEntry("reindex", "Reindex", enabled=live),
        MenuEntry("pause", "Pause watching", enabled=live, checked=view.paused),
        MenuEntry("open", "Open memory folder"),
        MenuEntry("quit", "Quit"),
    ]


# the app ----------------------------------------------------------------------------------------


def open_folder(folder: Path) -> None:
    """Show ``folder`` in the platform's file manager (without waiting for it)."""
    folder.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32":
        os.startfile(folder)  # type: ignore[attr-defined,unused-ignore]
        return
    opener = "open" if sys.platform == "darwin" else "xdg-open"
    subprocess.Popen(
        [opener, str(folder)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@dataclass
class TrayApp:
    """The tray without pystray: the watch loop, the menu actions and the debug hook.

    ``display`` is called with each new :class:`View` (the pystray adapter updates the icon).
    """

    socket_path: Path = field(default_factory=paths.socket_path)
    display: Callable[[View], None] = lambda view: None
    state_file: Path | None = None
    opener: Callable[[Path], None] = open_folder
    backoff: tuple[float, float] = (BACKOFF_MIN_S, BACKOFF_MAX_S)

    def __post_init__(self) -> None:
        from recalld_client import Client

        self.view = view_for(None)
        self.event: dict[str, Any] | None = None
        self.offline_reason: str | None = None
        self.note: str | None = None
        self.seen: list[str] = []
        self._icons_saved: dict[str, tuple[str, int | None]] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        # Requests (menu actions) use their own connection; watch holds another one open.
        self.client = Client(self.socket_path, connect_timeout=2.0, timeout=30.0)

    # state --------------------------------------------------------------------------------------

    def apply(self, event: dict[str, Any] | None, reason: str | None = None) -> View:
        """Take a new event (None: offline) and show the view it yields if it changed."""
        with self._lock:
            self.event = event
            if event is None:
                self.offline_reason = reason
            return self._refresh()

    def _refresh(self) -> View:
        view = view_for(self.event, offline_reason=self.offline_reason, note=self.note)
        if view == self.view and self.seen:
            return view
        self.view = view
        if not self.seen or self.seen[-1] != view.state:
            self.seen.append(view.state)
        try:
            self.display(view)
        except Exception:  # a display glitch must not stop the watch loop
            log.exception("could not update the tray icon")
        if self.state_file is not None:
            self._write_state(view)
        return view

    def _write_state(self, view: View) -> None:
        assert self.state_file is not None
        try:
            folder = self.state_file.parent
            folder.mkdir(parents=True, exist_ok=True)
            icons = {}
            if self._icons_saved.get(view.state) != view.icon_key():
                png = folder / f"icon-{view.state}.png"
                draw_icon(view.state, view.progress).save(png)
                self._icons_saved[view.state] = view.icon_key()
            for state in self._icons_saved:
                icons[state] = str(folder / f"icon-{state}.png")
            data = {
                **asdict(view),
                "seen": self.seen,
                "icons": icons,
                "pid": os.getpid(),
                "time": time.time(),
            }
            tmp = self.state_file.with_name(self.state_file.name + ".tmp")
            tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            tmp.replace(self.state_file)  # readers never see half a file
        except OSError:
            log.warning("could not write the tray state file %s", self.state_file, exc_info=True)

    # the watch loop -----------------------------------------------------------------------------

    def start(self) -> threading.Thread:
        """Show the current view and follow the daemon in a background thread."""
        with self._lock:
            self._refresh()
        thread = threading.Thread(target=self.watch_forever, name="recalld-tray-watch", daemon=True)
        thread.start()
        return thread

    def watch_forever(self) -> None:
        """Follow ``watch`` events; while the daemon is away show offline and retry with backoff."""
        from recalld_client import Client, RecalldClientError

        delay = self.backoff[0]
        while not self._stop.is_set():
            reason = "the daemon closed the connection"
            try:
                watcher = Client(self.socket_path, connect_timeout=2.0, reconnect=False)
                for event in watcher.watch():
                    delay = self.backoff[0]  # connected: the next outage starts from the minimum
                    self.apply(event)
                    if self._stop.is_set():
                        return
            except RecalldClientError as exc:
                reason = str(exc) or type(exc).__name__
            except Exception as exc:  # the tray must outlive any one bad event
                log.exception("the watch loop failed")
                reason = f"{type(exc).__name__}: {exc}"
            self.apply(None, reason)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, self.backoff[1])

    def stop(self) -> None:
        """End the watch loop (its thread ends at the next event or retry)."""
        self._stop.set()
        self.client.close()

    # menu actions -------------------------------------------------------------------------------

    def run_action(self, action: str) -> None:
        """Run a menu action in a thread of its own (the menu must never wait on the daemon)."""
        threading.Thread(target=self._action, args=(action,), daemon=True).start()

    def _action(self, action: str) -> None:
        from recalld_client import RecalldClientError

        try:
            if action == "sync":
                self.client.sync()
            elif action == "reindex":
                self.client.reindex()
            elif action == "pause":
                self.client.call("pause", {"paused": not self.view.paused})
            elif action == "open":
                self.opener(self.memory_folder())
            else:
                raise ValueError(f"unknown tray action {action!r}")
            note = None
        except (RecalldClientError, OSError, ValueError) as exc:
            log.warning("%s failed: %s", action, exc)
            note = f"{action} failed: {exc}"
        with self._lock:
            self.note = note
            self._refresh()

    def memory_folder(self) -> Path:
        """The first memory root the daemon reports (the default one when it is offline)."""
        from recalld_client import RecalldClientError

        try:
            roots = self.client.status().get("memory_roots") or []
        except RecalldClientError:
            roots = []
        return Path(roots[0]) if roots else paths.default_memory_dir()


# pystray ----------------------------------------------------------------------------------------


def build_menu(app: TrayApp, icon_quit: Callable[[], None]) -> Any:
    """The pystray menu; labels and states come from :func:`menu_entries` each time it opens."""
    import pystray

    def item(index: int) -> Any:
        entry = menu_entries(app.view)[index]

        def activate() -> None:
            if entry.action == "quit":
                icon_quit()
            else:
                app.run_action(entry.action)

        return pystray.MenuItem(
            entry.label,
            activate,
            default=entry.default,
            enabled=lambda _item: menu_entries(app.view)[index].enabled,
            checked=None
            if entry.checked is None
            else (lambda _item: bool(menu_entries(app.view)[index].checked)),
        )

    items = [item(i) for i in range(len(menu_entries(app.view)))]
    return pystray.Menu(*items[:-1], pystray.Menu.SEPARATOR, items[-1])


def icon_class(base: Any) -> Any:
    """pystray's ``Icon`` class, with fixes when it is the X11 backend (pystray 0.19.5).

    - It handles ButtonPress but never selects it on its window, so clicks never arrive
      (pystray issue #151): selecting it makes a left click run the default item, Sync now,
      the only action that backend offers since it has no menu.
    - It asks the tray to dock the icon again on every image change, and trays such as
      trayer then now and then shrink it to one pixel wide: once docked, the image is
      repainted in place instead.
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
    x = importlib.import_module("Xlib.X")
    xdisplay = importlib.import_module("Xlib.display")
    xevent = importlib.import_module("Xlib.protocol.event")
    side_lock = threading.Lock()

    class XorgIcon(base):  # type: ignore[misc]  # pystray is untyped
        _side_display: Any = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            manager = self._display.intern_atom("MANAGER")
            self._display.screen().root.change_attributes(event_mask=x.StructureNotifyMask)
            on_message = self._message_handlers[x.ClientMessage]

            def on_client_message(event: Any) -> None:
                if event.client_type == manager and event.data[1][1] == self._net_system_tray_sx:
                    self._redock()
                else:
                    on_message(event)

            self._message_handlers[x.ClientMessage] = on_client_message

        def _redock(self) -> None:
            self._systray_manager = None
            try:
                self._assert_docked()
            except AssertionError:
                return
            self._icon_data = None
            self._draw()
            self._display.flush()

        def _send_message(
            self, window: Any, client_type: int, l0: int = 0, l1: int = 0, l2: int = 0, l3: int = 0
        ) -> None:
            if threading.current_thread() is getattr(self, "_thread", None):
                super()._send_message(window, client_type, l0, l1, l2, l3)
                return
            with side_lock:
                if self._side_display is None:
                    self._side_display = xdisplay.Display(self._display.get_display_name())
                side = self._side_display
                # An empty event mask delivers it to the window's creator: the loop connection.
                side.send_event(
                    side.create_resource_object("window", window.id),
                    xevent.ClientMessage(
                        window=window.id,
                        client_type=client_type,
                        data=(32, (x.CurrentTime, l0, l1, l2, l3)),
                    ),
                    event_mask=x.NoEventMask,
                )
                side.flush()

        def _create_window(self) -> Any:
            window = super()._create_window()
            window.change_attributes(
                event_mask=x.ExposureMask | x.StructureNotifyMask | x.ButtonPressMask
            )
            return window

        def _update_icon(self) -> None:
            if getattr(self, "_systray_manager", None) is None:
                super()._update_icon()  # not docked yet: docking is what is needed
                return
            self._icon_data = None
            self._draw()
            self._icon_valid = True
            self._display.flush()

        def _update_title(self) -> None:
            super()._update_title()
            self._display.flush()

    return XorgIcon


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


def main() -> int:
    """Entry point of ``recalld tray``."""
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

    hook = paths.env(STATE_FILE_ENV)
    shown: dict[str, Any] = {}
    xorg = pystray.Icon.__module__.endswith("_xorg")

    def display(view: View) -> None:
        icon = shown.get("icon")
        if icon is None:
            return
        if shown.get("key") != view.icon_key():
            icon.icon = draw_icon(view.state, view.progress)
            shown["key"] = view.icon_key()
        title = view.title
        if xorg:  # X11 window names are Latin-1 (that backend shows the title as WM_NAME)
            title = title.encode("latin-1", "replace").decode("latin-1")
        icon.title = title
        icon.update_menu()

    app = TrayApp(display=display, state_file=Path(hook) if hook else None)

    def quit_() -> None:
        app.stop()
        shown["icon"].stop()

    try:
        icon = icon_class(pystray.Icon)(
            "recalld", draw_icon("offline"), app.view.title, menu=build_menu(app, quit_)
        )
    except Exception as exc:  # noqa: BLE001 - e.g. Xlib DisplayNameError; pystray has no error tree
        return _no_display(exc)

    def setup(icon: Any) -> None:
        _wait_for_backend(icon, xorg)
        shown["icon"] = icon
        icon.visible = True
        app.start()

    try:
        icon.run(setup)
    except KeyboardInterrupt:
        pass
    finally:
        app.stop()
    return 0
