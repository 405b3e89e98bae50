"""One path rule for every path that reaches the indexer (issue 14, items 2, 5, 8), in-process.

Full syncs, explicit sync paths (what a watcher batch becomes) and transcript globs; the
daemon-with-watcher side is in test_paths_daemon.py.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_config, make_engine, write
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.index.store import FileRow, NewChunk
from recalld.ingest.filters import PathFilter
from recalld.ingest.path_rule import PathRule, Swapped, name_problem, read_checked

SECRET = "zanzibarsecret"


def engine_for(home: Path, **values: Any) -> Engine:
    return Engine(make_config(home, **values), choice=ProviderChoice(None, "keyword-only (test)"))


@pytest.fixture
def engine(home: Path) -> Iterator[Engine]:
    eng = engine_for(home)
    yield eng
    eng.close()


def hits(eng: Engine, query: str) -> list[str]:
    return [r["path"] for r in eng.searcher.search({"query": query, "mode": "keyword"})["results"]]


def skipped(eng: Engine) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in eng.status()["skipped_files"]}


def outside_files(home: Path) -> tuple[Path, Path]:
    """A secret file and a folder holding a note, both outside the memory root."""
    secret = write(home / "outside" / "passwd", f"root:x:0:0:{SECRET}:/root:/bin/sh\n")
    write(home / "elsewhere" / "x.md", f"# Elsewhere\n\n{SECRET} folder note\n")
    return secret, home / "elsewhere"


def plant_old_rows(eng: Engine, *keys: str) -> None:
    """Rows an older version indexed (its watcher followed links out of the root)."""
    assert eng.writer is not None
    for key in keys:
        row = FileRow(key, "memory", 10, 1, "0" * 32, 1)
        chunk = NewChunk(1, 1, f"{SECRET} leaked from {Path(key).name}", "h-" + key, "")
        eng.writer.replace_file(row, [chunk], None)


def test_links_out_are_refused_and_their_old_rows_removed(engine: Engine, home: Path) -> None:
    mem = home / "memory"
    secret, folder = outside_files(home)
    write(mem / "good.md", "# Good\n\nlighthouse keeper notes\n")
    (mem / "passwd.txt").symlink_to(secret)
    (mem / "dirlink.md").symlink_to(folder, target_is_directory=True)
    plant_old_rows(engine, str(mem / "passwd.txt"), str(mem / "dirlink.md" / "x.md"))
    assert len(hits(engine, SECRET)) == 2  # what the old watcher left behind
    report = engine.sync()
    assert hits(engine, SECRET) == []
    assert report.files_removed == 2 and report.files_kept == 0
    assert hits(engine, "lighthouse") == [str(mem / "good.md")]
    reasons = skipped(engine)
    assert "link out of the memory folders" in reasons[str(mem / "passwd.txt")]


def test_explicit_sync_paths_follow_the_same_rule(engine: Engine, home: Path) -> None:
    """What a watcher batch hands over: a file link out, a folder link out, files inside it."""
    mem = home / "memory"
    secret, folder = outside_files(home)
    engine.sync()
    (mem / "passwd.txt").symlink_to(secret)
    (mem / "dirlink.md").symlink_to(folder, target_is_directory=True)
    write(mem / "inner" / "real.md", "# Real\n\nharbour master log\n")
    (mem / "inner" / "alias.md").symlink_to(mem / "inner" / "real.md")  # inside -> inside
    write(mem / ".env", f"TOKEN={SECRET}\n")
    (mem / "inner" / "env.md").symlink_to(mem / ".env")  # inside, but not a file we index
    batch = [
        mem / "passwd.txt",
        mem / "dirlink.md",
        mem / "dirlink.md" / "x.md",
        mem / "inner",
    ]
    engine.sync(batch)
    assert hits(engine, SECRET) == []
    assert engine.writer is not None
    assert sorted(engine.writer.files("memory")) == [  # identical text: search shows one
        str(mem / "inner" / "alias.md"),
        str(mem / "inner" / "real.md"),
    ]
    reasons = skipped(engine)
    assert str(mem / "passwd.txt") in reasons
    assert "folder link out" in reasons[str(mem / "dirlink.md")]
    assert "not indexed" in reasons[str(mem / "inner" / "env.md")]


def test_a_link_swapped_in_after_the_check_is_not_read(home: Path) -> None:
    mem = home / "memory"
    note = write(mem / "note.md", "# Note\n\nplain text\n")
    secret, _ = outside_files(home)
    rule = PathRule([mem], PathFilter())
    verdict = rule.check(note)
    assert verdict.ok
    note.unlink()
    note.symlink_to(secret)  # the swap, between the check and the open
    with pytest.raises(Swapped, match="link"):
        read_checked(verdict, rule.real_roots, 1000)
    other = write(mem / "other.md", "# Note\n\nanother file, another inode\n")
    os.replace(other, note)  # created before the link went: the inode cannot be reused
    with pytest.raises(Swapped, match="replaced"):
        read_checked(verdict, rule.real_roots, 1000)


def test_a_folder_swapped_for_a_link_is_not_read(home: Path) -> None:
    mem = home / "memory"
    note = write(mem / "sub" / "note.md", "# Note\n\nplain text\n")
    rule = PathRule([mem], PathFilter())
    verdict = rule.check(note)
    os.rename(mem / "sub", home / "outside-sub")  # same inode, now reached through a link out
    (mem / "sub").symlink_to(home / "outside-sub", target_is_directory=True)
    with pytest.raises(Swapped, match="folder"):
        read_checked(verdict, rule.real_roots, 1000)


def test_any_bytes_in_names(engine: Engine, home: Path) -> None:
    """2,000 notes, one 0xE9 name, one with a newline, one with an encoded surrogate."""
    mem = home / "memory"
    for i in range(2000):
        (mem / f"n{i:04d}.md").write_text(f"# Note {i}\n\nquartermaster entry {i}\n")
    bad = [b"caf\xe9.md", b"\xed\xa0\x80-surrogate.md"]
    for raw in bad:
        with open(os.path.join(os.fsencode(mem), raw), "w") as fh:
            fh.write("# Bad name\n\nquartermaster undecodable\n")
    newline = write(mem / "two\nlines.md", "# Newline\n\nquartermaster newline\n")
    started = time.monotonic()
    report = engine.sync()
    seconds = time.monotonic() - started
    counts = engine.status()["counts"]
    assert counts["files"] == 2001, report.as_dict()
    assert engine.searcher.get({"path": str(newline)})["text"].startswith("# Newline")
    reasons = skipped(engine)
    for shown in (f"{mem}/caf\\xe9.md", f"{mem}/\\xed\\xa0\\x80-surrogate.md"):
        assert "not valid UTF-8" in reasons[shown], reasons
    assert report.files_skipped == 2
    # A watcher batch (explicit paths) with the same names: the good one is indexed.
    write(mem / "n0000.md", "# Note 0\n\nquartermaster edited entry\n")
    batch = [Path(os.fsdecode(os.path.join(os.fsencode(mem), raw))) for raw in bad]
    engine.sync([*batch, mem / "n0000.md"])
    assert hits(engine, "edited") == [str(mem / "n0000.md")]
    print(f"2,003 names: 2,001 indexed, 2 skipped by name, full sync {seconds:.2f} s")


def test_undecodable_transcript_names(home: Path) -> None:
    sessions = home / "sessions"
    sessions.mkdir()
    line = '{"type":"user","message":{"role":"user","content":"%s"}}\n'
    (sessions / "good.jsonl").write_text(line % "ferryman schedule")
    with open(os.path.join(os.fsencode(sessions), b"caf\xe9.jsonl"), "w") as fh:
        fh.write(line % "ferryman undecodable")
    eng = Engine(
        make_config(home, sessions__paths=[f"{sessions}/*.jsonl"]),
        choice=ProviderChoice(None, "keyword-only (test)"),
    )
    try:
        eng.sync()
        assert hits(eng, "ferryman") == [str(sessions / "good.jsonl")]
        assert "not valid UTF-8" in skipped(eng)[f"{sessions}/caf\\xe9.jsonl"]
    finally:
        eng.close()


@pytest.mark.parametrize("change", ["binary", "oversize"])
def test_a_note_that_turns_binary_or_too_big_loses_its_old_text(
    home: Path, change: str, local_embedder: Any
) -> None:
    mem = home / "memory"
    note = write(mem / "note.md", f"# Note\n\n{SECRET} old text\n")
    eng = make_engine(home, local_embedder, memory__max_file_bytes=2000)  # vectors too
    try:
        for via_full_sync in (True, False):
            write(note, f"# Note\n\n{SECRET} old text\n")
            eng.sync()
            assert hits(eng, SECRET) == [str(note)]
            assert eng.status()["counts"]["vectors"] > 0
            if change == "binary":
                note.write_bytes(b"\x00\x01binary" * 10)
            else:
                note.write_text("# Note\n\n" + "grown past the limit " * 200)
            eng.sync() if via_full_sync else eng.sync([note])
            assert hits(eng, SECRET) == [], via_full_sync
            counts = eng.status()["counts"]
            assert (counts["files"], counts["chunks"], counts["fts_rows"]) == (0, 0, 0)
            assert counts["vectors"] == 0
            assert eng.searcher.search({"query": "old text", "mode": "vector"})["results"] == []
            reason = skipped(eng)[str(note)]
            assert ("binary" if change == "binary" else "max_file_bytes") in reason
    finally:
        eng.close()


@pytest.mark.slow
def test_swapping_a_note_and_a_link_out_never_indexes_the_target(
    engine: Engine, home: Path
) -> None:
    """The indexer's read (item 1's neighbour): a thread swaps note.md between a note and a
    link to a secret while the indexer re-reads it; the secret must never be indexed."""
    import threading

    mem = home / "memory"
    secret, _ = outside_files(home)
    note = write(mem / "note.md", "# Note\n\nordinary text\n")
    stop = threading.Event()
    swaps = 0

    def swap() -> None:
        nonlocal swaps
        while not stop.is_set():
            tmp = mem / ".swap.tmp"
            tmp.unlink(missing_ok=True)
            if swaps % 2:
                tmp.write_text(f"# Note\n\nordinary text {swaps}\n")
            else:
                tmp.symlink_to(secret)
            os.replace(tmp, note)
            swaps += 1

    thread = threading.Thread(target=swap)
    thread.start()
    leaks = indexed = 0
    try:
        for _ in range(2000):
            report = engine.sync([note])
            indexed += report.files_changed
            leaks += bool(hits(engine, SECRET))
    finally:
        stop.set()
        thread.join()
    print(f"2,000 syncs, {swaps} swaps, {indexed} re-indexed, {leaks} leaks")
    assert leaks == 0 and indexed > 0 and swaps > 100


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    names=st.lists(
        st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\x00" not in b),
        min_size=1,
        max_size=8,
        unique=True,
    )
)
def test_any_bytes_in_a_name_index_or_are_named(home: Path, names: list[bytes]) -> None:
    """Every file name is either indexed or reported, and never stops the sync."""
    mem = os.fsencode(home / "memory" / "fuzz")
    shutil.rmtree(mem, ignore_errors=True)
    os.makedirs(mem)
    for raw in names:
        with open(os.path.join(mem, raw.lstrip(b".") + b".md"), "w") as fh:
            fh.write("# Fuzz\n\nfuzzed name\n")
    made = set(os.listdir(mem))  # names can collide after stripping dots
    eng = engine_for(home)
    try:
        report = eng.sync()
        named = [p for p in eng.status()["skipped_files"] if "/fuzz/" in p["path"]]
        assert eng.writer is not None
        rows = [k for k in eng.writer.files("memory") if "/fuzz/" in k]
        bad = {n for n in made if name_problem(os.fsdecode(n))}
        wanted = {n for n in made - bad if PathFilter().name_ok(os.fsdecode(n))}  # not ".md"
        assert len(rows) == len(wanted), report.as_dict()
        assert len(named) == len(bad)
    finally:
        eng.close()
