"""The vector matrix: bulk load from vec0's storage, scratch file, concurrent scans, masks."""

from __future__ import annotations

import contextlib
import resource
import signal
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from recalld.index import vector_load
from recalld.index.int8_scan import ROW_BIAS
from recalld.index.rescoring import SAMPLE_STRIDE, largest
from recalld.index.rwlock import ReadWriteLock
from recalld.index.store import FileRow, Identity, NewChunk, Store
from recalld.index.vector_index import VectorIndex

F32 = npt.NDArray[np.float32]
DIMS = 32


def _unit(rows: int, dims: int, seed: int) -> F32:
    mat = np.random.default_rng(seed).normal(size=(rows, dims)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    return mat


def _store_with_vectors(path: Path, files: int, per_file: int, dims: int = DIMS) -> Store:
    """A real index: ``files`` files of ``per_file`` chunks, each with a vector."""
    store = Store(path)
    store.set_identity(Identity("k", "t/m", "m", dims, "{}"))
    mat = _unit(files * per_file, dims, 7)
    for f in range(files):
        chunks = [NewChunk(j + 1, j + 1, f"text {f}-{j}", f"h{f}-{j}") for j in range(per_file)]
        vecs = {c.hash: mat[f * per_file + j] for j, c in enumerate(chunks)}
        store.replace_file(FileRow(f"/m/f{f}.md", "memory", 1, 1, f"fh{f}", per_file), chunks, vecs)
    return store


def _row_by_row(store: Store) -> dict[int, bytes]:
    return {i: bytes(b) for i, b in store.conn.execute("SELECT rowid, embedding FROM chunks_vec")}


def test_bulk_load_reads_every_vector_with_deletions_gaps(tmp_path: Path) -> None:
    store = _store_with_vectors(tmp_path / "index.sqlite", files=60, per_file=50)
    for f in range(0, 60, 7):  # free slots in the middle of vec0's chunks
        store.remove_file(f"/m/f{f}.md")
    truth = _row_by_row(store)
    scan = store.vector_scan()
    assert scan is not None and scan.count == len(truth)
    scan.close()
    index = VectorIndex.load(store, DIMS, folder=tmp_path)
    assert len(index) == len(truth) == 60 * 50 - 9 * 50
    got = index.vectors_of(list(truth))
    assert set(got) == set(truth)
    for cid, blob in truth.items():
        np.testing.assert_array_equal(got[cid], np.frombuffer(blob, dtype="<f4"))
    ids, rows, count = vector_load._load_row_by_row(store, DIMS, None)  # the portable path
    assert sorted(ids[:count].tolist()) == sorted(truth)
    assert rows.where == "memory"
    store.close()


def test_rows_live_in_an_unlinked_scratch_file(tmp_path: Path) -> None:
    store = _store_with_vectors(tmp_path / "index.sqlite", files=4, per_file=10)
    index = VectorIndex.load(store, DIMS, folder=tmp_path)
    assert index.storage == "file"
    maps = Path("/proc/self/maps").read_text()
    assert f"{tmp_path}/.recalld-vectors-" in maps or "(deleted)" in maps
    assert not list(tmp_path.glob(".recalld-vectors-*"))  # never visible, never left behind
    # Growing past the file's capacity keeps every row.
    extra = _unit(5000, DIMS, 3)
    index.apply([], [(100_000 + i, extra[i]) for i in range(5000)])
    assert len(index) == 5040
    np.testing.assert_array_equal(index.vectors_of([104_999])[104_999], extra[4999])
    assert index.search(extra[1234], 1)[0][0] == 101_234
    index.close()
    assert index.search(extra[1234], 1) == []
    store.close()


def test_no_scratch_folder_keeps_rows_in_memory(tmp_path: Path) -> None:
    store = _store_with_vectors(tmp_path / "index.sqlite", files=2, per_file=5)
    missing = tmp_path / "gone"
    index = VectorIndex.load(store, DIMS, folder=missing)  # cannot make a file there
    assert index.storage == "memory" and len(index) == 10
    store.close()


@pytest.mark.slow
def test_load_makes_no_full_copy(tmp_path: Path) -> None:
    """The old load held the blobs, a stacked copy and a float32 copy: 2-3x the matrix."""
    dims = 64  # many rows, so that the fixed cost (a vec0 chunk's blobs in flight) is small
    store = _store_with_vectors(tmp_path / "index.sqlite", files=40, per_file=400, dims=dims)
    matrix_bytes = 16_000 * dims * 4
    tracemalloc.start()
    try:
        index = VectorIndex.load(store, dims, folder=None)  # anonymous memory: counted here
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(index) == 16_000
    assert peak <= 1.5 * matrix_bytes, (peak, matrix_bytes)
    tracemalloc.start()
    try:
        filed = VectorIndex.load(store, dims, folder=tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(filed) == 16_000 and peak <= 0.4 * matrix_bytes, (peak, matrix_bytes)
    store.close()


def test_searches_scan_while_another_search_holds_the_index() -> None:
    mat = _unit(3000, DIMS, 5)
    index = VectorIndex(DIMS)
    index.apply([], [(i + 1, mat[i]) for i in range(3000)])
    results: list[list[tuple[int, float]]] = []
    with index._lock.shared():  # a scan in progress on another thread
        worker = threading.Thread(target=lambda: results.append(index.search(mat[9], 3)))
        worker.start()
        worker.join(5)
        assert not worker.is_alive(), "a second search waited for the first"
    assert results[0][0][0] == 10


def test_writer_waits_for_scans_and_new_scans_wait_for_writer() -> None:
    lock = ReadWriteLock()
    order: list[str] = []
    with lock.shared():

        def write() -> None:
            with lock.exclusive():
                order.append("write")

        def read() -> None:
            with lock.shared():
                order.append("read")

        w = threading.Thread(target=write)
        w.start()
        time.sleep(0.2)
        r = threading.Thread(target=read)
        r.start()
        time.sleep(0.2)
        assert order == []  # the writer waits for the scan; the new reader for the writer
    w.join(5)
    r.join(5)
    assert order == ["write", "read"]


def test_allowed_mask_by_id_map_with_unknown_ids() -> None:
    mat = _unit(30_000, DIMS, 11)
    index = VectorIndex(DIMS, prefilter_min_rows=10_000)
    index.apply([], [(2 * i + 1, mat[i]) for i in range(30_000)])
    allowed = np.array([-5, 1, 21, 41, 999_999_999, 2 * 29_999 + 1], dtype=np.int64)
    got = index.search(mat[20], 10, allowed)
    assert {cid for cid, _ in got} == {1, 21, 41, 59_999}
    assert got[0][0] == 41
    assert index.search(mat[0], 5, np.array([4, 6], dtype=np.int64)) == []  # even ids: none


def test_prefilter_candidates_hold_the_final_top_and_bench_measures_them() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench import prefilter

    mat = _unit(6000, DIMS, 12)
    ids = np.arange(6000, dtype=np.int64) * 3 + 7
    small = VectorIndex(DIMS, prefilter_min_rows=10**9)
    small.apply([], list(zip(ids.tolist(), mat, strict=True)))
    assert small.prefilter_candidates(mat[0], 10) is None  # no prefilter: nothing to measure
    index = VectorIndex(DIMS, prefilter_min_rows=5000)
    index.apply([], list(zip(ids.tolist(), mat, strict=True)))
    queries = _unit(20, DIMS, 14)
    for q in queries:
        cand = index.prefilter_candidates(q, 10)
        assert cand is not None and len(cand) == 2000  # PREFILTER_CANDIDATES rows, not all
        assert {cid for cid, _ in index.search(q, 10)} <= set(cand.tolist())
    recall = prefilter.measure(index, queries, mat, ids)
    assert 0.9 <= recall <= 1.0
    # A matrix that is not the index's: its best rows are not the candidates.
    assert prefilter.measure(index, queries, -mat, ids) < 0.1
    assert prefilter.cpu_class()


@pytest.mark.parametrize("prefilter", [True, False])
def test_apply_replaces_and_swap_removes(prefilter: bool) -> None:
    mat = _unit(2500, DIMS, 13)
    index = VectorIndex(DIMS, prefilter_min_rows=2000 if prefilter else 10**9)
    index.apply([], [(i + 1, mat[i]) for i in range(2500)])
    index.apply([1, 2, 3, 77_777], [(5, mat[0])])  # unknown id removed: ignored
    assert len(index) == 2497
    assert index.search(mat[0], 1)[0][0] == 5
    assert not index.vectors_of([1, 2, 3])
    np.testing.assert_array_equal(index.vectors_of([2500])[2500], mat[2499])
    if prefilter:  # the projected rows followed every add, swap-remove and growth
        n = len(index)
        assert index._proj is not None and index._low.shape[1] == index._proj.shape[1]
        want = index._matrix[:n] @ index._proj
        # int8 (stored + 128) with one scale per projected dimension: within half a step each.
        values = index._low[:n].astype(np.int16) - ROW_BIAS
        got = values.astype(np.float32) * index._scale[None, :]
        assert np.all(np.abs(got - want) <= index._scale[None, :] * 0.5 + 1e-6)
        assert np.abs(values).max() == 127  # the scales use the whole range
        assert (index._low[n : n + 3] == ROW_BIAS).all()  # the 3 vacated rows: int8 zeros


@contextlib.contextmanager
def _file_size_limit(nbytes: int) -> Iterator[None]:
    """Files of this process may not grow past ``nbytes`` (a disk that is full, for one test)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def test_full_disk_keeps_every_vector_in_memory(tmp_path: Path) -> None:
    store = _store_with_vectors(tmp_path / "index.sqlite", files=20, per_file=50)
    truth = _row_by_row(store)
    with _file_size_limit(64 * 1024):  # the matrix needs (1000 + 1024) x 128 bytes
        index = VectorIndex.load(store, DIMS, folder=tmp_path)
    assert index.storage == "memory" and len(index) == 1000
    got = index.vectors_of(list(truth))
    assert all(np.array_equal(got[c], np.frombuffer(b, dtype="<f4")) for c, b in truth.items())
    # Room for the load, not for growing: the rows move to memory, none is lost (no SIGBUS).
    with _file_size_limit(400 * 1024):
        index = VectorIndex.load(store, DIMS, folder=tmp_path)
        assert index.storage == "file"
        extra = _unit(3000, DIMS, 17)
        index.apply([], [(50_000 + i, extra[i]) for i in range(3000)])
    assert index.storage == "memory" and len(index) == 4000
    np.testing.assert_array_equal(index.vectors_of([52_999])[52_999], extra[2999])
    first = next(iter(truth))
    np.testing.assert_array_equal(
        index.vectors_of([first])[first], np.frombuffer(truth[first], dtype="<f4")
    )
    store.close()


def _same_top(values: npt.NDArray[np.float32], c: int) -> None:
    got = largest(values, c)
    assert len(got) == min(c, len(values))
    assert len(set(got.tolist())) == len(got)  # no position twice
    want = np.sort(values)[::-1][: len(got)]
    # The same multiset of scores as a full sort's c best (ties may pick other positions).
    np.testing.assert_array_equal(np.sort(values[got])[::-1], want)


@pytest.mark.parametrize("n", [1, 15, 100, 4_000, 100_003])
def test_largest_is_the_exact_top_c(n: int) -> None:
    rng = np.random.default_rng(n)
    values = rng.standard_normal(n).astype(np.float32)
    for c in (1, 7, 2_000, n - 1, n, n + 5):
        if c >= 1:
            _same_top(values, c)


def test_largest_with_ties_masks_and_orders_that_defeat_the_sample() -> None:
    rng = np.random.default_rng(3)
    n, c = 50_000, 2_000
    ties = rng.integers(0, 5, n).astype(np.float32)  # five distinct scores
    _same_top(ties, c)
    masked = rng.standard_normal(n).astype(np.float32)
    masked[rng.random(n) < 0.97] = -np.inf  # a filter leaving ~1,500 rows, fewer than c
    _same_top(masked, c)
    # The sampled positions hold the best scores: the cut is reached by fewer than c, so the
    # whole array is partitioned.
    spiky = rng.random(n).astype(np.float32)
    spiky[::SAMPLE_STRIDE] = 10 + np.arange(len(spiky[::SAMPLE_STRIDE]), dtype=np.float32)
    assert np.count_nonzero(spiky >= 10) > c // 2  # the cut falls among them
    _same_top(spiky, c)
    _same_top(np.sort(rng.standard_normal(n).astype(np.float32)), c)
