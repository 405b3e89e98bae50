"""How fresh each hit is: ``modified``, ``indexed``, ``date`` (ISO 8601) and ``stale``.

``modified`` is the file's mtime on disk now (the indexed one when the file is gone),
``indexed`` when its rows were last written, ``date`` the content's date (the search filters'
``since``/``until`` see the same: :mod:`recalld.index.chunk_facts`), and ``stale`` is true when
the file on disk is not what was indexed (another size or mtime, or gone): the hit's text may
differ from the file's now. One ``stat`` per distinct file of the answer, two indexed lookups
per answer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from recalld.index.chunk_facts import hit_facts
from recalld.index.rows import PROVISIONAL

__all__ = ["add_freshness", "iso"]


def iso(seconds: float | None) -> str | None:
    """Seconds since the epoch as ISO 8601 in UTC (``2026-03-14T09:30:00Z``), or None."""
    if seconds is None:
        return None
    try:
        when = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def add_freshness(results: Sequence[dict[str, Any]], conn: Any) -> None:
    """Add the four fields to each wire result (in place)."""
    facts = hit_facts(conn, [(str(r["path"]), int(r["start_line"])) for r in results])
    on_disk: dict[str, os.stat_result | None] = {}
    for r in results:
        path = str(r["path"])
        if path not in on_disk:
            try:
                on_disk[path] = os.stat(path)
            except OSError:
                on_disk[path] = None
        st, row = on_disk[path], facts.get((path, int(r["start_line"])))
        mtime = st.st_mtime_ns if st is not None else (row[2] if row else None)
        r["modified"] = iso(mtime / 1e9) if mtime is not None else None
        r["indexed"] = iso(row[3]) if row else None
        r["date"] = iso(row[0]) if row else None
        r["stale"] = st is None or row is None or _moved(st, row[1], row[2])


def _moved(st: os.stat_result, size: int, mtime_ns: int) -> bool:
    """Whether the file is not what was indexed. A note held as one row until it is chunked
    (recalld.ingest.first_pass) has no indexed mtime: its size alone tells, for the seconds
    until its chunks replace it."""
    if mtime_ns == PROVISIONAL[2]:
        return st.st_size != size
    return (st.st_size, st.st_mtime_ns) != (size, mtime_ns)
