"""A keyword search's phrases (NEAR groups, identifier parts) are read by FTS5 on another
thread, on the search's own connection, while the words are summed (issue 40's keyword tail)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import apsw
import pytest

from conftest import make_engine, write
from recalld.retrieval import keyword_scoring
from test_keyword_postings import _IDENT_NOTES, QUERIES, _fill, _synced, _terms

_IDENT_QUERIES = ["memory CD4+ T cells", "P38 kinase", "x_OR_y dogs", "CD4 p38 ERR_CONN_RESET"]


def _threads(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The names of the threads that read the phrases and that summed the words."""
    seen: dict[str, list[str]] = {"read": [], "sums": []}
    read, sums = keyword_scoring._Phrases._read, keyword_scoring.top_rows

    def spy_read(self: Any) -> Any:
        seen["read"].append(threading.current_thread().name)
        return read(self)

    def spy_sums(*args: Any) -> Any:
        seen["sums"].append(threading.current_thread().name)
        return sums(*args)

    monkeypatch.setattr(keyword_scoring._Phrases, "_read", spy_read)
    monkeypatch.setattr(keyword_scoring, "top_rows", spy_sums)
    return seen


def test_phrases_read_beside_the_word_sums_give_the_serial_answer(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i, text in enumerate(_IDENT_NOTES * 4):
        write(home / "memory" / f"id{i:02d}.md", text)
    seen = _threads(monkeypatch)
    here = threading.current_thread().name
    with _synced(home, 80) as (store, cache), ThreadPoolExecutor(1, "beside") as pool:
        overlapped = 0
        for q in QUERIES + _IDENT_QUERIES:
            for weights in ((1.0, 1.5, 1.0), (1.0, 3.0, 0.0)):
                terms = _terms(q, True)
                serial = keyword_scoring.search(store.conn, cache, terms, 24, weights)
                seen["read"].clear()
                got = keyword_scoring.search(
                    store.conn, cache, terms, 24, weights, beside=pool.submit
                )
                assert got == serial, q
                assert set(seen["sums"]) == {here}, seen
                overlapped += seen["read"] == ["beside_0"]
        assert overlapped >= 8  # the identifier queries had phrases to read meanwhile
        # the feedback search's memo: the phrases are known, nothing to read or overlap
        memo: keyword_scoring.PhraseParts = {}
        terms = _terms(_IDENT_QUERIES[-1], True)
        args = (store.conn, cache, terms, 24, (1.0, 1.5, 1.0), None, memo, pool.submit)
        first = keyword_scoring.search(*args)
        seen["read"].clear()
        assert keyword_scoring.search(*args) == first
        assert seen["read"] == []


def test_a_failure_on_either_side_is_the_searchs_error(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An FTS5 error in the phrases, or one in the sums, surfaces in the search (which then
    asks FTS5 alone), and neither side is left waiting for the other."""
    write(home / "memory" / "id.md", _IDENT_NOTES[0])
    terms = _terms("CD4 cells", True)
    with _synced(home, 10) as (store, cache), ThreadPoolExecutor(1) as pool:

        def broken_read(self: Any) -> Any:
            raise apsw.SQLError("fts5: syntax error")

        with monkeypatch.context() as m:
            m.setattr(keyword_scoring._Phrases, "_read", broken_read)
            with pytest.raises(apsw.SQLError):
                keyword_scoring.search(
                    store.conn, cache, terms, 24, (1, 1.5, 1), beside=pool.submit
                )

        def broken_sums(*args: Any) -> Any:
            raise ValueError("sums")

        with monkeypatch.context() as m:
            m.setattr(keyword_scoring, "top_rows", broken_sums)
            with pytest.raises(ValueError):
                keyword_scoring.search(
                    store.conn, cache, terms, 24, (1, 1.5, 1), beside=pool.submit
                )
        # the pool's one thread is free again: a search after both gives the serial answer
        assert keyword_scoring.search(
            store.conn, cache, terms, 24, (1, 1.5, 1), beside=pool.submit
        ) == keyword_scoring.search(store.conn, cache, terms, 24, (1, 1.5, 1))


def test_the_daemons_searcher_reads_phrases_on_its_own_thread(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alone, a keyword search of an identifier reads its phrases on the phrase thread; the
    answer is the one it gives with the overlap off (as in the search helper)."""
    for i, text in enumerate(_IDENT_NOTES * 3):
        write(home / "memory" / f"id{i:02d}.md", text)
    _fill(home / "memory", 30)
    seen = _threads(monkeypatch)
    engine = make_engine(home, None)
    try:
        engine.sync()
        answers: dict[str, Any] = {}
        for overlap in (False, True, False):
            engine.overlap_channels = overlap
            seen["read"].clear()
            for q in _IDENT_QUERIES:
                got = engine.searcher.search({"query": q, "mode": "keyword"})["results"]
                assert got, q
                assert answers.setdefault(q, got) == got, q
            beside = [t for t in seen["read"] if t.startswith("recalld-phrases")]
            assert bool(beside) == overlap, seen
    finally:
        engine.close()
