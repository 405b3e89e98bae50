"""A session named by the start of its id, as people copy it (``5f1c9e0a`` for
``5f1c9e0a-77b2-...``): ``forget --session`` and a search's ``session`` filter take the one
indexed session it begins.

An id that names a session as it is (a transcript's recorded id or file name, see
:func:`recalld.ingest.forgotten.session_matches`) is kept; a prefix of exactly one known id
becomes that id; a prefix of several is refused with the candidates, never guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from recalld.errors import BadRequest
from recalld.ingest.forgotten import session_matches

SHOWN = 8  # candidates named in the error of an ambiguous prefix


def resolve(conn: Any, given: str, known: Iterable[str] = ()) -> str:
    """The session id ``given`` stands for among the indexed transcripts (``conn``'s; None: no
    transcripts) and ``known`` ids (forgotten ones); ``given`` itself when it is one, or when
    nothing begins with it."""
    rows = transcripts(conn) if conn is not None else []
    known = [k for k in known if k]
    if given in known or any(
        given == session or session_matches(path, given) for path, session in rows
    ):
        return given
    found: set[str] = {k for k in known if k.startswith(given)}
    for path, session in rows:
        stem = Path(path).name.rsplit(".", 1)[0]
        if session.startswith(given):
            found.add(session)
        elif stem.startswith(given):
            found.add(stem)
    if len(found) > 1:
        names = sorted(found)
        more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
        raise BadRequest(
            f"session {given!r} is the start of {len(names)} session ids: "
            f"{', '.join(names[:SHOWN])}{more}; give more of the id"
        )
    return found.pop() if found else given


def transcripts(conn: Any) -> list[tuple[str, str]]:
    """(path, recorded session id or '') of every indexed transcript."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'file_facts'").fetchone():
        return []  # an index from before the facts (read-only, not migrated)
    return [
        (str(path), str(session or ""))
        # Every transcript indexed has a row (written with its chunks); notes have none.
        for path, session in conn.execute("SELECT path, session FROM file_facts")
    ]
