"""The engine's read connections: one warm reader for a lone client, and bulk reads that leave
no pages of the index mapped in the daemon (idle RSS). Real index files, keyword-only engine."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from conftest import make_engine, write
from recalld.engine import Engine
from recalld.retrieval import keyword_preload

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
WORDS += ["hotel", "india", "juliet", "kilo", "lima", "mike"]


def _mapped_kb(path: Path) -> int:
    """Resident kB of this process's maps of ``path`` (every mapping counted, as RSS does)."""
    total, current = 0, None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            if not parts[0].endswith(":"):  # a mapping's header: range, perms, ..., path
                current = parts[5] if len(parts) > 5 else None
            elif parts[0] == "Rss:" and current == str(path):
                total += int(parts[1])
    return total


class HashEmbedder:
    """Vectors from a hash of each text: no model, so a big index builds in a second."""

    kind = "test"
    model = "hash"
    dims = 384
    max_input_tokens = 256
    key = "test||hash|384"
    label = "test/hash"

    def embed(self, texts: Sequence[str], *, query: bool = False) -> npt.NDArray[np.float32]:
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dims)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def _big_index(home: Path, notes: int = 1500, embedder: object = None) -> Engine:
    for i in range(notes):
        body = " ".join(f"{WORDS[(i * 7 + j) % len(WORDS)]}{(i * j) % 997}" for j in range(60))
        write(home / "memory" / f"n{i:04d}.md", f"# note {i}\n\n{body} common words here\n")
    engine = make_engine(home, embedder)
    engine.sync()
    return engine


def test_a_lone_client_reuses_one_reader(home: Path) -> None:
    write(home / "memory" / "a.md", "a note\n")
    engine = make_engine(home, None)
    try:
        engine.sync()
        both = threading.Barrier(2)
        seen: list[int] = []

        def hold() -> None:
            with engine.reader() as store:
                seen.append(id(store))
                both.wait(timeout=10)  # two readers open at once: the pool holds two

        threads = [threading.Thread(target=hold) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(seen)) == 2
        with engine.reader() as store:
            last = id(store)
        for _ in range(5):  # the one returned last is taken again, every time
            with engine.reader() as store:
                assert id(store) == last
    finally:
        engine.close()


@pytest.mark.slow
def test_counts_warm_and_read_ahead_leave_the_index_unmapped(home: Path) -> None:
    engine = _big_index(home)
    try:
        size_kb = engine.index_path.stat().st_size // 1024
        assert size_kb > 3000  # big enough for a whole-file read to show
        assert engine.postings is not None
        engine.warm()
        with engine.reader():  # as status counts: under the swap lock, a pooled reader out
            counts = engine.row_counts.get()
        assert counts["chunks"] >= 1500
        keyword_preload.preload(engine.postings, engine.readers.scan_reader)
        assert engine.postings.nbytes > 0
        # Before, each of these read the file through a pooled reader's map, and the pages
        # stayed resident: most of the file per reader.
        assert _mapped_kb(engine.index_path) < size_kb // 10
        res = engine.searcher.search({"query": "charlie common", "mode": "keyword"})
        assert res["results"]  # the pooled readers still serve searches from their map
    finally:
        engine.close()


@pytest.mark.slow
def test_the_matrix_loaded_by_a_search_leaves_the_index_unmapped(home: Path) -> None:
    engine = _big_index(home, embedder=HashEmbedder())
    try:
        size_kb = engine.index_path.stat().st_size // 1024
        # No warm(): the first search loads the matrix from vec0 (as after an index swap),
        # through a connection of its own, not the search's pooled reader.
        res = engine.searcher.search({"query": "charlie common"})
        assert res["mode"] == "hybrid" and res["results"]
        assert engine.matrix.load_s is not None
        assert _mapped_kb(engine.index_path) < size_kb // 4  # its own reads: ~1.5 of 13 MB
    finally:
        engine.close()
