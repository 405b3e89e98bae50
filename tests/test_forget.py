"""``forget``: cited lines leave the note; paths, globs, sessions and projects are kept out of
the index as they grow, across restarts and rebuilds, until undone; and the forgotten words leave
the bytes of every file under the home."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, wait_for
from recalld_client import BadRequest, NotFound


def scan_home(home: Path, token: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Files under ``home`` (but not under ``skip`` folders) whose bytes hold ``token``."""
    found = []
    for path in home.rglob("*"):
        if not path.is_file() or any(part in skip for part in path.relative_to(home).parts):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if token.encode() in data or token.lower().encode() in data:
            found.append(str(path))
    return found


def keyword(c: Any, token: str) -> list[dict[str, Any]]:
    return list(c.search(token, mode="keyword")["results"])


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", *args],
        env=env_for(home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_forget_lines_leaves_no_byte_of_them(home: Path) -> None:
    """With the local model: the entry's chunk, FTS entries, vector and cached embedding go."""
    (home / "config.toml").write_text("[sessions]\npaths = []\n")
    token = "Zqxforgetme7731"
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        with daemon.client() as c:
            keep = c.remember("the build uses ninja and ccache", note="log.md")
            gone = c.remember(f"the wifi password hint is {token} on the fridge", note="log.md")
            after = c.remember("standup moved to ten", note="log.md")
            wait_for(lambda: not c.status()["vectors"]["vectors_pending"], timeout=60)
            assert keyword(c, token)
            counts = c.status()["counts"]
            with pytest.raises(BadRequest, match="not a passage recalld cited"):
                c.forget(f"{gone['path']}#L{gone['start_line']}-L{gone['end_line'] + 2}")
            note = Path(gone["path"])
            original = note.read_text()
            note.write_text("# inserted by an editor\n" + original)  # lines move down by one
            with pytest.raises(BadRequest, match=r"moved since|changed since"):
                c.forget(gone["citation"])  # before the watcher's debounce: index is older
            note.write_text(original)
            daemon.wait_idle()
        out = cli(home, "forget", gone["citation"], "--json")
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        assert res["forgotten"] == "lines" and res["lines_removed"] == 2
        assert res["wal_truncated"] is True and res["cache_entries_removed"] >= 1
        text = Path(gone["path"]).read_text()
        assert token not in text and "ninja" in text and "standup moved to ten" in text
        with daemon.client() as c:
            assert keyword(c, token) == []
            assert c.search("wifi password fridge", mode="vector", min_score=0.0)["results"]
            for hit in c.search("wifi password hint fridge", min_score=0.0)["results"]:
                assert token not in hit["snippet"]
            assert keyword(c, "standup")  # the lines after it moved up and are indexed
            now = c.status()["counts"]
            assert now["chunks"] == counts["chunks"] - 1
            assert now["cached_embeddings"] == counts["cached_embeddings"] - 1
            assert (
                keep["citation"]
                == c.remember("the build uses ninja and ccache", note="log.md")["citation"]
            )
            assert after["start_line"] > gone["start_line"]
        assert scan_home(home, token) == []
    finally:
        daemon.stop()
    assert scan_home(home, token) == []  # the saved vectors and a clean close add nothing


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_forget_paths_and_globs_hold_across_edits_restarts_and_rebuilds(home: Path) -> None:
    (home / "config.toml").write_text(
        '[sessions]\npaths = []\n[embedding]\nprovider = "none"\n[sync]\ndebounce_s = 0.2\n'
    )
    a = write(home / "memory" / "old" / "a.md", "# A\n\nalpha note zqxalpha1\n")
    b = write(home / "memory" / "old" / "b.md", "# B\n\nbeta note zqxbeta1\n")
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        with daemon.client() as c:
            assert keyword(c, "zqxalpha1") and keyword(c, "zqxbeta1")
            res = c.forget("old/a.md")
            assert (res["forgotten"], res["files_removed"]) == ("path", 1)
            assert keyword(c, "zqxalpha1") == [] and a.exists()
            with pytest.raises(NotFound, match="forgotten"):
                c.get(str(a))
            with a.open("a") as fh:  # the file grows: the new text stays out too
                fh.write("more zqxalpha2\n")
            time.sleep(1.0)
            c.sync(wait=True)
            assert keyword(c, "zqxalpha2") == []
            assert [s["value"] for s in c.forgotten()] == [str(a)]
            assert c.status()["forgotten"] == 1
            c.reindex(wait=True)
            assert keyword(c, "zqxalpha1") == [] and keyword(c, "zqxbeta1")
            glob = c.forget(str(home / "memory" / "old" / "*.md"))
            assert glob["forgotten"] == "glob" and glob["files_removed"] == 1
            assert keyword(c, "zqxbeta1") == []
        assert scan_home(home, "zqxalpha", skip=("memory",)) == []
        assert scan_home(home, "zqxbeta1", skip=("memory",)) == []
    finally:
        daemon.stop()
    daemon = DaemonProcess(home).start()  # a restart keeps both out
    try:
        daemon.wait_idle()
        with daemon.client() as c:
            assert keyword(c, "zqxalpha1") == [] and keyword(c, "zqxbeta1") == []
            listed = cli(home, "forget", "--list")
            assert "glob" in listed.stdout and str(a) in listed.stdout
            c.forget("old/a.md", undo=True)  # still under the glob: stays out
            daemon.wait_idle()
            assert keyword(c, "zqxalpha1") == []
            undo = cli(home, "forget", str(home / "memory" / "old" / "*.md"), "--undo")
            assert undo.returncode == 0, undo.stderr
            wait_for(lambda: bool(keyword(c, "zqxalpha2")) and bool(keyword(c, "zqxbeta1")))
            assert c.forgotten() == []
            with pytest.raises(NotFound):
                c.forget(str(b), undo=True)
        bad = cli(home, "forget", "/etc/passwd")
        assert bad.returncode == 2 and "outside" in bad.stderr
    finally:
        daemon.stop()


def claude_line(text: str, session: str, cwd: str) -> str:
    msg = {"role": "user", "content": text}
    return json.dumps({"type": "user", "message": msg, "sessionId": session, "cwd": cwd}) + "\n"


@pytest.mark.timeout(300)
def test_forget_a_growing_session_and_a_project(home: Path) -> None:
    agents = home / "agents" / "projects"
    billing = agents / "-home-me-work-billing" / "5f1c-billing-session.jsonl"
    shop = agents / "-home-me-work-shop" / "77aa-shop-session.jsonl"
    write(
        billing,
        claude_line("billing talk zqxbill1", "5f1c-billing-session", "/home/me/work/billing"),
    )
    write(shop, claude_line("shop talk zqxshop1", "77aa-shop-session", "/home/me/work/shop"))
    (home / "config.toml").write_text(
        f'[sessions]\npaths = ["{agents}/**/*.jsonl"]\nquiet_s = 0.2\n'
        '[embedding]\nprovider = "none"\n'
    )
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        with daemon.client() as c:
            wait_for(lambda: bool(keyword(c, "zqxbill1")) and bool(keyword(c, "zqxshop1")))
            res = c.forget(session="5f1c-billing-session")
            assert (res["forgotten"], res["files_removed"]) == ("session", 1)
            assert keyword(c, "zqxbill1") == []
            with billing.open("a") as fh:  # the agent keeps writing to the session
                fh.write(claude_line("later zqxbill2", "5f1c-billing-session", "/home/me/work/b"))
            with shop.open("a") as fh:
                fh.write(claude_line("shop grows zqxshop2", "77aa-shop-session", "/home/me/shop"))
            wait_for(lambda: bool(keyword(c, "zqxshop2")), timeout=60)
            assert keyword(c, "zqxbill2") == []
            proj = cli(home, "forget", "--project", "shop", "--json")
            assert proj.returncode == 0, proj.stderr
            assert json.loads(proj.stdout)["files_removed"] == 1
            assert keyword(c, "zqxshop1") == [] and keyword(c, "zqxshop2") == []
        for token in ("zqxbill", "zqxshop"):
            assert scan_home(home, token, skip=("agents",)) == []
    finally:
        daemon.stop()
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        with daemon.client() as c:
            assert keyword(c, "zqxbill2") == [] and keyword(c, "zqxshop1") == []
            c.forget(session="5f1c-billing-session", undo=True)
            wait_for(lambda: bool(keyword(c, "zqxbill2")), timeout=60)
            assert keyword(c, "zqxshop1") == []
    finally:
        daemon.stop()


def test_a_cached_embedding_stays_while_its_text_is_live_elsewhere(tmp_path: Path) -> None:
    import numpy as np

    from recalld.index import erase
    from recalld.index.store import FileRow, Identity, NewChunk, Store

    store = Store(tmp_path / "index.sqlite")
    store.set_identity(Identity("k", "t/m", "m", 3, "{}"))
    vec = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    store.put_cache("k", "m", 3, {"shared": vec, "only-a": vec})
    for name, hashes in (("a", ["shared", "only-a"]), ("b", ["shared"])):
        chunks = [NewChunk(i + 1, i + 1, f"{name} text {h}", h) for i, h in enumerate(hashes)]
        with store.conn:
            store.replace_file(FileRow(f"/m/{name}.md", "memory", 1, 1, name, 2), chunks, None)
    gone = erase.chunk_hashes(store.conn, "/m/a.md")
    store.remove_file("/m/a.md")
    result = erase.scrub(store.conn, gone)
    assert result["cache_entries_removed"] == 1 and result["wal_truncated"]
    assert set(store.cached("k", "m", 3, ["shared", "only-a"])) == {"shared"}
    store.close()


def test_a_session_by_the_start_of_its_id_and_forgets_that_match_nothing(home: Path) -> None:
    """``forget --session 5f1c9e0a`` (the README's form) and ``search --session 5f1c9e0a`` take
    the one session whose id starts so; several are an error naming them; a forget that
    matches nothing records nothing and says so (exit 3, as a missing path)."""
    from conftest import make_engine
    from recalld.errors import BadRequest as DaemonBadRequest
    from recalld.errors import NotFound as DaemonNotFound
    from recalld.memory_edits import MemoryEdits

    agents = home / "agents" / "projects" / "-home-me-work-billing"
    ids = ["5f1c9e0a-77b2-4c1d-a001-5e55104a0001", "5f1c77aa-0b3e-4f2a-a002-5e55104a0002"]
    for n, sid in enumerate(ids):
        write(agents / f"{sid}.jsonl", claude_line(f"talk zqxsess{n} zqxboth", sid, "/w/billing"))
    engine = make_engine(
        home, None, embedding__provider="none", sessions__paths=[f"{agents.parent}/**/*.jsonl"]
    )
    edits = MemoryEdits(engine, lambda fn: fn(), resync=engine.sync)

    def hits(session: str) -> list[str]:
        params = {"query": "zqxboth", "mode": "keyword", "session": session}
        return [Path(h["path"]).stem for h in engine.searcher.search(params)["results"]]

    try:
        engine.sync()
        assert hits("5f1c9e0a") == [ids[0]] and hits(ids[1]) == [ids[1]]
        for ambiguous in (lambda: hits("5f1c"), lambda: edits.forget({"session": "5f1c"})):
            with pytest.raises(DaemonBadRequest, match="start of 2 session ids") as err:
                ambiguous()
            assert ids[0] in str(err.value) and ids[1] in str(err.value)
        res = edits.forget({"session": "5f1c9e0a"})
        assert (res["value"], res["files_removed"], res["new"]) == (ids[0], 1, True)
        assert hits(ids[0]) == [] and hits("5f1c") == [ids[1]]  # the other one is left
        assert edits.forget({"session": "5f1c9e0a"})["new"] is False  # known: not an error
        for nothing, why in (
            ({"session": "0000dead"}, "no indexed transcript"),
            ({"project": "nonexistentproj"}, "nothing indexed is of project"),
            ({"target": "zzz*.md"}, "no file indexed or on disk matches"),
        ):
            with pytest.raises(DaemonNotFound, match=why + ".*nothing recorded"):
                edits.forget(nothing)
        assert [(s["kind"], s["value"]) for s in edits.forget({"list": True})["forgotten"]] == [
            ("session", ids[0])
        ]
        assert edits.forget({"session": "5f1c9e0a", "undo": True})["value"] == ids[0]
        assert hits("5f1c9e0a") == [ids[0]]
    finally:
        engine.close()
    for args in (("--project", "nonexistentproj"), ("zzz*.md",), ("--session", "0000dead")):
        out = cli(home, "forget", *args)
        assert out.returncode == 3 and "nothing recorded" in out.stderr, (args, out.stderr)
    assert "nothing is forgotten" in cli(home, "forget", "--list").stdout


def test_a_forget_without_a_daemon_says_which_files_were_shared(home: Path) -> None:
    """The CLI forgets in process when no daemon runs; it still says that a shared note's text
    stays in the store's files until `recalld shared compact` (the daemon's answer says it)."""
    (home / "config.toml").write_text(
        '[sessions]\npaths = []\n[embedding]\nprovider = "none"\n'
        '[shared]\nurl = "postgresql://127.0.0.1:1/postgres"\nmember = "alice"\n'
        'share = ["team/**"]\n'
    )
    shared = write(home / "memory" / "team" / "gate.md", "# Gate\n\nthe heron gate code\n")
    mine = write(home / "memory" / "mine.md", "# Mine\n\nthe ibis ledger\n")
    assert cli(home, "sync").returncode == 0
    said = cli(home, "forget", str(shared))
    assert said.returncode == 0, said.stderr
    assert "1 of them shared" in said.stdout and "recalld shared compact" in said.stdout
    other = cli(home, "forget", str(mine))
    assert other.returncode == 0 and "shared" not in other.stdout, other.stdout
