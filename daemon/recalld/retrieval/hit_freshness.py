"""How fresh each hit is: ``modified``, ``indexed``, ``date`` (ISO 8601) and ``stale``.

``modified`` is the file's mtime on disk now (the indexed one when the file is gone),
``indexed`` when its rows were last written, ``date`` the content's date (the search filters'
``since``/``until`` see the same: :mod:`recalld.index.chunk_facts`), and ``stale`` is true when
the file on disk is not what was indexed (another size or mtime, or gone): the hit's text may
differ from the file's now. One ``stat`` per distinct file of the answer, two indexed lookups
per hit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from recalld.index.chunk_facts import chunk_dates, file_times

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
    paths = list(dict.fromkeys(str(r["path"]) for r in results))
    indexed = file_times(conn, paths)
    dates = chunk_dates(conn, [(str(r["path"]), int(r["start_line"])) for r in results])
    on_disk: dict[str, os.stat_result | None] = {}
    for path in paths:
        try:
            on_disk[path] = os.stat(path)
        except OSError:
            on_disk[path] = None
    for r in results:
        path = str(r["path"])
        st, row = on_disk[path], indexed.get(path)
        mtime = st.st_mtime_ns if st is not None else (row[1] if row else None)
        r["modified"] = iso(mtime / 1e9) if mtime is not None else None
        r["indexed"] = iso(row[2]) if row else None
        r["date"] = iso(dates.get((path, int(r["start_line"]))))
        r["stale"] = st is None or row is None or (st.st_size, st.st_mtime_ns) != row[:2]
