"""What the tray shows, decided without a display: a watch event becomes a :class:`View`.

    event (a watch status map, or None when offline) --view_for--> View(state, title, progress)
    View --tray_icons.draw_icon--> image;   View --menu_entries--> menu labels and states

Every backend (AppIndicator, GTK, recalld's own X11 menu) shows the same entries: the view's
title lines as disabled header lines, then the actions.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Windows truncates tooltips at 127 characters; elsewhere long titles are only unwieldy.
TITLE_LIMIT = 127 if sys.platform == "win32" else 400
LINE_LIMIT = 72


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
        return _offline_view(offline_reason, note, limit)
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
        head, progress = _sync_head(raw_state, event.get("progress") or {})
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
    lines = [head, *_detail_lines(event, degraded, error, now)]
    if paused and state != "paused":
        lines.append("watching paused")
    if event.get("on_demand"):  # started by `recalld mcp` or a hook: it stops when idle
        lines.append(f"started on demand by recalld {event['on_demand']}: stops when idle")
    return View(state, _title(lines, note, limit), progress, paused, online=True)


def _offline_view(offline_reason: str | None, note: str | None, limit: int) -> View:
    """No daemon answers: offline, or busy when it refused us for too many connections."""
    lines = ["recalld: offline", "the daemon is not running"]
    if offline_reason and offline_reason.startswith("too many connections"):
        lines = ["recalld: busy", "the daemon runs but serves too many connections"]
    if offline_reason:
        lines.append(_clip(offline_reason))
    lines.append("retrying in the background")
    return View("offline", _title(lines, note, limit))


def _sync_head(raw_state: str, p: Mapping[str, Any]) -> tuple[str, float | None]:
    """The first line while syncing (files, then vectors), and the progress it shows."""
    progress = None
    total, done = int(p.get("files_total") or 0), int(p.get("files_done") or 0)
    head = f"recalld: {raw_state}"
    if total > 0:
        progress = min(done / total, 1.0)
        head += f" {done}/{total} files ({100 * progress:.0f} %)"
    vp, vt = int(p.get("vectors_pending") or 0), int(p.get("vectors_total") or 0)
    if vp and vt and done >= total:  # keyword first: every file in, vectors behind
        progress = (vt - vp) / vt
        head += f", vectors {vt - vp:,}/{vt:,} ({100 * progress:.0f} %)"
    return head, progress


def _detail_lines(
    event: Mapping[str, Any], degraded: Any, error: Any, now: float | None
) -> list[str]:
    """The lines under the head: provider, what is wrong, the counts, the last sync."""
    lines = [f"provider: {event.get('provider') or 'none'}"]
    if degraded:
        lines.append(_clip(f"degraded: {degraded}"))
    if error:
        lines.append(_clip(f"error: {error}"))
    lines.extend(_clip(f"warning: {w}") for w in event.get("watch_warnings") or [])
    files, chunks = event.get("files"), event.get("chunks")
    if files is not None or chunks is not None:
        lines.append(f"{_count(files, 'file')}, {_count(chunks, 'chunk')}")
    lines.append(f"last sync: {_when(event.get('last_sync'), now)}")
    return lines


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
    """The menu's actions for ``view``, top to bottom (a separator goes before Quit)."""
    live = view.online
    # The label is what a click does, not a state with a check mark ("Pause watching" ticked
    # read as "click to pause" while watching was already paused).
    pause = "Resume watching" if view.paused else "Pause watching"
    entries = [
        MenuEntry("sync", "Sync now", enabled=live, default=live),
        MenuEntry("reindex", "Reindex", enabled=live),
        MenuEntry("pause", pause, enabled=live),
        MenuEntry("open", "Open memory folder"),
        MenuEntry("quit", "Quit"),
    ]
    if not live:  # nothing answers: the one useful action is starting it (`recalld start`)
        entries.insert(0, MenuEntry("start", "Start recalld", default=True))
    return entries


def header_lines(view: View, limit: int = 6) -> list[str]:
    """The state and provider lines a menu shows above its actions (disabled, not clickable).

    The tooltip alone is not enough: X11 trays show none, and a menu is where people look.
    """
    lines = [line for line in view.title.split("\n") if line]
    return lines[:limit]
