"""A search's filters on stored facts: ``tags``, ``since``, ``until``, ``project``, ``session``.

Read from the wire parameters into a :class:`~recalld.index.chunk_facts.FactFilter`; both
channels apply it before ranking (the vector channel as its mask of allowed chunks, the keyword
channel in its query), so a narrow filter still fills ``max_results``.

``since`` and ``until`` take an ISO 8601 date or time (``2026-03-14``, ``2026-03-14T09:30``,
with an offset or ``Z``; naive ones are UTC) or a span back from now: ``90m``, ``12h``, ``7d``,
``2w``. A bare date in ``until`` includes that whole day.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any

import apsw

from recalld.config import Config
from recalld.errors import BadRequest, IndexError_
from recalld.index.chunk_facts import FactFilter
from recalld.ingest.note_facts import normalize_tag, parse_iso

__all__ = ["MAX_TAGS", "parse_filters", "parse_when", "require_facts"]

MAX_TAGS = 32
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_BARE_DATE = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")
_WHEN_HELP = "an ISO date or time (2026-03-14, 2026-03-14T09:30Z) or a span back from now (12h, 7d)"


def parse_when(name: str, value: Any, now: float | None = None) -> float:
    """Seconds since the epoch of a ``since``/``until`` value (BadRequest when it is not one)."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} must be {_WHEN_HELP}, got {value!r}")
    span = _SPAN.match(value)
    if span:
        return (time.time() if now is None else now) - float(span[1]) * _UNIT_S[span[2].lower()]
    when = parse_iso(value)
    if when is None:
        raise BadRequest(f"{name} must be {_WHEN_HELP}, got {value!r}")
    if name == "until" and _BARE_DATE.match(value):
        when += 86400.0  # until 2026-03-14: that day included
    return when


def _tags(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise BadRequest(f"tags must be a list of strings, got {value!r}")
    tags = tuple(dict.fromkeys(t for t in (normalize_tag(v) for v in value) if t))
    if value and not tags:
        raise BadRequest(f"tags must name at least one tag, got {value!r}")
    if len(tags) > MAX_TAGS:
        raise BadRequest(f"at most {MAX_TAGS} tags, got {len(tags)}")
    return tags


def _name(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise BadRequest(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def parse_filters(params: Mapping[str, Any], config: Config) -> FactFilter | None:
    """The filters a search's parameters ask for, or None when they ask for none."""
    since = params.get("since")
    until = params.get("until")
    if (
        since is None
        and until is None
        and not any(params.get(k) is not None for k in ("tags", "project", "session"))
    ):
        return None  # the common case, checked without a look at the memory roots
    now = time.time()
    project = _project(_name(params, "project"))
    found = FactFilter(
        tags=_tags(params.get("tags")),
        since=parse_when("since", since, now) if since is not None else None,
        until=parse_when("until", until, now) if until is not None else None,
        project=project,
        session=_name(params, "session"),
        note_roots=tuple(str(r) for r in config.memory_roots()) if project else (),
    )
    if found.since is not None and found.until is not None and found.since >= found.until:
        raise BadRequest(f"since ({since!r}) must be before until ({until!r})")
    return None if found.empty else found


def require_facts(conn: Any) -> None:
    """IndexError_ when the index predates the facts (opened read-only, never migrated)."""
    try:
        conn.execute("SELECT date FROM chunks LIMIT 0").fetchall()
    except apsw.SQLError:
        raise IndexError_(
            "this index was made before search filters existed: run `recalld sync` once (or "
            "start the daemon) to bring it up to date"
        ) from None


def _project(value: str | None) -> str | None:
    """A project as given: a name (``recalld``) or a folder (``~/src/recalld``)."""
    if value is None:
        return None
    value = os.path.expanduser(value)
    return value.rstrip("/") or value
