"""The exact rescoring of the prefilter's candidates into kept buffers."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from recalld.index import rescoring, vector_index
from recalld.index.rescoring import GatherBuffers
from recalld.index.vector_index import VectorIndex
from test_vector_index import DIMS, _store_with_vectors, _unit

F32 = npt.NDArray[np.float32]


def test_rescore_equals_the_allocating_gather_at_every_size() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((5_000, DIMS)).astype(np.float32)
    buffers = GatherBuffers()
    for n in (3_000, 10, 4_000, 0, 1, 2_500):  # grows, shrinks, empty
        rows = np.sort(rng.choice(len(matrix), n, replace=False)).astype(np.int64)
        q = rng.standard_normal(DIMS).astype(np.float32)
        got = buffers.rescore(matrix, rows, q)
        np.testing.assert_array_equal(got, np.take(matrix, rows, axis=0) @ q)
    # one buffer kept, as large as the largest gather so far
    assert buffers.kept_bytes() == 4_000 * DIMS * 4


def test_concurrent_rescoring_keeps_a_bounded_set_of_buffers() -> None:
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((20_000, DIMS)).astype(np.float32)
    buffers = GatherBuffers()
    jobs = [
        (
            np.sort(rng.choice(len(matrix), 2_000, replace=False)).astype(np.int64),
            rng.standard_normal(DIMS).astype(np.float32),
        )
        for _ in range(64)
    ]
    wrong: list[int] = []

    def work(start: int) -> None:
        for i in range(start, len(jobs), 8):
            rows, q = jobs[i]
            if not np.array_equal(
                buffers.rescore(matrix, rows, q), np.take(matrix, rows, axis=0) @ q
            ):
                wrong.append(i)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert 0 < buffers.kept_bytes() <= rescoring.KEPT_BUFFERS * 2_000 * DIMS * 4


def test_prefiltered_search_is_unchanged_by_the_kept_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same ranking and scores as gathering into a fresh array (the code before)."""
    monkeypatch.setattr(vector_index, "PREFILTER_MIN_ROWS", 500)
    store = _store_with_vectors(tmp_path / "index.sqlite", files=30, per_file=100)
    index = VectorIndex.load(store, DIMS, folder=tmp_path)
    assert index._proj is not None
    queries = _unit(20, DIMS, 9)
    kept = [index.search(q, 10) for q in queries]

    class Fresh:
        def rescore(self, matrix: F32, rows: npt.NDArray[np.int64], q: F32) -> F32:
            out: F32 = np.take(matrix, rows, axis=0) @ q
            return out

    monkeypatch.setattr(vector_index, "_GATHER", Fresh())
    assert [index.search(q, 10) for q in queries] == kept
    store.close()
