"""A big first sync's quick pass (issue 40, item 4): every new note keyword-searchable as one
row before it is chunked, then replaced by its chunks; nothing of it left behind.

Real notes on disk, a real index, the daemon's indexer setup in process (keyword first, the
background chunker), the engine's own search; and a real daemon killed right after the pass.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import make_engine, write
from daemon_process import DaemonProcess, wait_for
from recalld.engine import Engine
from recalld.index.store import Store
from recalld.ingest import chunk_pool, first_pass
from recalld.ingest.vector_backfill import BackgroundChunker, vector_counts, vector_counts_by_rows
from recalld.shared.push import Pusher, Scope
from recalld.surfaces.cli_output import print_status
from test_reader_pool import HashEmbedder

NOTES = 40
MTIME_NS = 1_700_000_000 * 10**9
SECRET = "ghp_" + "k3Jq9ZxW2mV7pL0rT5yB8nC4dF6hG1sA0eRu"


def _notes(memory: Path, n: int = NOTES) -> None:
    """Notes of a few sections each, one word of its own per note, one with a secret, one
    blank (the chunked pass writes what a blank note has)."""
    for i in range(n):
        body = f"# Note {i}\n\nopening words about heron{i:03d}\n\n## Later\n\n"
        body += "".join(f"line {j} of note {i} about the estuary\n" for j in range(30))
        if i == 7:
            body += f"the deploy token is {SECRET}\n"
        path = write(memory / f"d{i % 3}" / f"note-{i:03d}.md", body)
        os.utime(path, ns=(MTIME_NS + i, MTIME_NS + i))  # a note's date may come from it
    os.utime(write(memory / "blank.md", "\n\n"), ns=(MTIME_NS, MTIME_NS))


def _engine(home: Path) -> Engine:
    """An engine set up as the daemon sets its indexer up: keyword first, big notes chunked
    in the background."""
    eng = make_engine(home, None, **{"memory.paths": [str(home / "memory")]})
    eng.background, eng.keyword_first = BackgroundChunker(lambda _: None), True
    return eng


def _chunks(index: Path, home: Path) -> list[tuple[Any, ...]]:
    """The chunk rows (ids aside), and the file rows, with the home's path made neutral."""
    conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT path, start_line, end_line, hash, text, context, ident, kind, embed, date "
            "FROM chunks ORDER BY path, start_line"
        ).fetchall()
        rows += conn.execute("SELECT path, size, mtime_ns, hash, lines FROM files ORDER BY 1")
        return [tuple(str(v).replace(str(home), "H") for v in row) for row in rows]
    finally:
        conn.close()


@contextlib.contextmanager
def _store(home: Path) -> Iterator[Store]:
    store = Store(home / "index.sqlite", readonly=True)
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def _first_pass_seen(monkeypatch: pytest.MonkeyPatch, eng: Engine) -> Iterator[list[Any]]:
    """What a search and the index showed right after the first pass (before any chunking)."""
    seen: list[Any] = []
    real = first_pass.write

    def write_then_look(*args: Any) -> Any:
        rows = real(*args)
        with eng.reader() as store:
            provisional = [r for r in store.files("memory").values() if r.provisional]
            fts = store.conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
            held = [r[0] for r in store.conn.execute("SELECT text FROM chunks")]
        assert not [t for t in held if SECRET in t], "redacted before it reached the index"
        assert any("[REDACTED:github_token]" in t for t in held)
        heron = eng.searcher.search({"query": "heron039", "mode": "keyword"})["results"]
        secret = eng.searcher.search({"query": SECRET, "mode": "keyword"})["results"]
        seen.append((rows, provisional, fts, heron, secret))
        print_status(eng.status(), False)  # what `recalld status` says meanwhile
        return rows

    with monkeypatch.context() as patch:
        patch.setattr(first_pass, "write", write_then_look)
        yield seen


def test_a_big_first_sync_is_searchable_as_whole_notes_then_chunked_as_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    got = {}
    for name, threshold in (("plain", 10_000), ("first-pass", 20)):
        monkeypatch.setattr(chunk_pool, "MIN_FILES", threshold)
        home = tmp_path / name
        _notes(home / "memory")
        eng = _engine(home)
        try:
            with _first_pass_seen(monkeypatch, eng) as seen:
                report = eng.sync()
        finally:
            eng.background.close()
            eng.close()
        got[name] = (_chunks(home / "index.sqlite", home), report, seen)
    (plain, plain_report, none), (rows, report, seen) = got["plain"], got["first-pass"]
    assert none == [], "fewer new notes than a chunking worker takes: no first pass"
    # Right after the first pass: every note that has words is one keyword row, found by the
    # engine's search, citing the whole note; the secret is redacted there too.
    (written, provisional, fts, heron, secret) = seen[0]
    assert len(written) == len(provisional) == fts == NOTES, "the blank note is left"
    assert all(r.mtime_ns == -1 and r.hash == "" for r in provisional)
    assert [h["path"].endswith("note-039.md") for h in heron] == [True]
    assert (heron[0]["start_line"], heron[0]["end_line"]) == (1, 36)  # the whole note
    assert heron[0]["stale"] is False, "read whole a moment ago: not changed since indexed"
    said = capsys.readouterr().out
    assert f"0 keyword-only by policy, 0 cached embeddings, {NOTES} notes held whole" in said
    assert secret == []
    # After the sync: the same rows as a sync without the first pass, and the same report.
    assert rows == plain
    assert not any("first pass" in str(v) for row in rows for v in row)
    for key in ("files_changed", "files_unchanged", "files_skipped", "chunks_written"):
        assert getattr(report, key) == getattr(plain_report, key), key
    with _store(tmp_path / "first-pass") as store:  # the replaced rows' keyword rows are gone
        assert store.integrity_ok()
        counts = store.counts()
        assert counts["chunks"] == counts["fts_rows"] == len(rows) - NOTES - 1


@contextlib.contextmanager
def _thirty_indexed(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Engine, list[Any]]]:
    """An engine whose first sync indexed 30 notes with a first pass (20 notes start one), and
    what each first pass showed, this one's included."""
    monkeypatch.setattr(chunk_pool, "MIN_FILES", 20)
    _notes(home / "memory", 30)
    eng = _engine(home)
    try:
        with _first_pass_seen(monkeypatch, eng) as seen:
            eng.sync()
            yield eng, seen
    finally:
        eng.background.close()
        eng.close()


def test_notes_already_indexed_take_no_first_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = tmp_path / "memory"
    with _thirty_indexed(tmp_path, monkeypatch) as (eng, seen):
        _notes(memory, 45)  # 15 new (too few), the 30 others rewritten as they were
        eng.sync()
        _notes(memory / "later", 25)  # 25 new ones, beside 45 known
        eng.sync()
        report = eng.reindex()  # a new file nobody searches until it is swapped in
    assert report.files_changed == 45 + 25 + 2  # and the two blank notes
    assert [len(s[0]) for s in seen] == [30, 25]
    assert all("/later/" in p for p in seen[1][0])


def _stop_after(n: int) -> Callable[[], bool]:
    """A ``stopping`` that says stop when asked for the (n+1)th time."""
    asked = itertools.count()
    return lambda: next(asked) >= n


def test_a_pass_cut_short_leaves_rows_the_next_sync_replaces(tmp_path: Path) -> None:
    """A stop (or a crash) after some notes of the first pass: the next sync, any sync, puts
    the chunked rows in their place, as if the pass had never run."""
    reports = []
    for name in ("plain", "cut"):
        _notes(tmp_path / name / "memory")
        eng = make_engine(tmp_path / name, None)  # not the daemon's: no first pass of its own
        try:
            if name == "cut":
                notes = sorted((tmp_path / name / "memory").rglob("*.md"))
                raws = [chunk_pool.Raw(p, p.read_bytes(), p.stat(), "") for p in notes]
                stop = _stop_after(25)
                written = first_pass.write(eng.writes.writer, raws, stop, lambda _: None)
                assert len(written) == 24  # the blank note sorts first and takes no row
            reports.append(eng.sync())
        finally:
            eng.close()
    assert reports[1].files_changed == reports[0].files_changed == NOTES + 1
    got = _chunks(tmp_path / "cut" / "index.sqlite", tmp_path / "cut")
    assert got == _chunks(tmp_path / "plain" / "index.sqlite", tmp_path / "plain")


def test_a_note_held_as_one_row_is_due_a_vector_and_not_pushed(tmp_path: Path) -> None:
    """Until its chunks are in, a provisional note counts as one vector still due (status
    never says 0 pending with notes unchunked), and the pusher leaves it for a later round."""
    memory = tmp_path / "memory"
    _notes(memory, 4)
    eng = make_engine(tmp_path, HashEmbedder())
    try:
        eng.sync()
        with eng.reader() as store:
            assert vector_counts(store) == vector_counts_by_rows(store) == (0, 4 * 2)
        late = write(memory / "team" / "late.md", "# Late\n\nwritten during the first sync\n")
        raw = chunk_pool.Raw(late, late.read_bytes(), late.stat(), "")
        first_pass.write(eng.writes.writer, [raw], bool, lambda _: None)
        with eng.reader() as store:
            assert store.counts()["provisional_files"] == 1
            assert vector_counts(store) == vector_counts_by_rows(store) == (1, 4 * 2 + 1)
        scope = Scope(("**",), [memory])
        pusher = Pusher(None, None, eng.reader, scope, tmp_path / "p.json")  # type: ignore[arg-type]
        local = pusher._local_files()
        assert pusher.state.unfinished == 1
        eng.sync()  # its chunks and their vector: pushed next round
        with eng.reader() as store:
            assert store.counts()["provisional_files"] == 0
            assert vector_counts(store) == vector_counts_by_rows(store) == (0, 4 * 2 + 1)
        assert any(k.endswith("team/late.md") for k in pusher._local_files())
    finally:
        eng.close()
    names = sorted(k.rsplit("/", 1)[1] for k in local)
    assert names == ["blank.md"] + [f"note-{i:03d}.md" for i in range(4)], "late.md waits"


@pytest.mark.slow
def test_a_daemon_killed_after_its_first_pass_leaves_an_index_the_next_start_completes(
    home: Path,
) -> None:
    n = chunk_pool.MIN_FILES + 500
    lines = "".join(f"line {j} of the tide table, {j * 7} minutes past\n" for j in range(60))
    for i in range(n):  # ~1 ms of chunking each: the kill lands in the chunked pass
        write(home / "memory" / f"b{i // 500}" / f"n{i:04d}.md", f"# N {i}\n\n{lines}w{i:04d}\n")
    (home / "config.toml").write_text('[embedding]\nprovider = "none"\n')  # keyword only: quick
    d = DaemonProcess(home).start(timeout=120)
    try:
        wait_for(lambda: "first pass: " in d.log_tail(), 120)
        d.kill9()
        with _store(home) as store:
            held = [r for r in store.files("memory").values() if r.provisional]
        assert held, "killed after the first pass, before every note was chunked"
        d.start(timeout=120)
        d.wait_idle(timeout=300)
        with d.client() as c:
            hit = c.search(f"w{n - 1:04d}", mode="keyword")["results"][0]
            assert hit["path"].endswith(f"n{n - 1:04d}.md") and hit["start_line"] > 1, hit
        d.stop()
        with _store(home) as store:
            assert store.integrity_ok()
            assert not [r for r in store.files("memory").values() if r.provisional]
            counts = store.counts()
            assert counts["chunks"] == counts["fts_rows"] > n  # the whole notes' rows are gone
            homeless = "SELECT count(*) FROM chunks WHERE path NOT IN (SELECT path FROM files)"
            assert store.conn.execute(homeless).fetchone()[0] == 0
    finally:
        d.stop()


def test_a_big_folder_copied_in_takes_a_first_pass_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watcher's batch of a folder copied into a memory root: its new notes are
    keyword-searchable as whole notes before they are chunked, as on a first sync."""
    memory = tmp_path / "memory"
    with _thirty_indexed(tmp_path, monkeypatch) as (eng, seen):
        _notes(memory / "copied", 25)  # the folder, as the watcher names it
        eng.sync([memory / "copied"])
        _notes(memory / "files", 22)  # the files, one by one
        eng.sync(sorted((memory / "files").rglob("*.md")))
        _notes(memory / "few", 12)  # too few for a pass
        eng.sync([memory / "few"])
        with eng.reader() as store:
            rows = store.files("memory")
    assert [len(s[0]) for s in seen] == [30, 25, 22]
    assert all("/copied/" in p for p in seen[1][0])
    assert all("/files/" in p for p in seen[2][0])
    assert not [r for r in rows.values() if r.provisional], "every note chunked after"
    assert len(rows) == 30 + 25 + 22 + 12 + 4  # and the four blank notes
