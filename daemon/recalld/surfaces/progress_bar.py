"""What a person sees of a sync: a live bar on a terminal, plain lines otherwise.

Fed with ``progress`` maps (the daemon's ``status`` and ``watch`` events, or an in-process
sync's :class:`~recalld.ingest.sync_report.Progress` as a dict). Imports nothing heavy: the CLI
loads it on the client path.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

from recalld.ingest.progress_text import describe as describe
from recalld.ingest.progress_text import duration, vectors_text
from recalld.surfaces.terminal_text import visible

BAR_WIDTH = 24
TTY_EVERY_S = 0.2  # redraws on a terminal
LINE_EVERY_S = 2.0  # plain lines when the output is a file or a pipe


def bar_line(p: Mapping[str, Any], state: str) -> str:
    """The terminal bar: ``syncing [#####-----] 512/2,000 files · 480 chunks · rates · ETA``;
    once every file is searchable by keyword and vectors are still due, the bar follows them."""
    total, done = int(p.get("files_total") or 0), int(p.get("files_done") or 0)
    vectors = vectors_text(p, " · ")
    if vectors and done >= total:
        total, done = int(p["vectors_total"]), int(p["vectors_total"]) - int(p["vectors_pending"])
    filled = int(BAR_WIDTH * done / total) if total else 0
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    eta = f" · ETA {duration(p['eta_s'])}" if p.get("eta_s", 0) >= 1 else ""
    return (
        f"{state:<10} [{bar}] {p.get('files_done') or 0:,}/{p.get('files_total') or 0:,} files"
        f" · {p.get('chunks_done', 0):,} chunks · {p.get('files_per_s', 0):.1f} files/s · "
        f"{p.get('chunks_per_s', 0):.1f} chunks/s{eta}{vectors}"
    )


class ProgressBar:
    """Shows progress maps on ``out``: one redrawn line on a terminal, else a line now and
    then (when the numbers changed). Safe to feed from another thread."""

    def __init__(self, out: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.out = out or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self._lock = threading.Lock()
        self._last_at = 0.0
        self._last_text = ""
        self._width = 0
        self._closed = False
        self._latest = ""  # the newest plain line, shown at the end if it was throttled

    def update(self, p: Mapping[str, Any], state: str | None = None) -> None:
        """Show one progress map (``state``: the daemon's, else the map's phase)."""
        state = state or str(p.get("phase") or "syncing")
        if self.tty:
            self.show(bar_line(p, state), throttle=True)
        elif p.get("files_total"):  # a line per two seconds; a skipped one is shown later
            with self._lock:
                self._latest = describe(p, state)
            self.show(self._latest, throttle=True)

    def show(self, text: str, *, throttle: bool = False) -> None:
        """Show a line (redrawn in place on a terminal; elsewhere only when it changed)."""
        text = visible(text)  # it may name a file: its control characters are shown, not obeyed
        now = time.monotonic()
        with self._lock:
            every = TTY_EVERY_S if self.tty else LINE_EVERY_S
            if self._closed or (throttle and now - self._last_at < every):
                return
            if self.tty:
                self.out.write("\r" + text.ljust(self._width))
                self._width = len(text)
            else:
                if not throttle and self._latest not in ("", self._last_text, text):
                    self.out.write(self._latest + "\n")  # the progress line held back
                if text != self._last_text:
                    self.out.write(text + "\n")
                self._latest = ""
            self._last_at, self._last_text = now, text
            self.out.flush()

    def close(self, *, keep: bool = False) -> None:
        """Clear the bar (terminal; ``keep`` leaves its last line) or show the last progress
        line held back; nothing more is shown after."""
        if not self.tty and self._latest:
            self.show(self._latest)
        with self._lock:
            self._closed = True
            if self.tty and self._width:
                self.out.write("\n" if keep else "\r" + " " * self._width + "\r")
                self.out.flush()


def follow_status(
    events: Iterator[Mapping[str, Any]], out: TextIO, *, as_json: bool = False
) -> int:
    """``recalld status --watch``: the daemon's events until Ctrl-C or the daemon stops (JSON
    lines with ``as_json``); returns the exit code."""
    bar = ProgressBar(out)
    try:
        for event in events:
            if as_json:
                out.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
                out.flush()
                continue
            state, p = str(event.get("state")), event.get("progress") or {}
            if state in ("syncing", "reindexing"):
                bar.update(p, state)
            elif p.get("files_waiting"):
                bar.show(describe(p, f"{state}, files waiting"))
            else:
                last = event.get("last_sync")
                when = time.strftime("%H:%M:%S", time.localtime(last)) if last else "never"
                bar.show(
                    f"{state}: {event.get('files') or 0:,} files, {event.get('chunks') or 0:,} "
                    f"chunks, {event.get('pending') or 0:,} pending, last sync {when}"
                    f"{vectors_text(p, ', ')}"
                )
    except KeyboardInterrupt:
        pass
    finally:
        bar.close(keep=True)
    return 0


def follow(events: Iterator[Mapping[str, Any]], bar: ProgressBar, stop: threading.Event) -> None:
    """Feed ``watch`` events to ``bar`` until ``stop`` is set or the stream ends."""
    try:
        for event in events:
            if stop.is_set():
                return
            state = str(event.get("state") or "")
            progress = event.get("progress")
            if state in ("syncing", "reindexing") and isinstance(progress, Mapping):
                phase = progress.get("phase")
                bar.update(progress, str(phase) if phase == "scanning" else state)
    except Exception:  # noqa: BLE001 - the bar is a courtesy: the job's answer still comes
        return


def while_watching(
    watch: Callable[[], Iterator[Mapping[str, Any]]],
    job: Callable[[], dict[str, Any]],
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Run ``job`` (a blocking daemon call) while a bar shows the daemon's ``watch`` events."""
    bar = ProgressBar(out)
    stop = threading.Event()
    watcher = threading.Thread(
        target=follow, args=(watch(), bar, stop), name="recalld-bar", daemon=True
    )
    watcher.start()
    try:
        return job()
    finally:
        stop.set()
        bar.close()
