"""The tray without a display: the watch loop, the menu actions and the debug hook.

The tray subscribes to the daemon's ``watch`` stream in a background thread, reconnecting with
backoff while the daemon is offline or restarting; each event becomes a :class:`View` handed to
the backend's ``display`` callback. Menu actions run in threads of their own, so a menu never
waits on the daemon.

Debug hook: with ``RECALLD_TRAY_STATE_FILE=/path/state.json`` the tray writes its current view
as JSON to that file on every change (state, title, progress, paused, online, the states shown
so far, the backend) and saves the icon it shows as ``icon-<state>.png`` beside it. Tests use it
to follow the tray without reading pixels.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.surfaces.tray_icons import draw_icon
from recalld.surfaces.tray_view import View, view_for

log = logging.getLogger(__name__)

STATE_FILE_ENV = "RECALLD_TRAY_STATE_FILE"
# A command that shows a folder (the folder is appended as its last argument), for desktops
# where xdg-open picks the wrong program, and for tests.
OPENER_ENV = "RECALLD_TRAY_OPENER"
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 5.0


def open_folder(folder: Path) -> None:
    """Show ``folder`` in the file manager (without waiting for it).

    ``$RECALLD_TRAY_OPENER`` names the command to use (split like a shell would, the folder
    appended); otherwise the platform's own: ``open`` (macOS), ``xdg-open``, or the shell (Windows).
    """
    folder.mkdir(parents=True, exist_ok=True)
    custom = paths.env(OPENER_ENV)
    if custom:
        command = [*shlex.split(custom), str(folder)]
    elif sys.platform == "win32":
        os.startfile(folder)  # type: ignore[attr-defined,unused-ignore]
        return
    else:
        command = ["open" if sys.platform == "darwin" else "xdg-open", str(folder)]
    try:
        subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        hint = f"; set {OPENER_ENV} to a command that opens folders" if not custom else ""
        raise OSError(f"cannot run {command[0]!r} to open {folder}{hint}") from exc


def start_daemon() -> None:
    """``recalld start`` (through the service when installed); OSError saying why it failed."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "recalld", "start"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise OSError("recalld start did not finish within 180 s") from exc
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise OSError(lines[-1] if lines else f"recalld start exited {done.returncode}")


@dataclass
class TrayApp:
    """The tray without pystray: the watch loop, the menu actions and the debug hook.

    ``display`` is called with each new :class:`View` (the pystray adapter updates the icon).
    """

    socket_path: Path = field(default_factory=paths.socket_path)
    display: Callable[[View], None] = lambda view: None
    state_file: Path | None = None
    opener: Callable[[Path], None] = open_folder
    starter: Callable[[], None] = start_daemon
    backoff: tuple[float, float] = (BACKOFF_MIN_S, BACKOFF_MAX_S)
    facts: dict[str, Any] = field(default_factory=dict)  # e.g. the backend, for the state file

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
        self.client = Client(self.socket_path, connect_timeout=2.0, timeout=30.0, check_home=True)

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
                **self.facts,
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

    def set_fact(self, key: str, value: Any) -> None:
        """Record a fact for the state file (e.g. where the open menu is) and rewrite it."""
        with self._lock:
            self.facts[key] = value
            if self.state_file is not None:
                self._write_state(self.view)

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
                watcher = Client(
                    self.socket_path, connect_timeout=2.0, reconnect=False, check_home=True
                )
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
            elif action == "start":
                self.starter()
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
