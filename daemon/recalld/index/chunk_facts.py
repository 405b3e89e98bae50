"""What a search can be narrowed by, stored per chunk and per file (schema migration 6).

- ``chunks.date``: the content's date in seconds since the epoch (a note's date, a transcript
  chunk's last message time); indexed, so ``--since 7d`` reads only the rows it keeps.
- ``chunk_tags``: (tag, chunk id) pairs, lower-cased; a trigger drops a chunk's pairs with it.
- ``file_facts``: a transcript's project (its cwd) and session id; a trigger drops the row with
  the file's. A note's project is its top folder under a memory root: a path prefix, nothing
  stored (see :func:`filter_sql`).

Rows indexed before migration 6 have no facts yet; ``meta`` key :data:`BACKFILL_KEY` says so
until the writer fills them in (:mod:`recalld.ingest.facts_backfill`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import apsw

__all__ = [
    "BACKFILL_KEY",
    "MIGRATION",
    "FactFilter",
    "file_facts",
    "filter_sql",
    "hit_facts",
    "put_file_facts",
    "put_tags",
]

_PREFIX_END = "\U0010ffff"

#: Set by migration 6 while rows written before it have no facts (cleared by the back-fill).
BACKFILL_KEY = "facts_backfill"

MIGRATION = f"""
    ALTER TABLE chunks ADD COLUMN date REAL;
    CREATE INDEX chunks_by_date ON chunks(date);
    CREATE TABLE chunk_tags (
        tag      TEXT NOT NULL,
        chunk_id INTEGER NOT NULL,
        PRIMARY KEY (tag, chunk_id)
    ) WITHOUT ROWID;
    CREATE INDEX chunk_tags_by_chunk ON chunk_tags(chunk_id);
    CREATE TRIGGER chunk_tags_ad AFTER DELETE ON chunks BEGIN
        DELETE FROM chunk_tags WHERE chunk_id = old.id;
    END;
    CREATE TABLE file_facts (
        path    TEXT PRIMARY KEY,
        project TEXT NOT NULL DEFAULT '',
        session TEXT NOT NULL DEFAULT ''
    );
    CREATE TRIGGER file_facts_ad AFTER DELETE ON files BEGIN
        DELETE FROM file_facts WHERE path = old.path;
    END;
    INSERT INTO meta(key, value) SELECT '{BACKFILL_KEY}', '1' WHERE EXISTS (SELECT 1 FROM chunks);
"""


@dataclass(frozen=True)
class FactFilter:
    """The stored-facts part of a search's filters (all given ones must hold)."""

    tags: tuple[str, ...] = ()  # any of them (lower-case)
    since: float | None = None  # content date >= since
    until: float | None = None  # content date < until
    project: str | None = None
    session: str | None = None
    note_roots: tuple[str, ...] = ()  # memory roots: a note's project is its top folder

    @property
    def empty(self) -> bool:
        """Whether nothing is filtered."""
        return not (
            self.tags
            or self.since is not None
            or self.until is not None
            or self.project
            or self.session
        )


def filter_sql(f: FactFilter, alias: str) -> tuple[str, tuple[Any, ...]]:
    """A WHERE clause over ``chunks`` (as ``alias``, e.g. ``"c."``) for ``f``, and its args."""
    clauses: list[str] = []
    args: list[Any] = []
    if f.since is not None:
        clauses.append(f"{alias}date >= ?")
        args.append(f.since)
    if f.until is not None:
        clauses.append(f"{alias}date < ?")
        args.append(f.until)
    if f.tags:
        marks = ",".join("?" * len(f.tags))
        clauses.append(f"{alias}id IN (SELECT chunk_id FROM chunk_tags WHERE tag IN ({marks}))")
        args.extend(f.tags)
    if f.session:  # the id the records name, or the file's name without .jsonl
        clauses.append(
            f"{alias}path IN (SELECT path FROM file_facts WHERE session = ? "
            "OR substr(path, -length(?) - 7) = '/' || ? || '.jsonl')"
        )
        args.extend([f.session] * 3)
    if f.project:
        clause, more = _project_sql(f.project, f.note_roots, alias)
        clauses.append(clause)
        args.extend(more)
    return " AND ".join(clauses), tuple(args)


def _project_sql(project: str, roots: Sequence[str], alias: str) -> tuple[str, list[Any]]:
    """A transcript whose cwd is ``project`` (or ends in ``/project``), or a note under
    ``root/project/`` for a memory root."""
    ors = [
        f"{alias}path IN (SELECT path FROM file_facts WHERE project = ? "
        "OR (length(project) > length(?) AND substr(project, -length(?) - 1) = '/' || ?))"
    ]
    args: list[Any] = [project] * 4
    if "/" not in project:
        for root in roots:
            lo = f"{root.rstrip('/')}/{project}/"
            hi = lo + _PREFIX_END
            ors.append(f"({alias}source = 'memory' AND {alias}path >= ? AND {alias}path < ?)")
            args.extend((lo, hi))
    return "(" + " OR ".join(ors) + ")", args


def put_tags(conn: Any, chunk_id: int, tags: Iterable[str]) -> None:
    """Record a chunk's tags (in the caller's transaction)."""
    for tag in tags:
        conn.execute(
            "INSERT OR IGNORE INTO chunk_tags(tag, chunk_id) VALUES (?, ?)", (tag, chunk_id)
        )


def put_file_facts(conn: Any, path: str, project: str, session: str) -> None:
    """Record a transcript's project and session (an empty value keeps the one known)."""
    conn.execute(
        "INSERT INTO file_facts(path, project, session) VALUES (?, ?, ?) "
        "ON CONFLICT(path) DO UPDATE SET "
        "project = CASE WHEN excluded.project != '' THEN excluded.project ELSE project END, "
        "session = CASE WHEN excluded.session != '' THEN excluded.session ELSE session END",
        (path, project, session),
    )


def file_facts(conn: Any, path: str) -> tuple[str, str] | None:
    """(project, session) recorded for a file, or None."""
    row = conn.execute("SELECT project, session FROM file_facts WHERE path = ?", (path,)).fetchone()
    return (str(row[0]), str(row[1])) if row else None


def hit_facts(
    conn: Any, places: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], tuple[float | None, int, int, float]]:
    """Per (path, line) of an answer: the date of the chunk holding the line, and the file's
    indexed size, mtime_ns and indexed_at. Hits whose file has no row are left out.

    One statement for all of them: a query per hit cost ~120 us for six at 100k chunks."""
    if not places:
        return {}
    values = ",".join("(?, ?)" for _ in places)
    sql = (
        f"WITH hits(path, line) AS (VALUES {values}) SELECT h.path, h.line, "
        "(SELECT date FROM chunks WHERE path = h.path AND start_line <= h.line "
        "ORDER BY start_line DESC LIMIT 1), f.size, f.mtime_ns, f.indexed_at "
        "FROM hits h JOIN files f ON f.path = h.path"
    )
    args = [v for place in places for v in place]
    try:
        rows = conn.execute(sql, args).fetchall()
    except apsw.SQLError:  # an index not migrated yet, read without a daemon: no dates
        rows = conn.execute(sql.replace("(SELECT date FROM", "(SELECT NULL FROM"), args).fetchall()
    return {
        (str(p), int(n)): (None if d is None else float(d), int(size), int(mtime), float(at))
        for p, n, d, size, mtime, at in rows
    }
