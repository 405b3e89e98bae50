"""Facts for rows indexed before schema migration 6 (:mod:`recalld.index.chunk_facts`).

The migration adds the columns; this fills them in from what is at hand, without a reindex and
without embedding anything: a note's date and front matter tags from the file on disk (its
indexed mtime when it is gone), its inline tags from each chunk's text; a transcript chunk's
day from its ``[YYYY-MM-DD]`` line (new chunks get the message's exact time) and the
transcript's project and session from its first records. One transaction, run by the writer
before its first sync. A row written since the migration keeps what it was written with
(a transcript chunk's exact message time).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from recalld.index.chunk_facts import BACKFILL_KEY, put_file_facts, put_tags
from recalld.index.store import Store
from recalld.ingest.front_matter import read_front_matter
from recalld.ingest.note_facts import date_of_note, tags_of_chunk
from recalld.ingest.sessions.session_facts import LineTimes, scan_ident

__all__ = ["backfill_facts"]

log = logging.getLogger(__name__)
_HEAD_BYTES = 64 * 1024  # a note's front matter, a transcript's first records


def backfill_facts(store: Store) -> int:
    """Fill in the facts of rows that predate them; returns the chunks updated (0: none due)."""
    if store.readonly or not store.meta(BACKFILL_KEY):
        return 0
    started = time.monotonic()
    conn = store.conn
    done = 0
    with conn:
        files: list[Any] = conn.execute("SELECT path, source, mtime_ns FROM files").fetchall()
        for path, source, mtime_ns in files:
            head = _head(str(path))
            if source == "memory":
                done += _note(store, str(path), head, int(mtime_ns))
            else:
                done += _transcript(store, str(path), head, int(mtime_ns))
        conn.execute("DELETE FROM meta WHERE key = ?", (BACKFILL_KEY,))
    log.info("search facts filled in for %d chunks in %.1f s", done, time.monotonic() - started)
    return done


def _head(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _note(store: Store, path: str, head: str, mtime_ns: int) -> int:
    fm = read_front_matter(head)
    file_tags = fm.tags if fm is not None else ()
    date = date_of_note(path, head, mtime_ns)
    rows: list[Any] = store.conn.execute(
        "SELECT id, text FROM chunks WHERE path = ?", (path,)
    ).fetchall()
    for chunk_id, text in rows:
        store.conn.execute(
            "UPDATE chunks SET date = ? WHERE id = ? AND date IS NULL", (date, chunk_id)
        )
        put_tags(store.conn, int(chunk_id), tags_of_chunk(file_tags, str(text)))
    return len(rows)


def _transcript(store: Store, path: str, head: str, mtime_ns: int) -> int:
    project, session = scan_ident(enumerate(head.splitlines(), start=1), ("", ""))
    put_file_facts(store.conn, path, project, session)
    days = LineTimes()
    last = None  # a tool chunk has no day line: it has the day of the chunk before it
    rows: list[Any] = store.conn.execute(
        "SELECT id, start_line, end_line, text FROM chunks WHERE path = ? ORDER BY start_line",
        (path,),
    ).fetchall()
    for chunk_id, start, end, text in rows:
        last = days.date_of(int(start), int(end), str(text)) or last
        store.conn.execute(
            "UPDATE chunks SET date = ? WHERE id = ? AND date IS NULL",
            (last if last is not None else mtime_ns / 1e9, chunk_id),
        )
    return len(rows)
