"""FTS5's BM25 for single-word terms, computed with numpy from held postings.

FTS5's ``bm25()`` is a sum over the query's phrases (fts5_aux.c):

    score = sum_i idf_i * f_i * (k1 + 1) / (f_i + k1 * (1 - b + b * len / avgdl))

with ``f_i`` the phrase's instances in the row weighted by column, ``len`` the row's tokens
in all columns, ``idf_i = log((N - n_i + 0.5) / (n_i + 0.5))`` (at least 1e-6), ``n_i`` the rows
holding the phrase, ``N`` and ``avgdl`` from FTS5's totals. A quoted single word's part of the
sum needs only its postings and the row lengths (``recalld.retrieval.keyword_postings``), so
those terms are scored here; phrases, ``NEAR`` groups and prefixes (identifier variants) are
left to FTS5, whose scores for just those phrases are the rest of the same sum. Rows are
ranked by the total, best first, ties by id: the ranking FTS5 gives, without its per-row cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait

import apsw
import numpy as np
import numpy.typing as npt

from recalld.index.fts_postings import RowIds, contained, query_tokens
from recalld.retrieval.keyword_postings import PostingsCache, Snapshot
from recalld.retrieval.keyword_words import (
    PhraseRows,
    WordPart,
    scores_at,
    top_rows,
    word_part,
)

__all__ = [
    "Beside",
    "PhrasePart",
    "PhraseParts",
    "Term",
    "held_count",
    "holder",
    "match_of",
    "scores_of",
    "search",
]

#: A term: (FTS5 expression, restricted to the text and context columns).
Term = tuple[str, bool]
Hits = list[tuple[int, float]]
#: FTS5's part of the sum for some phrases: (row ids, their part).
PhrasePart = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]
#: FTS5's parts per phrase expression, kept for one search.
PhraseParts = dict[str, PhraseRows]
#: Runs a search's phrase reads on another thread (an executor's ``submit``).
Beside = Callable[[Callable[[], PhraseRows]], "Future[PhraseRows]"]
_TEXT_COLUMNS = "{text context}"


def match_of(terms: Sequence[Term]) -> str:
    """The FTS5 MATCH expression ORing ``terms`` (restricted ones under one column filter)."""
    inside = [e for e, restricted in terms if restricted]
    outside = [e for e, restricted in terms if not restricted]
    parts = [f"{_TEXT_COLUMNS} : (" + " OR ".join(inside) + ")"] if inside else []
    return " OR ".join(parts + outside)


def _word(conn: apsw.Connection, expr: str) -> str | None:
    """The one indexed token of a quoted single word (``"Deborah"``), else None."""
    if len(expr) < 3 or expr[0] != '"' or expr[-1] != '"':
        return None
    inner = expr[1:-1]
    if '"' in inner.replace('""', ""):
        return None  # more than one string
    tokens = query_tokens(conn, inner.replace('""', '"'))
    return tokens[0] if len(tokens) == 1 else None


def _held_rows(conn: apsw.Connection, cache: PostingsCache) -> Callable[[str], RowIds | None]:
    """The rows holding a quoted word, from the held postings (None: not held and current)."""

    def rows(term: str) -> RowIds | None:
        token = _word(conn, term)
        return cache.held_ids(token) if token is not None else None

    return rows


def _alternatives(expr: str) -> list[str] | None:
    """The parts that a parenthesized OR (``fts_query``'s identifier group) joins, else None.

    Quote-aware (an FTS5 string doubles its quotes; ``"x OR y"`` is one part) and
    top-level only (``NEAR(...)`` is one part)."""
    if len(expr) < 2 or expr[0] != "(" or expr[-1] != ")":
        return None
    parts: list[str] = []
    depth, quoted, start, i = 0, False, 1, 1
    while i < len(expr) - 1:
        c = expr[i]
        if quoted:
            if c == '"' and expr[i + 1] == '"':
                i += 1  # a doubled quote is one character of the string
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "()":
            depth += 1 if c == "(" else -1
            if depth < 0:
                return None  # the first parenthesis closes before the end: not one group
        elif depth == 0 and expr.startswith(" OR ", i):
            parts.append(expr[start:i])
            start = i = i + 4
            continue
        i += 1
    if quoted or depth != 0:
        return None
    return [*parts, expr[start:-1]]


def _group_words(
    conn: apsw.Connection, expr: str, restricted: bool
) -> tuple[list[tuple[str, bool]], list[Term]] | None:
    """An identifier group's single words (scored from held postings) and its other parts.

    ``("CD4" OR {text context} : "CD4" OR NEAR("cd" "4", 3))``: bm25 is a sum over phrases, so
    the two ``"CD4"`` can be scored as words while FTS5 scores only the ``NEAR``. Left whole
    (None) when no part is a word. At 1M chunks FTS5's bm25 of a group's ~6k ``cd4`` rows cost
    ~13 ms (its per-row work), their postings ~1 ms (3.8 ms with the phrase left to FTS5)."""
    parts = _alternatives(expr)
    if parts is None:
        return None
    words: list[tuple[str, bool]] = []
    rest: list[Term] = []
    for part in parts:
        inner = part.removeprefix(_TEXT_COLUMNS + " : ")
        token = _word(conn, inner)
        if token is None:
            rest.append((part, restricted))
        else:
            words.append((token, restricted or inner != part))
    return (words, rest) if words else None


def holder(
    conn: apsw.Connection, cache: PostingsCache
) -> Callable[[str, Sequence[int]], set[int] | None]:
    """Which candidates hold a quoted word, from the held postings (None: ask FTS5)."""
    rows_of = _held_rows(conn, cache)

    def holding(term: str, candidates: Sequence[int]) -> set[int] | None:
        ids = rows_of(term)
        if ids is None:
            return None
        return {int(ids[i]) for i in contained(ids, np.asarray(candidates, dtype=np.int64))}

    return holding


def held_count(conn: apsw.Connection, cache: PostingsCache) -> Callable[[str], int | None]:
    """How many rows hold a quoted word, from the held postings (None: count it in FTS5)."""
    rows_of = _held_rows(conn, cache)

    def count(term: str) -> int | None:
        ids = rows_of(term)
        return None if ids is None else len(ids)

    return count


def search(
    conn: apsw.Connection,
    cache: PostingsCache,
    terms: Sequence[Term],
    limit: int,
    weights: tuple[float, float, float],
    allowed: npt.NDArray[np.int64] | None = None,
    phrases: PhraseParts | None = None,
    beside: Beside | None = None,
) -> Hits | None:
    """(chunk id, bm25) best first, as ``Store.keyword_search`` gives them (FTS5's sign:
    lower is better), or None when no term is a single word (FTS5 alone is as fast).
    ``allowed``: only these chunk ids (a search's filters). ``phrases``: FTS5's parts already
    read by this search (the feedback search repeats the first one's phrases), filled here.
    ``beside``: reads FTS5's phrases on another thread while the words are summed here."""
    scored = _word_parts(conn, cache, terms, weights)
    if scored is None:
        return None
    snap, parts, rest = scored
    if snap.rows <= 0:
        return []
    if not rest:
        return top_rows(snap, parts, None, limit, allowed)
    fts = _Phrases(conn, rest, weights, {} if phrases is None else phrases)
    if beside is None or fts.known:
        return top_rows(snap, parts, fts.rows, limit, allowed)
    # FTS5 (C, off the GIL) reads the phrases on the other thread, on the search's connection,
    # which nothing else uses meanwhile (its memory map of the index is the warm one); the
    # words are summed here, where their arrays' memory is warm too.
    reading = beside(fts.rows)
    try:
        return top_rows(snap, parts, reading.result, limit, allowed)
    finally:
        wait([reading])  # the connection is the search's again once the read is over


def scores_of(
    conn: apsw.Connection,
    cache: PostingsCache,
    terms: Sequence[Term],
    weights: tuple[float, float, float],
    ids: npt.NDArray[np.int64],
    phrases: PhraseParts,
) -> Hits | None:
    """The rows of ``ids`` that ``terms`` match, with the bm25 :func:`search` would give them
    (FTS5's sign), or None when no term is a single word. ``phrases``: FTS5's parts the search
    read already (read here otherwise, for every row they match)."""
    scored = _word_parts(conn, cache, terms, weights)
    if scored is None:
        return None
    snap, parts, rest = scored
    if snap.rows <= 0:
        return []
    read = _Phrases(conn, rest, weights, phrases).rows() if rest else ()
    return scores_at(snap, parts, read, ids)


def _word_parts(
    conn: apsw.Connection,
    cache: PostingsCache,
    terms: Sequence[Term],
    weights: tuple[float, float, float],
) -> tuple[Snapshot, list[WordPart], list[Term]] | None:
    """The held postings' snapshot, the single words' parts and the terms left to FTS5; None
    when no term is a single word."""
    words, rest = _split(conn, terms)
    if not words:
        return None
    snap = cache.snapshot(conn, [t for t, _ in words])
    if snap.rows <= 0:  # an empty index: the callers answer nothing
        return snap, [], rest
    parts = [word_part(snap, token, restricted, weights) for token, restricted in words]
    return snap, parts, rest


def _split(
    conn: apsw.Connection, terms: Sequence[Term]
) -> tuple[list[tuple[str, bool]], list[Term]]:
    """``terms`` as single words (scored from held postings) and the rest (FTS5's)."""
    words: list[tuple[str, bool]] = []
    rest: list[Term] = []
    for expr, restricted in terms:
        token = _word(conn, expr)
        if token is not None:
            words.append((token, restricted))
            continue
        group = _group_words(conn, expr, restricted)
        if group is None:
            rest.append((expr, restricted))
        else:
            words.extend(group[0])
            rest.extend(group[1])
    return words, rest


class _Phrases:
    """FTS5's own bm25 of the other terms (phrases, NEAR, prefixes) for every row they match,
    one statement per phrase.

    The costliest step of a search at scale: a NEAR group of prefixes walks every token they
    expand to (7-16 ms at 1M chunks). One statement per phrase gives the same parts (bm25 is a
    sum over phrases, each one's idf its own) for less: FTS5 evaluates an OR of NEAR groups
    row by row where each alone skips ahead (``R2D2 ... miRNA ... Dcr2 ... dsRNA``'s four: 15.8
    ms in one statement, 10.5 in four). A prose query's feedback search asks for the same
    phrases again: ``memo`` keeps the first answer for the second."""

    def __init__(
        self,
        conn: apsw.Connection,
        rest: Sequence[Term],
        weights: tuple[float, float, float],
        memo: PhraseParts,
    ) -> None:
        self._conn = conn
        self._w = ", ".join(repr(float(x)) for x in weights)
        self._matches = [match_of([one]) for term in rest for one in _phrases_of(term)]
        self._key = f"{self._w}|{match_of(rest)}"
        self._memo = memo

    @property
    def known(self) -> bool:
        """Read already by this search (nothing to overlap)."""
        return self._key in self._memo

    def rows(self) -> PhraseRows:
        """Each phrase's (row ids, part)."""
        if self._key not in self._memo:
            self._memo[self._key] = self._read()
        return self._memo[self._key]

    def _read(self) -> PhraseRows:
        found: list[PhrasePart] = []
        sql = f"SELECT rowid, bm25(chunks_fts, {self._w}) FROM chunks_fts WHERE chunks_fts MATCH ?"
        for match in self._matches:
            rows = self._conn.execute(sql, (match,)).fetchall()
            if rows:
                ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                part = -np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
                found.append((ids, part))
        return found


def _phrases_of(term: Term) -> list[Term]:
    """``term``'s top-level alternatives (an identifier group's phrases), else itself."""
    expr, restricted = term
    parts = _alternatives(expr)
    return [(term[0], restricted)] if parts is None else [(p, restricted) for p in parts]
