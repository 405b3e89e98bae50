"""FTS5's part of a keyword search (phrases, NEAR groups) read on a second connection and
thread while the words are summed from the held postings (issue 40's keyword tail)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import apsw
import pytest

from conftest import make_engine, write
from recalld.index.store import Store
from recalld.retrieval import keyword_scoring
from test_keyword_postings import _IDENT_NOTES, QUERIES, _fill, _synced, _terms

Read = Callable[[apsw.Connection], keyword_scoring.PhrasePart]
_IDENT_QUERIES = ["memory CD4+ T cells", "P38 kinase", "x_OR_y dogs", "CD4 p38 ERR_CONN_RESET"]


def _bm25_asked(conn: apsw.Connection, asked: list[str]) -> None:
    def trace(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
        if "bm25(chunks_fts" in sql:
            asked.append(sql)
        return True

    conn.exec_trace = trace


def test_phrases_read_beside_give_the_serial_answer_on_the_other_connection(home: Path) -> None:
    for i, text in enumerate(_IDENT_NOTES * 4):
        write(home / "memory" / f"id{i:02d}.md", text)
    with _synced(home, 80) as (store, cache), ThreadPoolExecutor(1) as pool:
        other = Store(store.path, readonly=True)
        mine: list[str] = []
        theirs: list[str] = []
        _bm25_asked(store.conn, mine)
        _bm25_asked(other.conn, theirs)

        def beside(read: Read) -> Future[keyword_scoring.PhrasePart]:
            return pool.submit(read, other.conn)

        try:
            grouped = 0
            for q in QUERIES + _IDENT_QUERIES:
                for weights in ((1.0, 1.5, 1.0), (1.0, 3.0, 0.0)):
                    terms = _terms(q, True)
                    mine.clear()
                    serial = keyword_scoring.search(store.conn, cache, terms, 24, weights)
                    asked_serial = list(mine)
                    mine.clear()
                    theirs.clear()
                    got = keyword_scoring.search(
                        store.conn, cache, terms, 24, weights, beside=beside
                    )
                    assert got == serial, q
                    # the phrase part moved to the other connection, nothing else did
                    assert mine == [] and len(theirs) == len(asked_serial), q
                    grouped += len(theirs)
            assert grouped >= 8  # the identifier queries had phrase parts to move
            # the feedback search's memo answers without another read, beside or not
            memo: keyword_scoring.PhraseParts = {}
            terms = _terms(_IDENT_QUERIES[-1], True)
            theirs.clear()
            mine.clear()
            keyword_scoring.search(store.conn, cache, terms, 24, (1, 1.5, 1))
            phrases = len(mine)
            theirs.clear()
            first = keyword_scoring.search(
                store.conn, cache, terms, 24, (1, 1.5, 1), None, memo, beside
            )
            again = keyword_scoring.search(
                store.conn, cache, terms, 24, (1, 1.5, 1), None, memo, beside
            )
            assert first == again and len(theirs) == phrases >= 2
        finally:
            store.conn.exec_trace = None
            other.close()


def test_a_failed_read_beside_is_the_searchs_error(home: Path) -> None:
    """An error on the other thread surfaces in the search (which then asks FTS5 alone), and
    the words' sums are not left running past it."""
    write(home / "memory" / "id.md", _IDENT_NOTES[0])
    with _synced(home, 10) as (store, cache), ThreadPoolExecutor(1) as pool:
        other = Store(store.path, readonly=True)
        other.close()

        def beside(read: Read) -> Future[keyword_scoring.PhrasePart]:
            return pool.submit(read, other.conn)

        with pytest.raises(apsw.Error):
            keyword_scoring.search(
                store.conn, cache, _terms("CD4 cells", True), 24, (1, 1.5, 1), beside=beside
            )


def test_the_daemons_searcher_reads_phrases_on_a_second_pooled_reader(home: Path) -> None:
    """Alone, a keyword search of an identifier reads its phrase part on another pooled
    connection; the answer is the one it gives with the overlap off (as in the search helper)."""
    for i, text in enumerate(_IDENT_NOTES * 3):
        write(home / "memory" / f"id{i:02d}.md", text)
    _fill(home / "memory", 30)
    engine = make_engine(home, None)
    try:
        engine.sync()
        answers = {}
        for overlap in (False, True, False):
            engine.overlap_channels = overlap
            for q in _IDENT_QUERIES:
                got = engine.searcher.search({"query": q, "mode": "keyword"})["results"]
                assert got, q
                assert answers.setdefault(q, got) == got, q
        assert len(engine.readers._all) >= 2  # the borrowed connection is pooled
    finally:
        engine.close()
