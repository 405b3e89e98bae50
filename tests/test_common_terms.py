"""Query words too common to rank by are dropped from OR queries (search.max_term_df), and
read connections map the index (index.reader_mmap_mb). Real index files, keyword-only engine."""

from __future__ import annotations

from pathlib import Path

from conftest import make_engine, write
from recalld.index.store import Store
from recalld.retrieval.fts_query import build_match

NOTES = 1200  # the check is off under 1,000 chunks: small indexes keep every word


def _folder(memory: Path) -> None:
    for i in range(NOTES):
        rare = " quokka ledger" if i == 7 else ""
        write(memory / f"turn{i:04d}.md", f"Caroline said hello to Melanie in turn {i}{rare}.\n")


def test_a_word_in_every_chunk_is_dropped_from_or_queries_but_never_the_last(home: Path) -> None:
    _folder(home / "memory")
    engine = make_engine(home, None, search__max_term_df=0.2)
    try:
        engine.sync()
        res = engine.searcher.search(
            {"query": "Caroline quokka", "mode": "keyword", "explain": True}
        )
        match = res["explain"]["match"]
        assert "quokka" in match and "caroline" not in match.lower(), match
        assert [r["path"] for r in res["results"]] == [str(home / "memory" / "turn0007.md")]
        # Only common words: they are kept (a query never loses every term).
        res = engine.searcher.search(
            {"query": "Caroline Melanie", "mode": "keyword", "explain": True}
        )
        assert "caroline" in res["explain"]["match"].lower() and res["results"]
    finally:
        engine.close()
    off = make_engine(home, None, search__max_term_df=0.0)
    try:
        res = off.searcher.search({"query": "Caroline quokka", "mode": "keyword", "explain": True})
        assert "caroline" in res["explain"]["match"].lower()  # off: every word is searched
    finally:
        off.close()


def test_the_hook_drops_only_single_words_in_or_mode() -> None:
    def common(parts: tuple[str, ...]) -> bool:
        return parts[0] == "caroline"

    assert build_match("Caroline quokka", common=common) == '"quokka"'
    assert "Caroline" in str(build_match("Caroline quokka", mode="and", common=common))
    assert build_match("Caroline", common=common) == '"Caroline"'


def test_readers_map_the_index_file(home: Path) -> None:
    write(home / "memory" / "a.md", "a note\n")
    engine = make_engine(home, None, index__reader_mmap_mb=64)
    try:
        engine.sync()
        with engine.reader() as store:
            assert isinstance(store, Store)
            row = store.conn.execute("PRAGMA mmap_size").fetchone()
            assert row[0] == 64 * 1024 * 1024
    finally:
        engine.close()
