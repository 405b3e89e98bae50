"""``sync`` with ``paths``: the transcripts an agent asks the daemon to read now (its hooks).

Only files the transcript globs (``sessions.paths``) match are taken: a hook cannot make the
daemon read, or say anything about, another file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from recalld.errors import BadRequest, Forbidden
from recalld.retrieval.access import session_match

MAX_PATHS = 100


def transcript_paths(params: Mapping[str, Any], session_globs: Sequence[str]) -> set[Path]:
    """The checked ``paths`` of a sync request (absolute transcript files the globs match)."""
    raw = params.get("paths")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_PATHS:
        raise BadRequest(f"paths must be a list of 1 to {MAX_PATHS} transcript files")
    out: set[Path] = set()
    for item in raw:
        if not isinstance(item, str) or "\x00" in item or not os.path.isabs(item):
            raise BadRequest(f"each path must be an absolute file name: {item!r:.200}")
        path = Path(os.path.normpath(item))
        if not session_match(path, session_globs):
            raise Forbidden(
                f"{item:.300} is not a transcript that sessions.paths matches: add its folder "
                "to sessions.paths (or run `recalld integrate AGENT`)"
            )
        out.add(path)
    return out
