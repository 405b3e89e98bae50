"""FTS5's bm25 of a search's phrases, from their instances and the sizes the channel already holds.

The phrase part of a keyword search (identifier variants: ``"r 2 d 2"``, ``NEAR("mi" "rna"*, 3)``,
``"list unit files"``) was the 1M tail once common words were pruned (``keyword_words``):
FTS5's ``bm25()`` counts, per statement, the rows of every phrase of the query alone (for a
``NEAR("dif"* "2", 3)`` that matched 49 rows it walked the 42k rows of ``2``: 9.4 ms against
4.6 ms for the rows alone) and reads each row's size record. Here FTS5 still finds the rows
and each phrase's instances (its own matching, column filters and ``NEAR``), through an
auxiliary function that only counts them; the phrase's row counts come from the engine's term
counts (held postings for a word, a kept count otherwise, both exact until the next write) and
the row sizes from the held row lengths. The sum is fts5_aux.c's, term for term:

    score = sum_i idf_i * (f_i * (k1 + 1)) / (f_i + k1 * (1 - b + b * D / avgdl))

with ``f_i`` phrase i's instances in the row weighted by column. Anything this cannot account
for (a row written after the lengths were read, phrases numbered otherwise than parsed) is
left to ``bm25()`` itself.
"""

from __future__ import annotations

import math
import re
import weakref
from array import array
from collections.abc import Sequence

import apsw
import numpy as np
import numpy.typing as npt

from recalld.retrieval.keyword_postings import Snapshot
from recalld.retrieval.keyword_words import K1, B
from recalld.retrieval.term_stats import TermCounts

__all__ = ["AUX", "phrase_exprs", "scored"]

#: The auxiliary function's name (registered on each connection that asks).
AUX = "recalld_phrase_freqs"
COLUMNS = "{text context}"
#: A quoted FTS5 string (quotes doubled inside) and its prefix star.
_STRING = re.compile(r'"((?:[^"]|"")*)"(\*?)')
_registered: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()
Part = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]


def _freqs(api: apsw.FTS5ExtensionApi, *weights: apsw.SQLiteValue) -> bytes:
    """Per phrase of the query, its instances in this row weighted by column (packed)."""
    w0, w1, w2 = (float(w) for w in weights)  # type: ignore[arg-type]  # the SQL passes floats
    out = array("d")
    for i in range(api.phrase_count):
        text, context, ident = api.phrase_locations(i)
        out.append(len(text) * w0 + len(context) * w1 + len(ident) * w2)
    return out.tobytes()


def phrase_exprs(rest: Sequence[tuple[str, bool]]) -> list[str]:
    """An FTS5 expression for each phrase of ``match_of(rest)`` alone, with its column filter,
    in FTS5's numbering (the order the phrases are written in; restricted terms first)."""
    ordered = [e for e, r in rest if r] + [e for e, r in rest if not r]
    restricted = [r for _, r in rest if r] + [r for _, r in rest if not r]
    out: list[str] = []
    for expr, whole in zip(ordered, restricted, strict=True):
        for m in _STRING.finditer(expr):
            filtered = whole or expr[: m.start()].rstrip().endswith(COLUMNS + " :")
            out.append((f"{COLUMNS} : " if filtered else "") + m.group(0))
    return out


def scored(
    conn: apsw.Connection,
    terms: Sequence[tuple[str, Sequence[str]]],
    weights: tuple[float, float, float],
    snap: Snapshot,
    counts: TermCounts,
) -> Part | None:
    """(row ids, their phrase part) of the rows the terms find; None: left to ``bm25()``.

    ``terms``: each term's MATCH expression and its phrases (``phrase_exprs``). One statement
    a term: bm25 is a sum over phrases, so the terms' parts add up, and each row's callback
    then reads only its own term's phrases (a row of one NEAR group of seven phrases cost
    three times as much in one statement)."""
    if conn not in _registered:
        conn.register_fts5_function(AUX, _freqs)
        _registered.add(conn)
    parts: list[Part] = []
    for match, phrases in terms:
        part = _term_part(conn, match, phrases, weights, snap, counts)
        if part is None:
            return None
        if len(part[0]):
            parts.append(part)
    if len(parts) <= 1:
        return parts[0] if parts else (np.zeros(0, np.int64), np.zeros(0, np.float64))
    ids, at = np.unique(np.concatenate([p[0] for p in parts]), return_inverse=True)
    sums = np.bincount(at, weights=np.concatenate([p[1] for p in parts]))
    return ids.astype(np.int64), sums.astype(np.float64)


def _term_part(
    conn: apsw.Connection,
    match: str,
    phrases: Sequence[str],
    weights: tuple[float, float, float],
    snap: Snapshot,
    counts: TermCounts,
) -> Part | None:
    w = ", ".join(repr(float(x)) for x in weights)
    rows = conn.execute(
        f"SELECT rowid, {AUX}(chunks_fts, {w}) FROM chunks_fts WHERE chunks_fts MATCH ?",
        (match,),
    ).fetchall()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    if not len(ids):
        return ids, np.zeros(0, dtype=np.float64)
    blob = b"".join(r[1] for r in rows if isinstance(r[1], bytes))
    if len(blob) != 8 * len(phrases) * len(ids) or int(ids.max()) >= len(snap.lengths):
        return None  # phrases numbered otherwise than parsed, or a row newer than the lengths
    freqs = np.frombuffer(blob, dtype=np.float64).reshape(len(ids), len(phrases))
    norm = K1 * (1.0 - B + B * snap.lengths[ids] / snap.avgdl)
    score = np.zeros(len(ids), dtype=np.float64)
    for i, expr in enumerate(phrases):
        f = freqs[:, i]
        score += _idf(snap.rows, counts.df(expr)) * (f * (K1 + 1.0)) / (f + norm)
    return ids, score


def _idf(rows: int, hits: int) -> float:
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > 0.0 else 1e-6
