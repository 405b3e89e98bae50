"""Retrieval beyond the anchor (issue 9): identifier parts (useState, ERR_CONN_RESET)
and CJK words found by keyword, and the migration that back-fills the identifier column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from conftest import make_engine, write
from recalld.engine import Engine
from recalld.index import migrations
from recalld.index.ident_tokens import ident_text, split_word
from recalld.index.store import FileRow, NewChunk, Store
from recalld.retrieval.fts_query import build_match
from retrieval_support import CODE_NOTES, paths_of
from retrieval_support import code_engine as code_engine  # a fixture

CJK_NOTES = {
    "zh/travel.md": "# 旅行\n\n我们下个月去北京看长城，然后去上海吃小笼包。\n",
    "ja/tokyo.md": "# 東京\n\n昨日は東京タワーに行って、夜は新宿でラーメンを食べた。\n",
    "en/plain.md": "# Plain\n\nAn English note about gardening and compost.\n",
}


def test_split_word_and_ident_text() -> None:
    assert split_word("useState") == ["use", "state"]
    assert split_word("HTTPServer") == ["http", "server"]
    assert split_word("sha512sum") == ["sha", "512", "sum"]
    assert split_word("alpine") == ["alpine"]
    assert split_word("Ärger") == ["ärger"]  # only ASCII case boundaries split
    text = ident_text("see ERR_CONN_RESET and useState in 東京タワー 猫")
    assert "errconnreset" in text.split()
    assert "use state" in text
    assert "東京 京タ タワ ワー" in text and "猫" in text.split()
    assert ident_text("plain English words only.") == ""


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("ConnReset", {"net/errors.md", "net/retry.md"}),
        ("conn_reset", {"net/errors.md", "net/retry.md"}),
        ("ErrConnReset", {"net/errors.md"}),
        ("use_state", {"web/hooks.md"}),
        ("recalld/search_pipe", {"src/layout.md"}),
    ],
)
def test_partial_identifiers_find_the_full_one(
    code_engine: Engine, home: Path, query: str, expected: set[str]
) -> None:
    res = code_engine.searcher.search({"query": query, "mode": "keyword", "min_score": 0})
    top = paths_of(res, home)[: len(expected)]
    assert set(top) == expected, (query, paths_of(res, home))


def test_partial_identifiers_can_be_turned_off(home: Path, local_embedder: Any) -> None:
    for rel, text in CODE_NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder, search__partial_identifiers=False)
    try:
        eng.sync()
        res = eng.searcher.search({"query": "ConnReset", "mode": "keyword", "min_score": 0})
        assert res["results"] == []  # no exact token: only the partial match finds it
    finally:
        eng.close()


def test_cjk_notes_have_a_keyword_channel(home: Path, local_embedder: Any) -> None:
    for rel, text in CJK_NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        for query, want in [
            ("长城", "zh/travel.md"),
            ("小笼包", "zh/travel.md"),
            ("東京タワー", "ja/tokyo.md"),
            ("ラーメン", "ja/tokyo.md"),
            ("新宿", "ja/tokyo.md"),
        ]:
            res = eng.searcher.search({"query": query, "mode": "keyword", "min_score": 0})
            assert paths_of(res, home)[:1] == [want], (query, res["results"])
        # Without the bigram column, a word inside a CJK sentence is not a token at all.
        with eng.reader() as store:
            plain = build_match("新宿", partial=False)
            assert plain is not None
            assert store.keyword_search("{text context} : (" + plain + ")", 5, None, None) == []
    finally:
        eng.close()


def test_migration_3_backfills_the_ident_column(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    conn = apsw.Connection(str(db))
    for number, sql in enumerate(migrations.MIGRATIONS[:2], start=1):
        with conn:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(
        "INSERT INTO files(path, source, size, mtime_ns, hash, lines, indexed_at) "
        "VALUES ('/m/a.md', 'memory', 1, 1, 'h', 1, 0)"
    )
    conn.execute(
        "INSERT INTO chunks(path, source, start_line, end_line, hash, text, context) "
        "VALUES ('/m/a.md', 'memory', 1, 1, 'c', 'we call getUserName here', 'A')"
    )
    conn.close()
    with Store(db) as store:
        assert migrations.current_version(store.conn) == len(migrations.MIGRATIONS)
        match = build_match("user_name", partial=True)
        assert match is not None
        assert [cid for cid, _ in store.keyword_search(match, 5, None, None)] == [1]
        row = store.conn.execute("SELECT ident FROM chunks").fetchone()
        assert row[0] == "get user name"
        # New chunks get the column from the store, and deleting them keeps FTS consistent.
        store.replace_file(
            FileRow("/m/a.md", "memory", 1, 2, "h2", 1),
            [NewChunk(1, 1, "now setUserName", "c2")],
            None,
        )
        assert store.conn.execute("SELECT ident FROM chunks").fetchall() == [("set user name",)]
        store.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
