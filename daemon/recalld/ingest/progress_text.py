"""A sync's progress as one line of text: the daemon's log, ``recalld sync``, the tray.

Fed with ``progress`` maps (the daemon's ``status`` and ``watch`` events, or an in-process
sync's :class:`~recalld.ingest.sync_report.Progress` as a dict). Imports nothing heavy: the CLI
loads it on the client path, and the daemon's backlog logs with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(p: Mapping[str, Any], what: str = "sync progress") -> str:
    """One line: files, chunks, rate, time left, vectors still due (the daemon's log too)."""
    total, done = int(p.get("files_total") or 0), int(p.get("files_done") or 0)
    pct = f" ({100 * done / total:.0f} %)" if total else ""
    eta = f", about {duration(p['eta_s'])} left" if p.get("eta_s", 0) >= 1 else ""
    waiting = f", {p['files_waiting']:,} waiting" if p.get("files_waiting") else ""
    return (
        f"{what}: {done:,}/{total:,} files{pct}{waiting}, {p.get('files_changed', 0):,} changed, "
        f"{p.get('chunks_done', 0):,} chunks ({p.get('chunks_embedded', 0):,} embedded), "
        f"{p.get('files_per_s', 0):.1f} files/s, {p.get('chunks_per_s', 0):.1f} chunks/s{eta}"
        f"{vectors_text(p, ', ')}"
    )


def vectors_text(p: Mapping[str, Any], sep: str) -> str:
    """``, vectors 3,000/10,000 (30 %)`` while chunks wait for vectors (keyword first), else ''."""
    pending, total = int(p.get("vectors_pending") or 0), int(p.get("vectors_total") or 0)
    if pending <= 0 or total <= 0:
        return ""
    done = max(total - pending, 0)
    return f"{sep}vectors {done:,}/{total:,} ({100 * done / total:.0f} %)"


def duration(seconds: float) -> str:
    """``75`` -> ``1 min 15 s``."""
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"
