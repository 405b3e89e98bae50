"""Coordination as a signal, not a filter (``search.coordination``).

BM25 over an OR query sums the evidence of each term, so a chunk that repeats one rare word can
outrank the chunk that holds every word the query asks for. An AND query fixes that by dropping
everything else, which loses most of the answers on natural-language questions. Here the share
of the query's rare terms that a keyword candidate holds earns extra credit on top of the BM25
score. The rare terms are the ``RARE`` terms of highest inverse document frequency (all of them
in a short query: a long one says much that no single passage repeats), each weighed by it::

    coverage(c) = sum(idf(t) for t in rare if c holds t) / sum(idf(t) for t in rare)
    score(c)    = bm25(c) / best + weight * coverage(c) ** 2        (then rescaled, best = 1)

The square keeps partial matches cheap: the credit is for holding (nearly) all of them. A query
of more than ``MAX_QUERY_TERMS`` terms gets none: holding "everything asked" means something for
a question or a title, not for a paragraph (on the long CISI queries the credit cost hit@1). Which
chunk holds which term is asked of FTS5 itself (the chunks matching the term, intersected with the
candidates), or of the keyword channel's held postings of a word (which are FTS5's own), so
stemming and tokenization are exactly the index's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence

import apsw

from recalld.retrieval.term_stats import TermCounts

__all__ = ["coverage", "credit", "term_weights"]

#: Fewer terms than this leave nothing to coordinate.
MIN_TERMS = 2
#: How many of the query's rarest terms a chunk should hold.
RARE = 4
#: Longer queries are left to BM25's sum.
MAX_QUERY_TERMS = 8
#: A term held by more than this many chunks per candidate is looked up per candidate (a seek
#: costs as much as streaming 250-500 chunks: 99 us vs 0.19-0.44 us, measured side by side).
SEEK_RATIO = 400


def term_weights(counts: TermCounts, terms: Sequence[str]) -> dict[str, float]:
    """BM25's idf over the whole index of the RARE rarest quoted terms that something holds."""
    return _rare_terms(counts, terms)[0]


def _rare_terms(
    counts: TermCounts, terms: Sequence[str]
) -> tuple[dict[str, float], dict[str, int]]:
    """The RARE rarest terms' idf, and every term's document frequency."""
    total = counts.total()
    out: dict[str, float] = {}
    dfs: dict[str, int] = {}
    for term in terms:
        df = counts.df(term)
        if df:
            out[term] = math.log((total - df + 0.5) / (df + 0.5) + 1.0)
            dfs[term] = df
    rare = sorted(out, key=lambda t: (-out[t], t))[:RARE]
    return {t: out[t] for t in rare}, dfs


#: Which candidates hold a term, when known without FTS5 (None: ask FTS5).
Holder = Callable[[str, Sequence[int]], "set[int] | None"]


def coverage(
    conn: apsw.Connection,
    weights: Mapping[str, float],
    candidates: Sequence[int],
    dfs: Mapping[str, int] | None = None,
    held: Holder | None = None,
) -> dict[int, float]:
    """Per candidate chunk: the share of the terms' idf it holds (0 to 1)."""
    total = sum(weights.values())
    out = dict.fromkeys(candidates, 0.0)
    if total <= 0 or not candidates:
        return out
    for term, w in weights.items():
        if w <= 0:
            continue
        known = held(term, candidates) if held is not None else None
        if known is None:
            known = _holding(conn, term, candidates, (dfs or {}).get(term))
        for cid in known:
            out[cid] += w / total
    return out


def _holding(
    conn: apsw.Connection, term: str, candidates: Sequence[int], df: int | None
) -> set[int]:
    """The candidates that hold ``term``, asked of FTS5 the cheaper of two ways.

    The stream walks every chunk that holds the term and keeps the candidates inside SQLite:
    ``+rowid`` is an expression, not a constraint FTS5 could take, so the ``IN`` list is one
    lookup table probed in C (0.2-0.4 us a chunk, off the GIL; a Python loop over the rows was
    0.7-1.3 us and held it: 3.5x slower on 193 chat queries, the same sets). ``rowid IN (...)``
    as a constraint makes FTS5 seek once per candidate (60-100 us each), which wins only for a
    term held by hundreds of times more chunks than there are candidates (a million chunks).
    """
    if df is not None and df > SEEK_RATIO * len(candidates):
        marks = ",".join("?" * len(candidates))
        sql = f"SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({marks})"
        return {int(r[0]) for r in conn.execute(sql, (term, *candidates))}
    sql = (
        "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? "
        "AND +rowid IN (SELECT value FROM json_each(?))"
    )
    return {int(r[0]) for r in conn.execute(sql, (term, json.dumps(list(candidates))))}


def credit(
    counts: TermCounts,
    terms: Sequence[str],
    keyword: Mapping[int, float],
    weight: float,
    held: Holder | None = None,
) -> tuple[dict[int, float], dict[int, float]]:
    """Keyword scores (best = 1) with the coordination credit, and each candidate's coverage.

    ``keyword`` are the channel's mapped scores (recalld.retrieval.fusion.bm25_scores); unchanged
    when the weight is 0 or the query has fewer than MIN_TERMS or more than MAX_QUERY_TERMS terms.
    """
    if weight <= 0 or not MIN_TERMS <= len(terms) <= MAX_QUERY_TERMS or not keyword:
        return dict(keyword), {}
    weights, dfs = _rare_terms(counts, terms)
    cov = coverage(counts.conn, weights, list(keyword), dfs, held)
    raised = {cid: s + weight * cov[cid] ** 2 for cid, s in keyword.items()}
    best = max(raised.values())
    return {cid: max(s / best, 1e-3) for cid, s in raised.items()}, cov
