"""The facts of a transcript that searches filter by: its project, session id and message times.

- Project: the ``cwd`` its records name (Claude Code's every record, Codex's ``session_meta``,
  OpenClaw's ``session`` header); a search's ``project`` matches it whole or by its last folder.
- Session: ``sessionId`` (Claude Code), ``session_meta.id`` (Codex), the ``session`` header's
  ``id`` (OpenClaw); a search's ``session`` also matches the file's name without ``.jsonl``.
- A chunk's date: the time of its last timed message (:class:`LineTimes`); a transcript chunk
  is appended to over several syncs, so the times of the lines that may be rewritten are kept
  in the transcript's saved state.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from recalld.ingest.note_facts import parse_iso
from recalld.ingest.sessions.messages import Message

__all__ = ["Ident", "LineTimes", "scan_ident"]

#: Lines looked at for a project and session before giving up on a delta.
SCAN_LINES = 200
_HINTS = (b'"cwd"', b'"sessionId"', b'"session_meta"', b'"session"', b'"id"')
_DAY = re.compile(r"\[(\d{4}-\d{2}-\d{2})\]")

#: (project, session); '' where not known yet.
Ident = tuple[str, str]


def _record_ident(rec: Mapping[str, Any]) -> Ident:
    """What one record says of its project and session."""
    cwd, sid = rec.get("cwd"), rec.get("sessionId") or rec.get("session_id")
    payload = rec.get("payload")
    if rec.get("type") == "session_meta" and isinstance(payload, Mapping):
        cwd, sid = payload.get("cwd"), payload.get("id")
    elif rec.get("type") == "session" or ("instructions" in rec and "timestamp" in rec):
        sid = rec.get("id")
    return (cwd if isinstance(cwd, str) else "", sid if isinstance(sid, str) else "")


def scan_ident(lines: Iterable[tuple[int, bytes | str]], known: Ident) -> Ident:
    """``known`` completed from the first records that name a project or session."""
    project, session = known
    for i, (_, raw) in enumerate(lines):
        if (project and session) or i >= SCAN_LINES:
            break
        data = raw.encode() if isinstance(raw, str) else raw
        if not any(h in data for h in _HINTS):
            continue
        try:
            rec = json.loads(data)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict):
            cwd, sid = _record_ident(rec)
            project, session = project or cwd.rstrip("/"), session or sid
    return project, session


class LineTimes:
    """Message times by JSONL line, for the dates of a transcript's chunks."""

    def __init__(self, saved: Mapping[str, Any] | None = None) -> None:
        self.times: dict[int, float] = {}
        self._lines: list[int] | None = None  # sorted keys, while no line is added
        for line, when in (saved or {}).items():
            if isinstance(when, int | float):
                self.times[int(line)] = float(when)

    def add(self, messages: Iterable[Message]) -> None:
        """Note the times of parsed messages (the first on a line wins)."""
        for m in messages:
            if m.timestamp and m.line not in self.times:
                when = parse_iso(m.timestamp)
                if when is not None:
                    self.times[m.line] = when
                    self._lines = None

    def _sorted(self) -> list[int]:
        if self._lines is None:
            self._lines = sorted(self.times)
        return self._lines

    def date_of(self, start_line: int, end_line: int, text: str) -> float | None:
        """A chunk's date: the time of its last timed line (or of the last one before it),
        else the last day its text names (``[2026-03-14]``), else None.

        The last, not the first: a chunk that goes on into today (or opens with the turns
        carried over from the chunk before) is found by ``since`` for what it says today.
        """
        lines = self._sorted()
        j = bisect.bisect_right(lines, end_line) - 1
        if j >= 0:
            return self.times[lines[j]]
        days = _DAY.findall(text)
        return parse_iso(days[-1]) if days else None

    def saved(self, from_line: int) -> dict[str, float]:
        """What a later sync needs: the lines from ``from_line`` on and the last one before."""
        lines = self._sorted()
        i = bisect.bisect_left(lines, from_line)
        return {str(line): self.times[line] for line in lines[max(i - 1, 0) :]}
