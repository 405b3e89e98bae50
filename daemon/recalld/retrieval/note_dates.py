"""The date of a note or transcript, for recency decay (``search.recency_half_life_days``).

In order: a date in the file name (``2026-03-14-standup.md``, ``20260314.md``), a ``date:`` key
in YAML front matter, the last timestamp of a JSONL transcript (its most recent message), else
the file's mtime. Looked up at search time for the few candidate files only, from at most 8 KB of
each, and cached by (path, size, mtime): no index column, so the rule can change freely.
"""

from __future__ import annotations

import calendar
import fnmatch
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime

__all__ = ["decay", "is_evergreen", "note_date"]

_NAME_DATE = re.compile(
    r"(?<!\d)(20\d{2}|19\d{2})[-_.]?(0[1-9]|1[0-2])[-_.]?(0[1-9]|[12]\d|3[01])(?!\d)"
)
_FRONT_DATE = re.compile(
    r"^(?:date|created|updated)\s*:\s*['\"]?"
    r"(\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?)",
    re.MULTILINE | re.IGNORECASE,
)
_JSON_TIME = re.compile(
    r'"(?:timestamp|created_at|time|ts)"\s*:\s*"(\d{4}-\d{2}-\d{2}T[^"]{0,40})"'
)
_HEAD_BYTES = 8192
_CACHE_SIZE = 4096
_cache: OrderedDict[tuple[str, int, int], float] = OrderedDict()
_lock = threading.Lock()


def _parse_iso(text: str) -> float | None:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        return float(calendar.timegm(dt.timetuple()))
    return dt.timestamp()


def _from_name(path: str) -> float | None:
    found = list(_NAME_DATE.finditer(os.path.basename(path)))
    if not found:
        return None
    m = found[-1]  # the last date in the name is the most specific one
    try:
        return float(calendar.timegm((int(m[1]), int(m[2]), int(m[3]), 0, 0, 0, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None


def _from_content(path: str, size: int) -> float | None:
    try:
        with open(path, "rb") as f:
            if path.endswith(".jsonl"):
                # The most recent message: the last timestamp in the file's tail.
                f.seek(max(size - _HEAD_BYTES, 0))
                tail = f.read(_HEAD_BYTES).decode("utf-8", "replace")
                stamps = _JSON_TIME.findall(tail)
                return _parse_iso(stamps[-1]) if stamps else None
            head = f.read(_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    if head.startswith("---"):
        end = head.find("\n---", 3)
        m = _FRONT_DATE.search(head[: end if end > 0 else len(head)])
        if m:
            return _parse_iso(m.group(1))
    return None


def note_date(path: str) -> float | None:
    """Seconds since the epoch the note is dated, or None when the file is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    when = _from_name(path) or _from_content(path, st.st_size) or st.st_mtime
    with _lock:
        _cache[key] = when
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return when


def is_evergreen(path: str, patterns: Sequence[str]) -> bool:
    """Whether ``path`` matches one of the evergreen globs (by file name or full path)."""
    name = os.path.basename(path)
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(path, p) for p in patterns)


def decay(age_s: float, half_life_days: float) -> float:
    """``0.5 ** (age / half_life)``; 1 for notes from the future or with no half-life."""
    if half_life_days <= 0 or age_s <= 0:
        return 1.0
    return float(0.5 ** (age_s / (half_life_days * 86400.0)))
