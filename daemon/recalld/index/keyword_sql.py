"""The keyword channel's SQL: the FTS5 query with its bm25 weights, and the search filters.

The filters (sources, a path prefix, chunk kinds, dates and tags) are one WHERE clause, shared by
the keyword query and the vector channel's mask of allowed chunk ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import apsw

from recalld.index.chunk_facts import FactFilter, filter_sql

_PREFIX_END = "\U0010ffff"


def prefix_bounds(prefix: str) -> tuple[str, str]:
    """Range ``[lo, hi)`` of strings starting with ``prefix`` (index-friendly LIKE 'p%')."""
    return prefix, prefix + _PREFIX_END


def chunk_filters(
    sources: Sequence[str] | None,
    path_prefix: str | None,
    *,
    alias: str,
    kinds: Sequence[str] | None = None,
    facts: FactFilter | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause (without WHERE) and its arguments for the search filters."""
    clauses: list[str] = []
    args: list[Any] = []
    if facts is not None and not facts.empty:
        clause, more = filter_sql(facts, alias)
        clauses.append(clause)
        args.extend(more)
    if kinds:
        clauses.append(f"{alias}kind IN ({','.join('?' * len(kinds))})")
        args.extend(kinds)
    if sources:
        clauses.append(f"{alias}source IN ({','.join('?' * len(sources))})")
        args.extend(sources)
    if path_prefix:
        lo, hi = prefix_bounds(path_prefix)
        clauses.append(f"{alias}path >= ? AND {alias}path < ?")
        args.extend((lo, hi))
    return " AND ".join(clauses), tuple(args)


class KeywordQueries:
    """The store's filtered queries (a base of :class:`~recalld.index.store.Store`)."""

    conn: apsw.Connection

    def keyword_search(
        self,
        match: str,
        limit: int,
        sources: Sequence[str] | None,
        path_prefix: str | None,
        *,
        context_weight: float = 1.0,
        ident_weight: float = 1.0,
        kinds: Sequence[str] | None = None,
        facts: FactFilter | None = None,
    ) -> list[tuple[int, float]]:
        """(chunk id, bm25) best first; bm25 is negative, lower is better (FTS5's convention).

        ``context_weight`` weighs a match in the title/heading column against one in the text,
        ``ident_weight`` one in the derived identifier/CJK tokens.
        """
        where, args = chunk_filters(sources, path_prefix, alias="c.", kinds=kinds, facts=facts)
        weights = f"1.0, {float(context_weight)!r}, {float(ident_weight)!r}"
        rank = f"bm25(chunks_fts, {weights}) AS rank"
        if where:
            sql = (
                f"SELECT c.id, {rank} FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
                f"WHERE chunks_fts MATCH ? AND {where} ORDER BY rank LIMIT ?"
            )
        else:
            # No filter, no join: looking every match up in ``chunks`` before the top-k cut
            # was 45 % of the query on the 100k chat mix. A row only FTS5 still held would be
            # dropped later, with the chunks of the answer (``Store.chunks``).
            sql = f"SELECT rowid, {rank} FROM chunks_fts WHERE chunks_fts MATCH ? "
            sql += "ORDER BY rank LIMIT ?"
        return [(int(r[0]), float(r[1])) for r in self.conn.execute(sql, (match, *args, limit))]

    def chunk_ids(
        self,
        sources: Sequence[str] | None,
        path_prefix: str | None,
        kinds: Sequence[str] | None = None,
        facts: FactFilter | None = None,
    ) -> list[int]:
        """Ids of the chunks that pass the filters (for the vector channel's mask)."""
        where, args = chunk_filters(sources, path_prefix, alias="", kinds=kinds, facts=facts)
        sql = "SELECT id FROM chunks" + (f" WHERE {where}" if where else "")
        return [int(r[0]) for r in self.conn.execute(sql, args)]

    def keyword_scores_of(
        self, match: str, ids: Sequence[int], *, context_weight: float, ident_weight: float
    ) -> list[tuple[int, float]]:
        """(chunk id, bm25) of the rows of ``ids`` that ``match`` matches, with the weights of
        :meth:`keyword_search`.

        ``+rowid`` keeps the ids a filter on FTS5's walk of the match (bm25 computed for those
        rows only): as a constraint, FTS5 seeks each id and the statement was 5-25x slower
        (locomo's home, 40 ids: 9.2 ms against 0.5 ms; the search itself 1.9 ms)."""
        if not ids:
            return []
        weights = f"1.0, {float(context_weight)!r}, {float(ident_weight)!r}"
        sql = (
            f"SELECT rowid, bm25(chunks_fts, {weights}) FROM chunks_fts "
            "WHERE chunks_fts MATCH ? AND +rowid IN (SELECT value FROM json_each(?))"
        )
        rows = self.conn.execute(sql, (match, json.dumps([int(i) for i in ids])))
        return [(int(r[0]), float(r[1])) for r in rows]
