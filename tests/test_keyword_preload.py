"""The index's common words read ahead (keyword_preload.py): held before any search asks,
within their share of the budget, exact after writes, due again after a swap or a flood, and
started by a real daemon once it is idle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import make_engine, write
from daemon_process import DaemonProcess, wait_for
from recalld.index import fts_postings
from recalld.retrieval import keyword_postings, keyword_preload
from test_keyword_postings import _check_all, _fill, _note


def test_common_words_are_held_before_use_and_stay_exact(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_preload, "MIN_ROWS", 30)  # a small index: "common" is 30 rows
    memory = home / "memory"
    rng = _fill(memory, 120)
    write(memory / "rare.md", "A zanzibar xylophone.\n")
    engine = make_engine(home, None)
    cache = engine.postings
    assert cache is not None and cache.preload_due
    try:
        engine.sync()
        with engine.reader() as store:
            (name,) = fts_postings.query_tokens(store.conn, "Caroline")
            docs = len(fts_postings.term_postings(store.conn, name).ids)
        assert docs >= 30
        done = keyword_preload.preload(cache, engine.reader)
        assert done > 0 and cache.stats["preloaded"] == done and not cache.preload_due
        assert cache.held_ids(name) is not None  # in every few notes: read ahead
        assert cache.held_ids("zanzibar") is None  # in one: left for its first use
        assert keyword_preload.preload(cache, engine.reader) == 0  # done for this index
        fetched = cache.stats["fetched"]
        engine.searcher.search({"query": "When did Caroline go hiking", "mode": "keyword"})
        assert cache.stats["fetched"] - fetched <= 2  # "carolin" (and "the") came held
        write(memory / "n003.md", _note(rng, 999))  # an edit: the read-ahead words catch up
        write(memory / "new.md", "Caroline and Melanie: hiking, dogs, the ledger.\n")
        engine.sync()
        with engine.reader() as store:
            assert _check_all(store, cache) > 0
            assert np.array_equal(
                cache.held_ids(name), fts_postings.term_postings(store.conn, name).ids
            )
        engine.reindex()  # the index file is swapped: everything is forgotten, due again
        assert cache.preload_due
        assert keyword_preload.preload(cache, engine.reader) > 0
        with engine.reader() as store:
            assert _check_all(store, cache) > 0
        status = engine.status()["keyword_postings"]
        assert status["preloaded"] > done and status["preloading"] is False
        assert status["preload_failed"] == 0
    finally:
        engine.close()


def test_read_ahead_keeps_to_its_share_and_goes_first(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_preload, "MIN_ROWS", 10)
    _fill(home / "memory", 80)
    write(home / "memory" / "rare.md", "A zanzibar xylophone.\n")
    engine = make_engine(home, None)
    cache = engine.postings
    assert cache is not None
    cache.budget = 6_000  # a few words
    try:
        engine.sync()
        with engine.reader() as store:
            cache.snapshot(store.conn, ["zanzibar"])  # searched before the read-ahead
        done = keyword_preload.preload(cache, engine.reader)
        assert done > 0
        ahead = set(cache._terms) - {"zanzibar"}
        assert cache._bytes <= cache.budget * keyword_postings.PRELOAD_SHARE
        with engine.reader() as store:
            words = fts_postings.query_tokens(store.conn, "quokka zephyr billing invoice")
            words = [w for w in words if w not in cache._terms]
            need = sum(fts_postings.term_postings(store.conn, w).nbytes for w in words)
            cache.budget = cache._bytes + need - 1  # the searched words need some of the room
            cache.snapshot(store.conn, words)  # the searched words stay, read-ahead ones go
            assert all(cache.held_ids(w) is not None for w in words)
            assert cache.stats["evicted"] > 0 and not ahead <= set(cache._terms)
            assert cache.held_ids("zanzibar") is not None  # used by a search: kept longer
            assert _check_all(store, cache) > 0
    finally:
        engine.close()


def test_reading_ahead_stops_when_the_index_is_replaced_or_flooded(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_preload, "MIN_ROWS", 10)
    monkeypatch.setattr(keyword_postings, "MAX_PENDING", 30)
    memory = home / "memory"
    rng = _fill(memory, 60)
    engine = make_engine(home, None)
    cache = engine.postings
    assert cache is not None
    try:
        engine.sync()
        with engine.reader() as store:
            begun = cache.begin_preload(store.conn)
            assert begun is not None
            generation, lengths = begun
            words = keyword_preload.frequent_words(store.conn, lengths)
            assert len(words) > 3
            assert cache.preload(store.conn, words[0], generation)
            cache.reset()  # a swap meanwhile: the rest of this run is of the old index
            assert not cache.preload(store.conn, words[1], generation)
            generation, _ = cache.begin_preload(store.conn) or (-1, None)
            read = fts_postings.term_postings

            def swapped_while_reading(conn: object, token: str) -> fts_postings.Postings:
                cache.reset()
                return read(store.conn, token)

            monkeypatch.setattr(fts_postings, "term_postings", swapped_while_reading)
            assert not cache.preload(store.conn, words[1], generation)
            monkeypatch.setattr(fts_postings, "term_postings", read)
            cache.end_preload(generation)
            assert cache.preload_due and cache.held_ids(words[0]) is None
        assert keyword_preload.preload(cache, engine.reader) > 0
        assert not cache.preload_due
        for i in range(20):  # a flood of changes: forgotten at the next use, due again
            write(memory / f"n{i:03d}.md", _note(rng, 700 + i))
        engine.sync()
        assert cache.preload_due
        assert keyword_preload.preload(cache, engine.reader) > 0
        with engine.reader() as store:
            assert _check_all(store, cache) > 0
        assert cache.stats["forgotten"] >= 1
    finally:
        engine.close()


def test_a_failing_read_ahead_is_counted_and_searches_go_on(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_preload, "MIN_ROWS", 10)
    _fill(home / "memory", 40)
    engine = make_engine(home, None)
    assert engine.preloader is not None
    try:
        engine.sync()

        def broken(*_: object) -> list[str]:
            raise OSError("disk read failed")

        monkeypatch.setattr(keyword_preload, "frequent_words", broken)
        engine.preloader.start()
        wait_for(lambda: not engine.preloader.running if engine.preloader else True)
        status = engine.status()["keyword_postings"]
        assert status["preload_failed"] == 1 and status["preloading"] is False
        assert engine.searcher.search({"query": "Caroline hiking", "mode": "keyword"})["results"]
    finally:
        engine.close()


@pytest.mark.slow
def test_an_idle_daemon_reads_the_common_words_ahead(home: Path) -> None:
    (home / "config.toml").write_text(
        '[sessions]\npaths = []\n[embedding]\nprovider = "none"\n[sync]\ndebounce_s = 0.2\n'
    )
    count = keyword_preload.MIN_ROWS + 200  # one chunk each, "carolin" in every one
    for i in range(count):
        write(home / "memory" / f"t{i:04d}.md", f"Caroline said note {i} about the harbour.\n")
    d = DaemonProcess(home).start()
    try:
        d.wait_idle(timeout=120)
        with d.client() as c:
            wait_for(lambda: c.status()["keyword_postings"]["preloaded"] > 0, timeout=60)
            wait_for(lambda: not c.status()["keyword_postings"]["preloading"], timeout=60)
            status = c.status()["keyword_postings"]
            assert status["words"] >= status["preloaded"] > 0
            assert status["preload_failed"] == 0
            hits = c.search("Caroline harbour", mode="keyword", max_results=5)["results"]
            assert len(hits) == 5
            write(home / "memory" / "t0000.md", "Caroline moved the lighthouse.\n")
            wait_for(
                lambda: any(
                    r["path"].endswith("t0000.md")
                    for r in c.search("lighthouse", mode="keyword")["results"]
                )
            )
            top = c.search("Caroline lighthouse", mode="keyword")["results"][0]
            assert top["path"].endswith("t0000.md")
        assert "read ahead the postings" in (home / "daemon.log").read_text()
    finally:
        d.stop()
