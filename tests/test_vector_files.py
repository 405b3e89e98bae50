"""The saved matrix beside the index: reused only when it is exactly the index's vectors."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from recalld.index import vector_index
from recalld.index.int8_scan import ROW_BIAS
from recalld.index.store import FileChange, FileRow, NewChunk, Store
from recalld.index.vector_files import VectorFiles
from recalld.index.vector_holder import VectorHolder
from recalld.index.vector_index import VectorIndex
from test_vector_index import DIMS, _row_by_row, _store_with_vectors, _unit


def _load(store: Store, index_path: Path) -> VectorIndex:
    return VectorIndex.load(store, DIMS, folder=index_path.parent, files=VectorFiles(index_path))


def _same_as_index(index: VectorIndex, store: Store) -> None:
    truth = _row_by_row(store)
    assert len(index) == len(truth)
    got = index.vectors_of(list(truth))
    for cid, blob in truth.items():
        np.testing.assert_array_equal(got[cid], np.frombuffer(blob, dtype="<f4"))


def _write(store: Store, name: str, seed: int, chunks: int = 3) -> FileChange:
    vecs = _unit(chunks, DIMS, seed)
    new = [NewChunk(j + 1, j + 1, f"{name} {j}", f"{name}-{j}") for j in range(chunks)]
    row = FileRow(f"/m/{name}.md", "memory", 1, 1, name, chunks)
    return store.replace_file(row, new, {c.hash: vecs[i] for i, c in enumerate(new)})


@pytest.fixture
def prefilter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_index, "PREFILTER_MIN_ROWS", 500)


@pytest.mark.usefixtures("prefilter")
def test_clean_close_is_reused_with_its_changes_and_prefilter(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=20, per_file=50)
    store.ensure_vectors_epoch()
    index = _load(store, path)
    assert index.loaded_from == "index" and index._proj is not None
    for change in (_write(store, "new", 3), store.remove_file("/m/f2.md")):
        index.apply(change.removed, change.added, change.generation)
    low, scale = index._low[: len(index)].copy(), index._scale.copy()
    index.close(save=True)
    assert (tmp_path / "index.sqlite.vectors" / "meta.json").exists()
    again = _load(store, path)
    assert again.loaded_from == "saved files" and again._proj is not None
    _same_as_index(again, store)
    n = len(again)  # the projected rows came back as the prefilter scans them
    np.testing.assert_array_equal(again._low[:n], low)
    np.testing.assert_array_equal(again._scale, scale)
    want = again._matrix[:n] @ again._proj  # int8 steps, clipped past the fitted range
    got = (again._low[:n].astype(np.float32) - ROW_BIAS) * again._scale[None, :]
    inside = np.abs(want) <= 127 * again._scale[None, :]
    assert np.all((np.abs(got - want) <= again._scale[None, :] * 0.5 + 1e-6) | ~inside)
    q = _unit(1, DIMS, 3)[0]
    assert again.search(q, 1)[0][0] == max(_row_by_row(store)) - 2  # the "new" file's first
    # Only read so far: still vouched for (a stop without a close keeps it usable) ...
    assert (tmp_path / "index.sqlite.vectors" / "meta.json").exists()
    change = _write(store, "newer", 4)
    again.apply(change.removed, change.added, change.generation)
    # ... but once a row changed, a crash from here must not leave it vouched for.
    assert not (tmp_path / "index.sqlite.vectors" / "meta.json").exists()
    store.close()


def test_a_write_the_matrix_never_saw_means_reading_the_index(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=4, per_file=10)
    index = _load(store, path)
    other = Store(path)  # another process's write, never applied to this matrix
    _write(other, "elsewhere", 5)
    other.close()
    index.close(save=True)  # saved as of its own generation, which is not the index's now
    again = _load(store, path)
    assert again.loaded_from == "index"
    _same_as_index(again, store)
    # A change applied out of order (a gap) is never saved as current either.
    _write(store, "late", 6)
    change = _write(store, "later", 7)
    again.apply(change.removed, change.added, change.generation)  # "late" was missed
    again.close(save=True)
    assert not (tmp_path / "index.sqlite.vectors" / "meta.json").exists()
    assert _load(store, path).loaded_from == "index"
    store.close()


def test_sigkill_while_serving_reads_the_index_again(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=4, per_file=10)
    index = _load(store, path)
    index.close(save=True)
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_vector_files import _load, _write
        from recalld.index.store import Store
        from pathlib import Path
        path = Path({str(path)!r})
        store = Store(path)
        index = _load(store, path)
        assert index.loaded_from == "saved files"
        change = _write(store, "killed", 9)
        index.apply(change.removed, change.added, change.generation)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    again = _load(store, path)
    assert again.loaded_from == "index"
    _same_as_index(again, store)  # the killed process's write included
    store.close()


def test_rebuilt_index_and_replaced_files_are_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=4, per_file=10)
    first = _load(store, path)
    second = _load(store, path)  # a rebuild's matrix: a new rows file over the first's
    assert first.search(_unit(1, DIMS, 7)[0], 3) == second.search(_unit(1, DIMS, 7)[0], 3)
    first.close(save=True)  # its rows are no longer the folder's: not saved
    assert not (tmp_path / "index.sqlite.vectors" / "meta.json").exists()
    second.close(save=True)
    folder = tmp_path / "index.sqlite.vectors"
    rows = folder / "rows.f32"
    shutil.copy(rows, tmp_path / "copy")
    os.replace(tmp_path / "copy", rows)  # same bytes, another file
    assert _load(store, path).loaded_from == "index"
    store.close()
    # A new index at the same path (a rebuild's swap): another epoch.
    third = _load(Store(path), path)
    third.close(save=True)
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    fresh = _store_with_vectors(path, files=4, per_file=10)
    got = _load(fresh, path)
    assert got.loaded_from == "index"
    _same_as_index(got, fresh)
    fresh.close()


def test_damaged_meta_or_short_files_read_the_index(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=4, per_file=10)
    folder = tmp_path / "index.sqlite.vectors"
    _load(store, path).close(save=True)
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "format": 1}))  # low.f32 row by row
    assert _load(store, path).loaded_from == "index"
    _load(store, path).close(save=True)
    (folder / "meta.json").write_text("{not json")
    assert _load(store, path).loaded_from == "index"
    _load(store, path).close(save=True)
    (folder / "ids.i64").write_bytes(b"\0" * 8)  # fewer ids than saved
    got = _load(store, path)
    assert got.loaded_from == "index"
    _same_as_index(got, store)
    store.close()


def test_files_are_private_and_a_dead_writers_leftovers_go(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=2, per_file=5)
    folder = tmp_path / "index.sqlite.vectors"
    folder.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    leftover = folder / f".low.u8.{int(dead.stdout)}.tmp"  # a save killed half-way
    leftover.write_bytes(b"\0" * 4096)
    mine = folder / f".other.{os.getpid()}.tmp"  # a live process's own: not touched
    mine.write_bytes(b"")
    _load(store, path).close(save=True)
    assert not leftover.exists() and mine.exists()
    for name in ("rows.f32", "ids.i64", "meta.json"):
        assert (folder / name).stat().st_mode & 0o077 == 0, name
    store.close()


@pytest.mark.usefixtures("prefilter")
def test_files_the_saved_matrix_does_not_use_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=20, per_file=50)
    store.ensure_vectors_epoch()
    folder = tmp_path / "index.sqlite.vectors"
    folder.mkdir()
    old = folder / "low.f32"  # format 2's prefilter rows, left by an older recalld
    old.write_bytes(b"\0" * 4096)
    index = _load(store, path)
    assert index._proj is not None
    index.close(save=True)
    assert not old.exists()
    for name in ("low.u8", "scale.f32", "proj.f32", "meta.json", "rows.f32", "ids.i64"):
        assert (folder / name).exists(), name
    again = _load(store, path)
    assert again.loaded_from == "saved files"
    _same_as_index(again, store)
    again.close()
    store.close()


def test_a_save_without_prefilter_removes_an_earlier_ones_files(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=2, per_file=5)  # far under the prefilter's rows
    store.ensure_vectors_epoch()
    folder = tmp_path / "index.sqlite.vectors"
    folder.mkdir()
    stale = [folder / name for name in ("low.u8", "scale.f32", "proj.f32")]
    for f in stale:
        f.write_bytes(b"\0" * 1024)
    index = _load(store, path)
    assert index._proj is None
    index.close(save=True)
    assert not any(f.exists() for f in stale)
    again = _load(store, path)
    assert again.loaded_from == "saved files"  # without the files it never needed
    _same_as_index(again, store)
    again.close()
    store.close()


@pytest.mark.usefixtures("prefilter")
def test_a_save_right_after_the_load_serves_a_start_that_never_closed(tmp_path: Path) -> None:
    """The background save after a vec0 load: a process that exits without closing (a quick
    stop, ``kill -9``) leaves a matrix the next start maps, as long as no row changed."""
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=20, per_file=50)
    store.ensure_vectors_epoch()
    index = _load(store, path)
    assert index.loaded_from == "index"
    assert index.save() and index.save()  # the second finds it saved already
    q = _unit(1, DIMS, 11)[0]
    want = index.search(q, 10)
    again = _load(store, path)  # no close of the first: as after an exit without one
    assert again.loaded_from == "saved files"
    assert again.search(q, 10) == want
    _same_as_index(again, store)
    third = _load(store, path)  # searches alone never take the vouch away
    assert third.loaded_from == "saved files"
    store.close()


def test_a_change_during_the_save_is_never_vouched_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=4, per_file=10)
    index = _load(store, path)
    write_parts = VectorFiles.write_parts
    changes = [_write(store, "meanwhile", 5)]

    def racing(self: VectorFiles, *args: object) -> bool:
        done = write_parts(self, *args)  # type: ignore[arg-type]
        while changes:  # a delta lands between the files and meta.json
            change = changes.pop()
            index.apply(change.removed, change.added, change.generation)
        return done

    monkeypatch.setattr(VectorFiles, "write_parts", racing)
    assert not index.save()
    assert not (tmp_path / "index.sqlite.vectors" / "meta.json").exists()
    assert index.save()  # the next save vouches for the matrix with the delta
    again = _load(store, path)
    assert again.loaded_from == "saved files"
    _same_as_index(again, store)
    store.close()


@pytest.mark.usefixtures("prefilter")
def test_sigkill_in_the_middle_of_a_save_leaves_no_vouched_matrix(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = _store_with_vectors(path, files=20, per_file=50)
    store.ensure_vectors_epoch()
    _load(store, path).close(save=True)  # a vouched matrix of the state before the write
    phases = tmp_path / "phases"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_vector_files import _load, _write
        from recalld.index import vector_index
        from recalld.index.store import Store
        from pathlib import Path
        vector_index.PREFILTER_MIN_ROWS = 500
        path = Path({str(path)!r})
        store = Store(path)
        index = _load(store, path)
        assert index.loaded_from == "saved files"
        change = _write(store, "killed", 9, chunks=40)
        index.apply(change.removed, change.added, change.generation)
        index.save()  # paused half-way (RECALLD_TEST_PAUSE_AT), killed there
        """
    )
    env = {
        **os.environ,
        "RECALLD_TEST_PHASE_LOG": str(phases),
        "RECALLD_TEST_PAUSE_AT": "vectors-saving",
    }
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (phases.exists() and "vectors-saving" in phases.read_text()):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(10)
    assert not (tmp_path / "index.sqlite.vectors" / "meta.json").exists()
    again = _load(store, path)
    assert again.loaded_from == "index"
    _same_as_index(again, store)  # the killed process's write included
    store.close()


def _as_format_3(folder: Path) -> None:
    """Rewrite a saved matrix as recalld wrote it before issue 40: ``low.i8``, int8 transposed."""
    meta = json.loads((folder / "meta.json").read_text())
    count, rdims = int(meta["count"]), int(meta["rdims"])
    if rdims:
        rows = np.fromfile(folder / "low.u8", dtype=np.uint8).reshape(count, rdims)
        old = (rows.astype(np.int16) - ROW_BIAS).astype(np.int8).T
        np.ascontiguousarray(old).tofile(folder / "low.i8")
        (folder / "low.u8").unlink()
    (folder / "meta.json").write_text(json.dumps({**meta, "format": 3}))


def _saved_in_format_3(tmp_path: Path) -> tuple[Store, Path, Path]:
    """A matrix saved at a clean close, then rewritten as format 3: (store, path, folder)."""
    path = tmp_path / "index.sqlite"
    folder = tmp_path / "index.sqlite.vectors"
    store = _store_with_vectors(path, files=20, per_file=50)
    store.ensure_vectors_epoch()
    _load(store, path).close(save=True)
    _as_format_3(folder)
    return store, path, folder


@pytest.mark.usefixtures("prefilter")
def test_a_format_3_matrix_is_converted_at_load_and_saved_anew(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    folder = tmp_path / "index.sqlite.vectors"
    store = _store_with_vectors(path, files=20, per_file=50)
    store.ensure_vectors_epoch()
    index = _load(store, path)
    queries = _unit(5, DIMS, 21)
    want = [index.search(q, 10) for q in queries]
    low = index._low[: len(index)].copy()
    index.close(save=True)
    _as_format_3(folder)
    again = _load(store, path)
    assert again.loaded_from == "saved files" and again.unsaved
    np.testing.assert_array_equal(again._low[: len(again)], low)
    assert [again.search(q, 10) for q in queries] == want
    assert again.save()  # in format 4 now, and the transposed file is gone
    assert json.loads((folder / "meta.json").read_text())["format"] == 4
    assert (folder / "low.u8").exists() and not (folder / "low.i8").exists()
    assert not again.unsaved
    third = _load(store, path)
    assert third.loaded_from == "saved files" and not third.unsaved
    np.testing.assert_array_equal(third._low[: len(third)], low)
    assert [third.search(q, 10) for q in queries] == want
    # Converted but not yet saved anew: its first change still takes the vouch away.
    _as_format_3(folder)
    fourth = _load(store, path)
    change = _write(store, "after", 22)
    fourth.apply(change.removed, change.added, change.generation)
    assert not (folder / "meta.json").exists()
    store.close()


@pytest.mark.usefixtures("prefilter")
def test_a_damaged_format_3_matrix_reads_the_index(tmp_path: Path) -> None:
    store, path, folder = _saved_in_format_3(tmp_path)
    with (folder / "low.i8").open("r+b") as fh:
        fh.truncate(fh.seek(0, os.SEEK_END) - 1)  # one byte short
    got = _load(store, path)
    assert got.loaded_from == "index"
    _same_as_index(got, store)
    store.close()


def _format(folder: Path) -> int | None:
    """The saved matrix's format, or None while no meta.json vouches for it."""
    try:
        return int(json.loads((folder / "meta.json").read_text())["format"])
    except FileNotFoundError:
        return None


@pytest.mark.usefixtures("prefilter")
def test_the_holder_saves_a_converted_matrix_in_the_background(tmp_path: Path) -> None:
    store, path, folder = _saved_in_format_3(tmp_path)

    @contextlib.contextmanager
    def connection() -> Iterator[Store]:
        yield store

    holder = VectorHolder(path, connection, saved=True)
    matrix = holder.get(DIMS)
    assert matrix.loaded_from == "saved files"
    deadline = time.monotonic() + 30
    # meta.json is removed, then written last for the new files; format 3's rows go after it
    while _format(folder) != 4 or (folder / "low.i8").exists():
        assert time.monotonic() < deadline, "not converted, or format 3's rows left behind"
        time.sleep(0.05)
    holder.close()
    assert _load(store, path).loaded_from == "saved files"
    store.close()
