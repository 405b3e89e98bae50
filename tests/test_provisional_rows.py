"""The first pass's batch insert (recalld.index.provisional_rows) and its reading thread
(recalld.ingest.first_pass): the same rows as the row-by-row write, nothing replaced, no thread
left behind. Real notes on disk, a real index."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld.index.provisional_rows import insert_provisional
from recalld.index.rows import FileRow, Identity, NewChunk
from recalld.index.store import Store
from recalld.ingest import first_pass
from recalld.ingest.chunk_pool import Raw

# Odd text a note can hold: NUL, escapes, quotes, backslashes, astral characters, bad bytes.
ODD = {
    "nul.md": b"alpha\x00beta heron\n",
    "quotes.md": 'caf\u00e9 \U0001f600 "q" \\ back \\u0041 heron\n'.encode(),
    "bad.md": b"\xff\xfe odd bytes heron\n",
    "ctl.md": b"tab\there \x1b[31m red \x7f del heron\n\n\nthird line\n",
}
ROWS = (
    "SELECT path, source, start_line, end_line, hash, text, context, ident, kind, tool, embed, date"
)


def _raws(folder: Path, notes: dict[str, bytes]) -> list[Raw]:
    folder.mkdir(parents=True, exist_ok=True)
    raws = []
    for name, data in notes.items():
        (folder / name).write_bytes(data)
        raws.append(Raw(folder / name, data, (folder / name).stat(), ""))
    return raws


def _notes(raws: list[Raw]) -> list[tuple[FileRow, NewChunk]]:
    out = []
    for raw in raws:
        prepared = first_pass.provisional(raw)
        assert prepared is not None
        out.append((prepared.row, prepared.chunks[0]))
    return out


def _tables(store: Store) -> tuple[list[Any], list[Any]]:
    chunks = store.conn.execute(f"{ROWS} FROM chunks ORDER BY path").fetchall()
    files = store.conn.execute(
        "SELECT path, source, size, mtime_ns, hash, lines FROM files ORDER BY path"
    ).fetchall()
    return chunks, files


def test_the_batch_writes_what_row_by_row_writes(tmp_path: Path) -> None:
    notes = _notes(_raws(tmp_path / "memory", ODD))
    with Store(tmp_path / "a.sqlite") as batch, Store(tmp_path / "b.sqlite") as rows:
        change, paths = insert_provisional(batch, notes)
        for row, chunk in notes:
            rows.replace_file(row, [chunk], None)
        assert _tables(batch) == _tables(rows)
        assert paths == {row.path for row, _ in notes}
        assert sorted(change.inserted) == [
            r[0] for r in batch.conn.execute("SELECT id FROM chunks")
        ]
        assert (change.removed, change.added, change.generation) == ([], [], None)
        for store in (batch, rows):  # every note's words are in the keyword table
            hits = store.conn.execute(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'heron'"
            ).fetchone()
            assert hits == (len(ODD),)
        beta = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'beta'"
        assert batch.conn.execute(beta).fetchall() == rows.conn.execute(beta).fetchall()


def test_a_note_the_index_holds_by_now_is_left_alone(tmp_path: Path) -> None:
    """A note written to the index after the sync listed it (a remember, say) keeps its rows:
    the batch never replaces one, the chunked pass does."""
    notes = _notes(_raws(tmp_path / "memory", ODD))
    held_row, _ = notes[1]
    kept = NewChunk(1, 1, "the note as remembered", "h-kept", embed=False)
    with Store(tmp_path / "a.sqlite") as store:
        store.replace_file(held_row, [kept], None)
        before = store.conn.execute(f"{ROWS} FROM chunks").fetchall()
        change, paths = insert_provisional(store, notes)
        assert paths == {row.path for row, _ in notes} - {held_row.path}
        assert len(change.inserted) == len(notes) - 1
        held = store.conn.execute(f"{ROWS} FROM chunks WHERE path = ?", (held_row.path,))
        assert held.fetchall() == before
        assert store.file(held_row.path) == held_row
        # and a second batch of the same notes writes nothing at all
        again, paths = insert_provisional(store, notes)
        assert (again.inserted, paths) == ([], set())
        total = store.conn.execute("SELECT count(*) FROM chunks_fts").fetchone()
        assert total == (len(notes),)


def test_the_vectors_generation_is_reported_as_it_is(tmp_path: Path) -> None:
    notes = _notes(_raws(tmp_path / "memory", ODD))
    with Store(tmp_path / "a.sqlite") as store:
        store.set_identity(Identity("hash", "hash", "hash", 4, "{}"))
        row = FileRow(str(tmp_path / "v.md"), "memory", 1, 1, "h", 1)
        vector = {"hv": np.ones(4, dtype=np.float32)}
        generation = store.replace_file(row, [NewChunk(1, 1, "v", "hv")], vector).generation
        assert generation
        change, _ = insert_provisional(store, notes)
        assert change.generation == generation


def _thread_names() -> set[str]:
    return {t.name for t in threading.enumerate() if t.is_alive()}


def test_an_error_while_reading_reaches_the_writer(tmp_path: Path) -> None:
    raws = _raws(tmp_path / "memory", ODD)

    def notes() -> Iterator[Raw]:
        yield from raws[:2]
        raise RuntimeError("the disk went away")

    with Store(tmp_path / "a.sqlite") as store, pytest.raises(RuntimeError, match="disk"):
        first_pass.write(store, notes(), lambda: False, lambda _: None)
    assert "recalld-first-pass" not in _thread_names()


def test_an_error_while_writing_stops_the_reading_thread(tmp_path: Path) -> None:
    """The writer fails on its first batch while the reader has far more notes to read: the
    reading thread stops (it never waits on a queue nobody reads) and no note is left read."""
    raws = _raws(tmp_path / "memory", ODD)
    read = []

    def notes() -> Iterator[Raw]:
        for i in range(first_pass.BATCH_FILES * 20):
            read.append(i)
            yield raws[i % len(raws)]

    def fail(_: object) -> None:
        raise OSError("database or disk is full")

    with Store(tmp_path / "a.sqlite") as store, pytest.raises(OSError, match="full"):
        first_pass.write(store, notes(), lambda: False, fail)
    assert "recalld-first-pass" not in _thread_names()
    assert len(read) < first_pass.BATCH_FILES * 5  # a few batches ahead at most


def test_a_stop_ends_the_pass_between_notes(tmp_path: Path) -> None:
    raws = _raws(tmp_path / "memory", {f"n{i:04d}.md": b"heron %d\n" % i for i in range(1200)})
    asked = 0

    def stopping() -> bool:
        nonlocal asked
        asked += 1
        return asked > 700

    with Store(tmp_path / "a.sqlite") as store:
        written = first_pass.write(store, raws, stopping, lambda _: None)
        assert len(written) == 700
        assert store.conn.execute("SELECT count(*) FROM files").fetchone() == (700,)
