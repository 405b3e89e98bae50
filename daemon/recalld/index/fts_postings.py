"""FTS5's own numbers, read in bulk: the row count and token totals, each row's length, a
term's postings (row ids and per-column counts), and the tokens of some rows.

These are what FTS5's ``bm25()`` reads for every matching row; read once into arrays they let
the keyword channel score a common term's thousands of rows with numpy
(``recalld.retrieval.keyword_postings``). Everything comes from the FTS5 table itself
(``chunks_fts_data``'s averages record, ``chunks_fts_docsize``, an ``fts5vocab`` table, FTS5's
tokenizer), so the numbers are FTS5's, not a second tokenization that could disagree.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import apsw
import numpy as np
import numpy.typing as npt

__all__ = [
    "COLUMNS",
    "TOKENIZER",
    "Postings",
    "averages",
    "compact",
    "contained",
    "doc_lengths",
    "query_tokens",
    "row_tokens",
    "term_postings",
]

#: The FTS5 table's columns, in order (recalld.index.migrations).
COLUMNS = ("text", "context", "ident")
#: The table's ``tokenize`` option (recalld.index.migrations), as FTS5's tokenizer API takes it.
TOKENIZER = ("porter", ("unicode61", "remove_diacritics", "2"))
_VOCAB = "temp.recalld_vocab"
# fts5vocab names an instance's column; a name's length tells the three apart (faster in SQL
# than a CASE), and postings number them 0, 1, 2 as in COLUMNS
_NAME_LENGTHS = [len(c) for c in COLUMNS]
assert len(set(_NAME_LENGTHS)) == len(COLUMNS) and max(_NAME_LENGTHS) < 8
_COLUMN_OF_LENGTH = np.zeros(8, dtype=np.int64)
_COLUMN_OF_LENGTH[_NAME_LENGTHS] = np.arange(len(COLUMNS))

IdArray = npt.NDArray[np.int64]
RowIds = npt.NDArray[np.signedinteger[Any]]  # held: int32 while the ids fit
CountArray = npt.NDArray[np.unsignedinteger[Any]]  # held: uint8 while the counts fit
_INT32_MAX = np.iinfo(np.int32).max


def compact(ids: RowIds, counts: CountArray) -> tuple[RowIds, CountArray]:
    """The narrowest arrays that hold these values exactly: int32 ids and uint8 counts unless
    one is too big (7 bytes a posting instead of 14, so a budget holds twice the words)."""
    if len(ids) and ids.dtype != np.int32 and int(ids[-1]) <= _INT32_MAX and int(ids[0]) >= 0:
        ids = ids.astype(np.int32)
    if len(counts) and counts.dtype != np.uint8 and int(counts.max()) <= 255:
        counts = counts.astype(np.uint8)
    return ids, counts


def contained(ids: RowIds, wanted: RowIds) -> IdArray:
    """Positions in ``ids`` (ascending) of the values of ``wanted`` that it holds.

    A binary search per wanted value: ``np.isin`` would hash all of ``ids`` every time.
    """
    if not len(ids) or not len(wanted):
        return np.zeros(0, dtype=np.int64)
    at = np.searchsorted(ids, wanted)
    inside = at < len(ids)
    at = at[inside]
    found: IdArray = at[ids[at] == np.asarray(wanted)[inside]]
    return found


class Postings:
    """One term's rows (ascending ids) and its instances per column in each (n x 3)."""

    __slots__ = ("counts", "ids")

    def __init__(self, ids: RowIds, counts: CountArray) -> None:
        self.ids = ids
        self.counts = counts

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.counts.nbytes)

    def without(self, gone: IdArray) -> Postings:
        """These postings minus the rows ``gone`` (sorted)."""
        at = contained(self.ids, gone)
        if not len(at):
            return self
        return Postings(np.delete(self.ids, at), np.delete(self.counts, at, axis=0))

    def plus(self, ids: RowIds, counts: CountArray) -> Postings:
        """These postings with more rows (ids not already held)."""
        if not len(ids):
            return self
        all_ids = np.concatenate([self.ids, ids])  # the wider of the two types
        order = np.argsort(all_ids, kind="stable")
        return Postings(*compact(all_ids[order], np.concatenate([self.counts, counts])[order]))


def _varints(data: bytes) -> list[int]:
    """SQLite varints (FTS5's records), decoded one by one."""
    out: list[int] = []
    i = 0
    while i < len(data):
        value = 0
        for k in range(9):
            byte = data[i]
            i += 1
            if k == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(value)
    return out


def averages(conn: apsw.Connection) -> tuple[int, int]:
    """(rows, tokens in all columns) of the FTS5 index: what bm25()'s N and avgdl come from."""
    row = conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    values = _varints(bytes(row[0]))
    return values[0], sum(values[1 : 1 + len(COLUMNS)])


def _decode_sizes(data: bytes, sizes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Total tokens per docsize record (one varint per column), vectorised: ``data`` is the
    records back to back, ``sizes`` their lengths in bytes.

    Sizes are under 2^56, so no varint uses the 9-byte form and every byte under 0x80 ends one.
    """
    if not len(sizes):
        return np.zeros(0, dtype=np.int64)
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = raw < 0x80
    which: npt.NDArray[np.int64] = np.cumsum(ends) - ends  # the varint each byte belongs to
    end_pos = np.flatnonzero(ends)
    shift = 7 * (end_pos[which] - np.arange(len(raw)))
    values = np.bincount(which, weights=(raw & 0x7F).astype(np.float64) * np.exp2(shift))
    record_of_byte = np.repeat(np.arange(len(sizes)), sizes)
    totals = np.bincount(record_of_byte[end_pos], weights=values, minlength=len(sizes))
    return np.rint(totals).astype(np.int64)


def doc_lengths(
    conn: apsw.Connection, ids: Sequence[int] | None = None, after: int = -1
) -> tuple[IdArray, npt.NDArray[np.int64]]:
    """(row ids, tokens in all columns) from ``chunks_fts_docsize``: every row past ``after``,
    or just the rows ``ids`` (those that still exist).

    One aggregate row: the ids, the records in hex and their lengths as three strings (a
    Python row per chunk took 1.6 s at 1M rows, this 0.5 s).
    """
    if ids is not None:
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        where: str
        arg: str | int
        where, arg = "id IN (SELECT value FROM json_each(?))", _json_ids(ids)
    else:
        where, arg = "id > ?", int(after)
    row = conn.execute(
        "SELECT group_concat(id, ','), group_concat(hex(sz), ''), group_concat(length(sz), ',') "
        f"FROM (SELECT id, sz FROM chunks_fts_docsize WHERE {where} ORDER BY id)",
        (arg,),
    ).fetchone()
    if row is None or not row[0]:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    found = np.fromstring(str(row[0]), dtype=np.int64, sep=",")
    sizes = np.fromstring(str(row[2]), dtype=np.int64, sep=",")
    return found, _decode_sizes(bytes.fromhex(str(row[1])), sizes)


def _json_ids(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(int(i)) for i in ids) + "]"


def _vocab(conn: apsw.Connection) -> None:
    """The connection's own fts5vocab table over the index (a temporary table, made once)."""
    if conn.execute("SELECT 1 FROM temp.sqlite_master WHERE name = 'recalld_vocab'").fetchone():
        return
    # Readers run with query_only, which refuses even a temporary table; this one writes
    # nothing to the index file.
    row = conn.execute("PRAGMA query_only").fetchone()
    query_only = int(row[0]) if row else 0
    conn.execute("PRAGMA query_only = 0")
    try:
        conn.execute(f"CREATE VIRTUAL TABLE {_VOCAB} USING fts5vocab(main, chunks_fts, instance)")
    finally:
        conn.execute(f"PRAGMA query_only = {query_only}")


def term_postings(conn: apsw.Connection, token: str) -> Postings:
    """Every row holding the indexed token ``token`` and its count in each column.

    One ``fts5vocab`` scan of the token's instances; the ids come back as one string, since a
    Python row per instance would cost more than FTS5's own ranking of them.
    """
    _vocab(conn)
    row = conn.execute(
        f"SELECT group_concat(doc * 8 + length(col), ',') FROM {_VOCAB} WHERE term = ?", (token,)
    ).fetchone()
    text = str(row[0]) if row and row[0] else ""
    if not text:
        return Postings(np.zeros(0, dtype=np.int64), np.zeros((0, len(COLUMNS)), dtype=np.uint16))
    keys = np.fromstring(text, dtype=np.int64, sep=",")  # 5x faster than split()
    if len(keys) > 1 and bool((np.diff(keys) < 0).any()):
        keys = np.sort(keys)  # fts5vocab gives them in (doc, column) order; just in case
    # runs of equal keys are one (row, column) pair; runs of equal rows, one posting
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    per_pair = np.diff(np.append(starts, len(keys)))
    pair_keys = keys[starts]
    rows = pair_keys >> 3
    new_row = np.concatenate([[True], rows[1:] != rows[:-1]])
    ids = rows[new_row]
    counts = np.zeros((len(ids), len(COLUMNS)), dtype=np.uint16)
    counts[np.cumsum(new_row) - 1, _COLUMN_OF_LENGTH[pair_keys & 7]] = np.minimum(per_pair, 65535)
    return Postings(*compact(ids, counts))


def _tokenizer(conn: apsw.Connection) -> apsw.FTS5Tokenizer:
    name, args = TOKENIZER
    return conn.fts5_tokenizer(name, list(args))


def _token(item: object) -> str:
    # Without offsets or colocated tokens apsw gives the token itself; a tuple otherwise.
    return item if isinstance(item, str) else str(item[0])  # type: ignore[index]


def query_tokens(conn: apsw.Connection, text: str) -> list[str]:
    """The tokens FTS5 makes of ``text`` in a query (a quoted string's phrase)."""
    found = _tokenizer(conn)(
        text.encode("utf-8", "surrogatepass"),
        apsw.FTS5_TOKENIZE_QUERY,
        None,
        include_offsets=False,
        include_colocated=False,
    )
    return [_token(t) for t in found]


def row_tokens(
    conn: apsw.Connection, ids: Sequence[int]
) -> dict[int, list[collections.Counter[str]]]:
    """Per existing row of ``ids``, the counts of its tokens in each column, as FTS5 indexed
    them (its tokenizer on the ``chunks`` columns that the triggers copy into the index)."""
    if not ids:
        return {}
    tok = _tokenizer(conn)
    out: dict[int, list[collections.Counter[str]]] = {}
    cols = ", ".join(COLUMNS)
    for row in conn.execute(
        f"SELECT id, {cols} FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
        (_json_ids(ids),),
    ):
        per_col: list[collections.Counter[str]] = []
        for value in row[1:]:
            text = "" if value is None else str(value)
            found = tok(
                text.encode("utf-8", "surrogatepass"),
                apsw.FTS5_TOKENIZE_DOCUMENT,
                None,
                include_offsets=False,
                include_colocated=False,
            )
            per_col.append(collections.Counter(_token(t) for t in found))
        out[int(row[0])] = per_col
    return out
