"""The shared store's HNSW graph: how it is built (schema migration 6) and rebuilt once.

pgvector builds its graph with ``ef_construction`` 64 unless told otherwise. On the bench's
store (1M clustered vectors) that graph gave recall@10 0.9485-0.9515 against an exact scan at
``hnsw.ef_search`` 200-250; the same vectors with ``ef_construction`` 128 gave 0.9995 at
``ef_search`` 200, the search as fast (docs/DECISIONS.md, "ef_construction 128"). The price is
paid when vectors enter the graph: a build or a merge of fresh vectors searches twice as wide.

A new store's graph is made so by ``claim_identity`` (migration 6). An older store's graph
keeps its build until :func:`rebuild_if_older` (run by ``migrate``, so by ``recalld shared
init`` and ``up``) builds a new one beside it, ``CONCURRENTLY`` (searches and pushes go on),
and swaps it in. The options a graph was built with are its index's reloptions (never altered
in place, so they say how the graph was built); a daemon reads them and says in ``status``
when its store's graph is an older one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The graph's build: pgvector's default links per node, twice its default search width.
OPTIONS = "m = 16, ef_construction = 128"
#: What a current graph's reloptions hold.
CURRENT = "ef_construction=128"
#: The graph's index, as made by claim_identity and rebuilt here.
CREATE = (
    "CREATE INDEX {concurrently} {name} ON recalld.vectors "
    f"USING hnsw (embedding vector_cosine_ops) WITH ({OPTIONS})"
)
#: Session lock of a rebuild: a second administrator's migrate leaves the rebuild to the first.
_LOCK = 7321002
_NEXT = "vectors_hnsw_next"

#: Whether the store has a graph built otherwise than :data:`OPTIONS` (false when it has none
#: yet). pg_class is readable by every role, so a member's daemon can ask.
OUTDATED = (
    "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'recalld' AND c.relname = 'vectors_hnsw' "
    f"AND NOT coalesce(c.reloptions @> ARRAY['{CURRENT}'], false))"
)


def claim_with_options(claim_sql: str) -> str:
    """``claim_identity``'s body with the graph made with :data:`OPTIONS` (migration 6)."""
    old = "'USING hnsw (embedding vector_cosine_ops)'"
    if old not in claim_sql:
        raise ValueError("claim_identity no longer makes the graph as migration 6 expects")
    return claim_sql.replace(old, f"'USING hnsw (embedding vector_cosine_ops) WITH ({OPTIONS})'")


def outdated(conn: Any) -> bool:
    """Whether the store has a graph built before migration 6 (False when it has none yet)."""
    return bool(conn.execute(OUTDATED).fetchone()[0])


def rebuild_if_older(conn: Any, say: Callable[[str], None] = lambda _: None) -> bool:
    """Build the graph anew with :data:`OPTIONS` when it was built otherwise; True when it did.

    ``conn`` is an administrator's autocommit connection (``CREATE INDEX CONCURRENTLY`` runs
    outside a transaction). Searches use the old graph until the new one is swapped in, in one
    short transaction; a rebuild cut short leaves an invalid index that the next one drops."""
    if not outdated(conn):
        return False
    if not conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK,)).fetchone()[0]:
        say("another administrator is rebuilding the shared store's vector graph")
        return False
    try:
        if not outdated(conn):  # rebuilt by whoever held the lock before
            return False
        rows = int(conn.execute("SELECT count(*) FROM recalld.vectors").fetchone()[0])
        say(
            f"rebuilding the shared store's vector graph ({rows:,} vectors, {OPTIONS}; "
            "minutes per million vectors): searches and pushes go on meanwhile"
        )
        conn.execute(f"DROP INDEX IF EXISTS recalld.{_NEXT}")  # a rebuild cut short
        # pgvector builds in memory what fits in maintenance_work_mem, the rest far slower
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute(CREATE.format(concurrently="CONCURRENTLY", name=_NEXT))
        with conn.transaction():
            conn.execute("DROP INDEX recalld.vectors_hnsw")
            conn.execute(f"ALTER INDEX recalld.{_NEXT} RENAME TO vectors_hnsw")
        say("the shared store's vector graph is rebuilt")
        return True
    finally:
        conn.execute("RESET maintenance_work_mem")
        conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK,))
