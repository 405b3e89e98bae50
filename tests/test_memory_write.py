"""``remember``: entries written into notes, confined, redacted, deduplicated, atomic, and
searchable the moment the write returns (in-process, through the daemon and the CLI)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, make_engine
from daemon_process import DaemonProcess
from recalld.errors import BadRequest, Forbidden
from recalld.ingest import memory_write, note_names
from recalld.ingest.filters import make_filter
from recalld.memory_edits import MemoryEdits
from recalld_client import BadRequest as ClientBadRequest

HEADING = re.compile(r"^### \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: #[\w/-]+)*$")
KEYWORD_ONLY = '[sessions]\npaths = []\n[embedding]\nprovider = "none"\n'


def edits_for(home: Path, **values: Any) -> tuple[Any, MemoryEdits]:
    engine = make_engine(home, None, embedding__provider="none", **values)
    return engine, MemoryEdits(engine, lambda fn: fn())


def keyword_hits(engine_or_client: Any, query: str) -> list[dict[str, Any]]:
    params = {"query": query, "mode": "keyword"}
    if hasattr(engine_or_client, "call"):
        return list(engine_or_client.search(query, mode="keyword")["results"])
    return list(engine_or_client.searcher.search(params)["results"])


# names and entries --------------------------------------------------------------------------


def test_note_names_are_confined_and_sanitized(home: Path, tmp_path: Path) -> None:
    root = home / "memory"
    flt = make_filter([".md", ".txt"])
    assert note_names.note_path("MEMORY.md", [root], flt) == root / "MEMORY.md"
    assert note_names.note_path("projects/billing", [root], flt) == root / "projects/billing.md"
    assert (root / "projects").is_dir()
    assert note_names.note_path('we:ird?<name>|"x"', [root], flt) == root / "we-ird--name---x-.md"
    assert note_names.note_path(".hidden/.env.md", [root], flt) == root / "hidden/env.md"
    assert note_names.note_path(str(root / "abs.md"), [root], flt) == root / "abs.md"
    with pytest.raises(Forbidden, match=r"'\.\.'"):
        note_names.note_path("../escape.md", [root], flt)
    with pytest.raises(Forbidden, match="outside the memory folders"):
        note_names.note_path(str(tmp_path / "elsewhere.md"), [root], flt)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "linked").symlink_to(outside)
    with pytest.raises(Forbidden, match="symbolic link"):
        note_names.note_path("linked/x.md", [root], flt)
    (root / "alias.md").symlink_to(outside / "target.md")
    with pytest.raises(Forbidden, match="symbolic link"):
        note_names.note_path("alias.md", [root], flt)
    with pytest.raises(BadRequest, match="empty"):
        note_names.note_path("  ", [root], flt)
    assert not (outside / "x.md").exists() and not (outside / "target.md").exists()
    assert note_names.daily_note_name("log/YYYY/MM-DD.md", 0.0).startswith("log/19")


def test_entries_are_redacted_limited_and_tagged() -> None:
    entry = memory_write.make_entry(
        "deploy key ghp_abcdefghijklmnopqrstuvwxyz0123456789 and\nDB_PASSWORD=hunter2hunter2",
        ["#decision", "billing"],
        1000,
    )
    assert entry.redacted == 2
    assert "ghp_" not in entry.text and "hunter2" not in entry.text
    assert entry.tags == ("decision", "billing")
    assert HEADING.match(entry.lines(time.time())[0])
    with pytest.raises(BadRequest, match=r"memory\.max_entry_chars"):
        memory_write.make_entry("x" * 1001, [], 1000)
    with pytest.raises(BadRequest, match="tag"):
        memory_write.make_entry("ok", ["two words"], 1000)
    with pytest.raises(BadRequest, match="text"):
        memory_write.make_entry("   ", [], 1000)


# in-process -----------------------------------------------------------------------------------


def test_write_in_process_is_searchable_deduplicated_and_replaceable(home: Path) -> None:
    engine, edits = edits_for(home)
    try:
        first = edits.write({"text": "Billing runs on Postgres zqxbilling1", "tags": ["db"]})
        today = note_names.daily_note_name("YYYY-MM-DD.md")
        assert first["path"] == str(home / "memory" / today)
        assert (first["start_line"], first["end_line"], first["duplicate"]) == (3, 4, False)
        assert [h["path"] for h in keyword_hits(engine, "zqxbilling1")] == [first["path"]]

        again = edits.write({"text": "Billing runs on Postgres zqxbilling1", "tags": ["db"]})
        assert again["duplicate"] and again["citation"] == first["citation"]
        other = edits.write({"text": "Billing runs on Postgres zqxbilling1"})  # no tag: new
        assert not other["duplicate"] and other["start_line"] == 6

        fixed = edits.write(
            {"text": "Billing moved to MySQL zqxbilling2", "replace": first["citation"]}
        )
        assert (fixed["start_line"], fixed["end_line"]) == (3, 4)
        lines = Path(first["path"]).read_text().splitlines()
        assert lines[3] == "Billing moved to MySQL zqxbilling2"
        assert lines[6] == "Billing runs on Postgres zqxbilling1"
        assert keyword_hits(engine, "zqxbilling2")

        # Lines edited behind recalld's back since they were indexed: the replace is refused.
        Path(first["path"]).write_text("\n".join(["# moved", *lines]) + "\n")
        with pytest.raises(BadRequest, match=r"moved since|changed since"):
            edits.write({"text": "wrong place", "replace": fixed["citation"]})
        assert "wrong place" not in Path(first["path"]).read_text()
    finally:
        engine.close()


def test_write_refusals_leave_nothing_behind(home: Path) -> None:
    engine, edits = edits_for(home, memory__max_entry_chars=50, memory__max_file_bytes=400)
    try:
        with pytest.raises(BadRequest, match=r"memory\.max_entry_chars"):
            edits.write({"text": "y" * 51})
        with pytest.raises(Forbidden):
            edits.write({"text": "fine", "note": "../../etc/passwd"})
        with pytest.raises(BadRequest, match="would not be indexed"):
            edits.write({"text": "fine", "note": "node_modules/x.md"})
        assert sorted(p.name for p in (home / "memory").rglob("*") if p.is_file()) == []
        for i in range(4):
            edits.write({"text": f"entry {i} " + "z" * 40, "note": "full.md"})
        with pytest.raises(BadRequest, match=r"memory\.max_file_bytes"):
            edits.write({"text": "one more " + "z" * 40, "note": "full.md"})
        assert "one more" not in (home / "memory" / "full.md").read_text()
    finally:
        engine.close()


def test_writes_into_forgotten_notes_are_refused_and_touch_nothing(home: Path) -> None:
    """A note a tombstone covers is never indexed: a write there would be acknowledged with a
    citation that search and get never serve. Refused, naming the tombstone and its undo."""
    root = home / "memory"
    engine, edits = edits_for(home)
    try:
        kept = edits.write({"text": "minutes of monday", "note": "Réunions/a.md"})
        edits.write({"text": "billing summary", "note": "projects/billing-summary.md"})
        daily = edits.write({"text": "a daily entry"})
        edits.write({"text": "planning zqxproj", "note": "plans/x.md"})
        edits.forget({"target": "Réunions"})
        edits.forget({"target": "projects/billing-summary.md"})
        edits.forget({"target": str(root / "2*.md")})  # a glob over the daily notes
        edits.forget({"project": "plans"})
        before = sorted(str(p) for p in root.rglob("*"))
        undo = f"`recalld forget {shlex.quote(str(root / 'Réunions'))} --undo`"
        with pytest.raises(BadRequest, match="is forgotten") as refused:
            edits.write({"text": "The ibis deadline is Monday", "note": "Réunions/sub/new.md"})
        assert undo in str(refused.value) and f"path {root / 'Réunions'}" in str(refused.value)
        with pytest.raises(BadRequest, match=r"forget .*billing-summary\.md --undo"):
            edits.write({"text": "more billing", "note": "projects/billing-summary.md"})
        with pytest.raises(BadRequest, match="is forgotten"):
            edits.write({"text": "corrected", "replace": kept["citation"]})
        with pytest.raises(BadRequest, match="is forgotten"):
            edits.forget({"target": kept["citation"]})
        with pytest.raises(BadRequest, match=r"forget '.*2\*\.md' --undo"):
            edits.write({"text": "into the daily note"})
        with pytest.raises(BadRequest, match="--project plans --undo"):
            edits.write({"text": "more plans", "note": "plans/y.md"})
        assert sorted(str(p) for p in root.rglob("*")) == before  # not even a folder
        assert "ibis" not in (root / "Réunions" / "a.md").read_text()
        assert "into the daily" not in Path(daily["path"]).read_text()

        edits.forget({"target": "Réunions", "undo": True})
        engine.sync()
        res = edits.write({"text": "The ibis deadline is Monday", "note": "Réunions/new.md"})
        assert [h["path"] for h in keyword_hits(engine, "ibis")] == [res["path"]]
    finally:
        engine.close()


# through the daemon ---------------------------------------------------------------------------


@pytest.fixture
def keyword_daemon(home: Path) -> Any:
    (home / "config.toml").write_text(KEYWORD_ONLY)
    daemon = DaemonProcess(home).start()
    daemon.wait_idle()
    yield daemon
    daemon.stop()


def test_write_is_searchable_from_another_client_at_once(keyword_daemon: DaemonProcess) -> None:
    with keyword_daemon.client() as writer, keyword_daemon.client() as reader:
        reader.status()
        for i in range(20):
            token = f"zqxraw{i}"
            res = writer.remember(f"fact number {i}: {token}", note="facts.md", tags=["t"])
            hits = reader.search(token, mode="keyword")["results"]
            assert [h["path"] for h in hits] == [res["path"]], (i, hits)
            assert hits[0]["start_line"] <= res["start_line"] <= hits[0]["end_line"]
            got = reader.get(res["citation"])
            assert got["text"].splitlines()[1] == f"fact number {i}: {token}"
        with pytest.raises(ClientBadRequest, match="max_entry_chars"):
            writer.remember("z" * 20_001)


def test_cli_remember_through_daemon_and_stdin(keyword_daemon: DaemonProcess, home: Path) -> None:
    env = env_for(home)
    cli = [sys.executable, "-m", "recalld.surfaces.cli"]
    out = subprocess.run(
        [*cli, "remember", "token", "zqxcli", "AKIAIOSFODNN7EXAMPLE", "--tag", "x", "--json"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    res = json.loads(out.stdout)
    assert res["redacted"] == 1 and res["duplicate"] is False
    assert "AKIAIOSFODNN7EXAMPLE" not in Path(res["path"]).read_text()
    piped = subprocess.run(
        [*cli, "remember", "-", "--note", "MEMORY.md"],
        input="from stdin zqxstdin\nsecond line\n",
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert piped.stdout.strip() == f"{home / 'memory' / 'MEMORY.md'}#L1-L3"
    with keyword_daemon.client() as c:
        assert c.search("zqxstdin", mode="keyword")["results"]
        assert c.search("zqxcli", mode="keyword")["results"]
    bad = subprocess.run(
        [*cli, "remember", "x", "--note", "../out.md"], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "'..'" in bad.stderr


@pytest.mark.timeout(180)
def test_refusals_are_the_same_with_and_without_the_daemon(home: Path) -> None:
    """A write into a forgotten folder and an entry too long for one request: the same message
    and exit code in-process and through the daemon (the CLI, the client library too)."""
    (home / "config.toml").write_text(KEYWORD_ONLY)
    env = env_for(home)
    cli = [sys.executable, "-m", "recalld.surfaces.cli"]

    def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
        out = subprocess.run(
            [*cli, *args], input=stdin, env=env, capture_output=True, text=True, timeout=120
        )
        return out.returncode, out.stderr

    assert run("remember", "monday minutes", "--note", "Réunions/a.md")[0] == 0
    assert run("forget", "Réunions")[0] == 0
    into = ("remember", "The ibis deadline is Monday", "--note", "Réunions/new.md", "--json")
    huge = "bigword " * 700_000
    alone = [run(*into), run("remember", "-", stdin=huge)]
    assert alone[0][0] == 2 and "is forgotten" in alone[0][1] and "--undo" in alone[0][1]
    assert alone[1][0] == 2 and "memory.max_entry_chars (20,000)" in alone[1][1]
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        assert [run(*into), run("remember", "-", stdin=huge)] == alone
        with daemon.client() as c:
            with pytest.raises(ClientBadRequest, match="is forgotten"):
                c.remember("The ibis deadline is Monday", note="Réunions/new.md")
            with pytest.raises(ClientBadRequest, match="too long for one request"):
                c.remember("x" * 2_000_000)  # over the daemon's cap of requests
            assert not c.remember("a short one zqxshort")["duplicate"]
        assert not (home / "memory" / "Réunions" / "new.md").exists()
    finally:
        daemon.stop()


def _entries(path: Path) -> list[tuple[str, str]]:
    """(heading, body) of every entry; fails on anything that is not a whole entry."""
    lines = path.read_text().splitlines()
    assert lines[0] == "" or lines[0].startswith("### "), lines[:3]
    out = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        assert HEADING.match(lines[i]), (i, lines[i])
        assert i + 1 < len(lines), "a heading without its text"
        out.append((lines[i], lines[i + 1]))
        i += 2
    return out


@pytest.mark.slow  # ~2 min on two shared cores: 1,600 durable writes to one growing note
@pytest.mark.timeout(600)
def test_eight_clients_two_hundred_entries_each(keyword_daemon: DaemonProcess) -> None:
    acknowledged: list[list[str]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def client_loop(n: int) -> None:
        try:
            with keyword_daemon.client(timeout=120) as c:
                for j in range(200):
                    text = f"client {n} entry {j} zqxc{n}e{j}"
                    res = c.remember(text, note="shared.md")
                    assert not res["duplicate"]
                    acknowledged[n].append(text)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(8)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    assert not errors, errors[:3]
    bodies = [body for _, body in _entries(keyword_daemon.home / "memory" / "shared.md")]
    assert len(bodies) == 1600 and len(set(bodies)) == 1600
    assert set(bodies) == {t for texts in acknowledged for t in texts}
    for n in range(8):  # each client's entries in the order it wrote them
        mine = [b for b in bodies if b.startswith(f"client {n} ")]
        assert mine == acknowledged[n]
    with keyword_daemon.client() as c:
        for n in range(8):
            assert c.search(f"zqxc{n}e199", mode="keyword")["results"]
    print(f"8 x 200 writes in {took:.1f} s")


@pytest.mark.timeout(300)
def test_kill9_mid_write_keeps_the_note_whole(home: Path) -> None:
    (home / "config.toml").write_text(KEYWORD_ONLY)
    daemon = DaemonProcess(home).start()
    daemon.wait_idle()
    acknowledged: list[str] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        try:
            with daemon.client(timeout=30, reconnect=False) as c:
                for j in range(100_000):
                    text = f"writer {n} entry {j} zqxk{n}x{j}"
                    c.remember(text, note="crash.md")
                    with lock:
                        acknowledged.append(text)
        except Exception:  # noqa: BLE001 - the daemon was killed under it
            return

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acknowledged) < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    daemon.kill9()
    for t in threads:
        t.join(30)
    note = home / "memory" / "crash.md"
    bodies = [body for _, body in _entries(note)]
    assert len(acknowledged) >= 40
    assert set(acknowledged) <= set(bodies)  # every acknowledged entry is there, whole
    assert len(bodies) == len(set(bodies))
    assert len(bodies) <= len(acknowledged) + 4  # at most one unacknowledged write each
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        with daemon.client() as c:
            last = acknowledged[-1].split()[-1]
            assert c.search(last, mode="keyword")["results"]
            after = c.remember("after the crash zqxafter", note="crash.md")
        assert _entries(note)[-1][1] == "after the crash zqxafter"
        assert after["end_line"] == len(note.read_text().splitlines())
        leftovers = [p.name for p in note.parent.iterdir() if p.name.endswith(".tmp")]
        assert leftovers == []  # the killed daemon's temporary notes are cleared
    finally:
        daemon.stop()


@pytest.mark.timeout(300)
def test_vector_follows_the_write(home: Path) -> None:
    (home / "config.toml").write_text("[sessions]\npaths = []\n")
    daemon = DaemonProcess(home).start()
    try:
        daemon.wait_idle()
        with daemon.client() as c:
            c.search("warm up", mode="vector")
            res = c.remember("The quarterly offsite happens in a lighthouse on the coast")
            started = time.monotonic()
            found = False
            while time.monotonic() - started < 30 and not found:
                hits = c.search("seaside meeting venue", mode="vector", min_score=0.0)
                found = any(h["path"] == res["path"] for h in hits["results"])
                time.sleep(0.02)
            assert found
            print(f"vector searchable {time.monotonic() - started:.3f} s after remember")
    finally:
        daemon.stop()


def test_in_process_cli_remember_without_daemon(home: Path) -> None:
    (home / "config.toml").write_text(KEYWORD_ONLY)
    env = env_for(home)
    cli = [sys.executable, "-m", "recalld.surfaces.cli"]
    out = subprocess.run(
        [*cli, "remember", "offline entry zqxoffline", "--json"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    res = json.loads(out.stdout)
    assert os.path.exists(res["path"])
    found = subprocess.run(
        [*cli, "search", "zqxoffline", "--json"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(found.stdout)["results"][0]["path"] == res["path"]
