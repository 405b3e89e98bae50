"""Term counts are shared by an engine's searches and never outlive a write (term_stats.py).

Real index files and engines; the counts the searches keep are compared with fresh counts of
the index after every kind of write (a new note, an edit, a removal, a rebuild).
"""

from __future__ import annotations

from pathlib import Path

from conftest import make_engine, write
from recalld.engine import Engine
from recalld.retrieval.term_stats import TermCounts, TermStats

TERMS = ('"zephyr"', '"quokka"', '"ledger"')


def _kept(engine: Engine) -> dict[str | None, int]:
    """What the engine's searches would be told now, next to what the index holds."""
    with engine.reader() as store:
        shared = engine.term_stats.on(store.conn)
        fresh = TermCounts(store.conn)
        for expr in TERMS:
            assert shared.df(expr) == fresh.df(expr), expr
        assert shared.total() == fresh.total()
        return {None: shared.total(), **{t: shared.df(t) for t in TERMS}}


def _search(engine: Engine) -> None:
    engine.searcher.search({"query": "zephyr quokka ledger", "mode": "keyword"})


def test_counts_follow_every_write(home: Path) -> None:
    memory = home / "memory"
    for i in range(3):
        write(memory / f"z{i}.md", f"zephyr note {i}\n")
    engine = make_engine(home, None)
    try:
        engine.sync()
        _search(engine)  # counts kept
        assert _kept(engine)['"zephyr"'] == 3 and _kept(engine)['"quokka"'] == 0
        write(memory / "q.md", "quokka and zephyr\n")  # a new note
        engine.sync()
        assert _kept(engine)['"quokka"'] == 1 and _kept(engine)['"zephyr"'] == 4
        _search(engine)
        write(memory / "z0.md", "now a ledger note\n")  # an edit
        engine.sync()
        assert _kept(engine)['"zephyr"'] == 3 and _kept(engine)['"ledger"'] == 1
        _search(engine)
        (memory / "q.md").unlink()  # a removal
        engine.sync()
        assert _kept(engine) == {None: 3, '"zephyr"': 2, '"quokka"': 0, '"ledger"': 1}
        _search(engine)
        write(memory / "z1.md", "a quokka now\n")  # not synced: the rebuild reads it
        engine.reindex()  # a rebuild swaps the index under the readers
        assert _kept(engine) == {None: 3, '"zephyr"': 1, '"quokka"': 1, '"ledger"': 1}
    finally:
        engine.close()


def test_a_count_begun_before_a_write_is_not_kept(home: Path) -> None:
    write(home / "memory" / "a.md", "zephyr\n")
    engine = make_engine(home, None)
    try:
        engine.sync()
        stats = TermStats()
        with engine.reader() as store:
            counts = stats.on(store.conn)
            _, generation = stats._get('"zephyr"')
            stats.invalidate()  # a write lands while the count runs
            stats._keep('"zephyr"', 1, generation)
            assert stats._get('"zephyr"')[0] is None
            assert counts.df('"zephyr"') == 1  # counted again, and now kept
            assert stats._get('"zephyr"')[0] == 1
    finally:
        engine.close()


def test_the_cache_is_bounded(home: Path) -> None:
    import recalld.retrieval.term_stats as ts

    write(home / "memory" / "a.md", "zephyr\n")
    engine = make_engine(home, None)
    try:
        engine.sync()
        stats = TermStats()
        with engine.reader() as store:
            counts = stats.on(store.conn)
            for i in range(ts.MAX_REMEMBERED + 10):
                stats._keep(f'"w{i}"', 0, 0)
            assert len(stats._df) <= ts.MAX_REMEMBERED
            assert counts.df('"zephyr"') == 1
    finally:
        engine.close()


def test_an_engine_that_does_not_write_keeps_no_counts(home: Path) -> None:
    """Another process writes the index it reads: nothing would clear what it kept."""
    from conftest import make_config
    from recalld.embedding.registry import ProviderChoice

    memory = home / "memory"
    write(memory / "a.md", "zephyr\n")
    writer = make_engine(home, None)
    try:
        writer.sync()
        reader = Engine(make_config(home), writable=False, choice=ProviderChoice(None, "test"))
        try:
            _search(reader)
            write(memory / "b.md", "zephyr again\n")
            writer.sync()  # another engine writes: the reader is not told
            res = reader.searcher.search({"query": "zephyr", "mode": "keyword", "explain": True})
            assert len(res["results"]) == 2
            assert not reader.term_stats._df and reader.term_stats._total is None
        finally:
            reader.close()
    finally:
        writer.close()
