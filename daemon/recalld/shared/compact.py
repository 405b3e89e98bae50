"""``recalld shared compact``: the store's tables written anew, without the rows it deleted.

PostgreSQL deletes by marking. A forgotten note's rows, a deleted file's, and every older version
of an edited one stay in the table and index files as dead row versions; ``VACUUM`` (and
autovacuum) marks their space free but does not overwrite it: measured on the embedded server,
a deleted row's text was still in ``base/`` after ``DELETE``, ``VACUUM`` and ``CHECKPOINT``.
``VACUUM FULL`` writes each table, its TOAST table and its indexes to new files and drops the
old ones, so the text is in none of them. It holds the table's lock while it runs: searches of
the store answer locally after ``shared.timeout_ms``, pushes wait and retry. That is why it is an
administrator's command, run when the team can spare the minute, and not part of each forget.

The write-ahead log can still hold the text until PostgreSQL reuses its segments; a
``CHECKPOINT`` at the end lets it recycle them (it needs a superuser or ``pg_checkpoint``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from recalld.errors import ConfigError, Forbidden

#: Longest wait for a table's lock: past it the table is left as it was and the command says so
#: (waiting longer would queue every search and push of the team behind the rewrite).
LOCK_TIMEOUT_S = 10.0

_TABLES = """
    SELECT c.relname, pg_total_relation_size(c.oid),
           pg_has_role(current_user, c.relowner, 'USAGE')
               OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'recalld' AND c.relkind = 'r'
    ORDER BY pg_total_relation_size(c.oid), c.relname
"""


@dataclass(frozen=True)
class Rewritten:
    """One table: its bytes (with TOAST and indexes) before and after, and the seconds it took;
    ``busy`` when its lock could not be had within LOCK_TIMEOUT_S (left as it was)."""

    table: str
    bytes_before: int
    bytes_after: int
    seconds: float
    busy: bool = False


def compact(admin_url: str, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Rewrite every table of the ``recalld`` schema; what each took and freed."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, connect_timeout=10, autocommit=True) as conn:
        tables = conn.execute(_TABLES).fetchall()
        if not tables:
            raise ConfigError("this database has no recalld schema (`recalld shared init`)")
        not_owned = [name for name, _, owns in tables if not owns]
        if not_owned:
            raise Forbidden(
                "compacting needs the role that owns the store's tables (its administrator, "
                f"--admin-url); this one does not own recalld.{', recalld.'.join(not_owned)}"
            )
        conn.execute(sql.SQL("SET lock_timeout = {}").format(int(LOCK_TIMEOUT_S * 1000)))
        done = [_rewrite(conn, name, size, say) for name, size, _ in tables]
        checkpoint = _checkpoint(conn)
    return {
        "tables": [asdict(r) for r in done],
        "bytes_before": sum(r.bytes_before for r in done),
        "bytes_after": sum(r.bytes_after for r in done),
        "seconds": round(sum(r.seconds for r in done), 3),
        "busy": [r.table for r in done if r.busy],
        "checkpoint": checkpoint,
    }


def _rewrite(conn: Any, name: str, size: int, say: Callable[[str], None]) -> Rewritten:
    """``VACUUM FULL`` of one table (its indexes and TOAST with it)."""
    from psycopg import errors, sql

    say(f"rewriting recalld.{name} ({megabytes(size)})")
    started = time.monotonic()
    try:
        conn.execute(sql.SQL("VACUUM (FULL, ANALYZE) {}").format(sql.Identifier("recalld", name)))
    except errors.LockNotAvailable:
        say(f"recalld.{name} stayed busy for {LOCK_TIMEOUT_S:g} s: left as it was")
        return Rewritten(name, size, size, round(time.monotonic() - started, 3), busy=True)
    row = conn.execute(
        "SELECT pg_total_relation_size(%s::regclass)", (f"recalld.{name}",)
    ).fetchone()
    return Rewritten(name, size, int(row[0]), round(time.monotonic() - started, 3))


def _checkpoint(conn: Any) -> bool:
    """A CHECKPOINT, so the log's old segments can be recycled; False when not allowed."""
    from psycopg import errors

    try:
        conn.execute("CHECKPOINT")
    except errors.InsufficientPrivilege:
        return False
    return True


def megabytes(size: int) -> str:
    """``12.3 MB``."""
    return f"{size / 1e6:.1f} MB"


def summary(info: dict[str, Any]) -> list[str]:
    """What ``recalld shared compact`` prints for people."""
    rewritten = [t for t in info["tables"] if not t["busy"]]
    lines = [
        f"rewrote {len(rewritten)} table(s) of the shared store in {info['seconds']:.1f} s: "
        f"{megabytes(info['bytes_before'])} -> {megabytes(info['bytes_after'])}; the text of "
        "deleted, forgotten and replaced rows is no longer in their table or index files"
    ]
    if info["busy"]:
        lines.append(
            f"busy, left as they were (run it again when pushes are quiet): recalld."
            f"{', recalld.'.join(info['busy'])}"
        )
    if info["checkpoint"]:
        lines.append(
            "checkpointed: PostgreSQL's write-ahead log holds the old text only until it "
            "reuses those segments"
        )
    else:
        lines.append(
            "not checkpointed (needs a superuser or pg_checkpoint): the write-ahead log holds "
            "the old text until the server's next checkpoint and the reuse of its segments"
        )
    return lines
