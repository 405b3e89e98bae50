"""Coordination as a signal, not a filter (``search.coordination``).

BM25 over an OR query sums the evidence of each term, so a chunk that repeats one rare word can
outrank the chunk that holds every word the query asks for. An AND query fixes that by dropping
everything else, which loses most of the answers on natural-language questions. Here the share
of the query's term weight that a keyword candidate holds, each term weighed by its inverse
document frequency (rare terms count most), earns extra credit on top of the BM25 score::

    coverage(c) = sum(idf(t) for t in terms if c holds t) / sum(idf(t) for t in terms)
    score(c)    = bm25(c) / best + weight * coverage(c) ** 2        (then rescaled, best = 1)

The square keeps partial matches cheap: the credit is for holding (nearly) all of them. Which
chunk holds which term is asked of FTS5 itself (a MATCH on the term restricted to the
candidates), so stemming and tokenization are exactly the index's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import apsw

__all__ = ["coverage", "credit", "term_weights"]

#: Fewer terms than this leave nothing to coordinate.
MIN_TERMS = 2


def term_weights(conn: apsw.Connection, terms: Sequence[str]) -> dict[str, float]:
    """BM25's idf of each quoted term over the whole index (0 for a term nothing holds)."""
    total = _one(conn, "SELECT count(*) FROM chunks")
    out: dict[str, float] = {}
    for term in terms:
        df = _one(conn, "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (term,))
        out[term] = math.log((total - df + 0.5) / (df + 0.5) + 1.0) if df else 0.0
    return out


def coverage(
    conn: apsw.Connection, weights: Mapping[str, float], candidates: Sequence[int]
) -> dict[int, float]:
    """Per candidate chunk: the share of the terms' idf it holds (0 to 1)."""
    total = sum(weights.values())
    out = dict.fromkeys(candidates, 0.0)
    if total <= 0 or not candidates:
        return out
    marks = ",".join("?" * len(candidates))
    sql = f"SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({marks})"
    for term, w in weights.items():
        if w <= 0:
            continue
        for (cid,) in conn.execute(sql, (term, *candidates)):
            out[int(cid)] += w / total
    return out


def credit(
    conn: apsw.Connection, terms: Sequence[str], keyword: Mapping[int, float], weight: float
) -> tuple[dict[int, float], dict[int, float]]:
    """Keyword scores (best = 1) with the coordination credit, and each candidate's coverage.

    ``keyword`` are the channel's mapped scores (recalld.fusion.bm25_scores); unchanged when
    the weight is 0 or the query has fewer than MIN_TERMS terms.
    """
    if weight <= 0 or len(terms) < MIN_TERMS or not keyword:
        return dict(keyword), {}
    cov = coverage(conn, term_weights(conn, terms), list(keyword))
    raised = {cid: s + weight * cov[cid] ** 2 for cid, s in keyword.items()}
    best = max(raised.values())
    return {cid: max(s / best, 1e-3) for cid, s in raised.items()}, cov


def _one(conn: apsw.Connection, sql: str, args: tuple[object, ...] = ()) -> int:
    row = conn.execute(sql, args).fetchone()
    return int(row[0]) if row else 0
