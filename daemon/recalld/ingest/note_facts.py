"""The facts of a note that searches filter by: its date and its tags.

- Date: a ``date:`` (or ``created:``) key in the front matter, else a daily-note file name
  (``2026-03-14.md``, ``2026-03-14-standup.md``), else the file's mtime. A date without a time
  is midnight UTC.
- Tags: the front matter's ``tags`` (every chunk of the note has them) and inline ``#tags`` in
  the chunk's own text (outside code fences), as Obsidian reads them. Stored lower-case, without
  the ``#``.
"""

from __future__ import annotations

import calendar
import os
import re
from collections.abc import Iterable
from datetime import datetime

__all__ = ["date_of_note", "inline_tags", "normalize_tag", "parse_iso", "tags_of_chunk"]

_DAILY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?![\d])")
_FRONT_DATE = re.compile(
    r"^(?:date|created)\s*[:=]\s*['\"]?"
    r"(\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?)",
    re.MULTILINE | re.IGNORECASE,
)
# A tag starts after a space or punctuation (not inside a word, URL or ``##``), with a letter.
# "#" first, the char before it checked by a lookbehind over both: the same matches as
# (?<![\w#/&=.:])#..., but the regex engine skips to each "#" instead of trying every char.
_INLINE_TAG = re.compile(r"#(?<![\w#/&=.:]#)([A-Za-z_][\w\-/]*)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_HEAD_CHARS = 8192
MAX_TAGS = 50  # per chunk: a pasted list of colours must not bloat the index
MAX_TAG_CHARS = 100


def parse_iso(text: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 date or time (naive: UTC), or None."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        return float(calendar.timegm(dt.timetuple())) + dt.microsecond / 1e6
    return dt.timestamp()


def _front_block(text: str) -> str:
    """The front matter block (``---`` ... ``---``) at the top of ``text``, or ''."""
    head = text[:_HEAD_CHARS]
    if not head.startswith(("---", "+++")):
        return ""
    end = head.find("\n" + head[:3], 3)
    return head[: end if end > 0 else len(head)]


def date_of_note(path: str, text: str, mtime_ns: int) -> float:
    """The note's date (front matter, daily-note name, mtime), seconds since the epoch."""
    found = _FRONT_DATE.search(_front_block(text))
    if found and (when := parse_iso(found.group(1))) is not None:
        return when
    daily = _DAILY.match(os.path.basename(path))
    if daily:
        try:
            y, m, d = (int(g) for g in daily.groups())
            return float(calendar.timegm((y, m, d, 0, 0, 0, 0, 0, 0)))
        except (ValueError, OverflowError):
            pass
    return mtime_ns / 1e9


def normalize_tag(tag: str) -> str:
    """A tag as stored and matched: no ``#``, stripped, lower-case ('' when nothing is left)."""
    return tag.strip().lstrip("#").strip().lower()[:MAX_TAG_CHARS]


def inline_tags(text: str) -> list[str]:
    """``#tags`` in ``text`` outside code fences, normalized, in order of appearance."""
    prose = _FENCE.sub("", text) if "```" in text or "~~~" in text else text
    return [normalize_tag(m.group(1)) for m in _INLINE_TAG.finditer(prose)]


def tags_of_chunk(file_tags: Iterable[str], text: str) -> tuple[str, ...]:
    """A chunk's tags: the note's front matter tags and the chunk's inline ones, deduplicated."""
    tags = [normalize_tag(t) for t in file_tags] + inline_tags(text)
    return tuple(dict.fromkeys(t for t in tags if t))[:MAX_TAGS]
