"""A search overlaps its two channels only while it is the only search running
(recalld.retrieval.channel_overlap). Real index files and engine; the embedder records the
thread each query embedding ran on."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from conftest import make_engine, write
from recalld.retrieval.channel_overlap import InFlight
from test_reader_pool import HashEmbedder


class ThreadNotingEmbedder(HashEmbedder):
    """Hash vectors (test_reader_pool); remembers on which thread each query was embedded."""

    kind = "local"  # embedded in-process like the packaged model (no provider-guard thread)

    def __init__(self) -> None:
        self.query_threads: list[str] = []

    def embed(self, texts: Sequence[str], *, query: bool = False) -> npt.NDArray[np.float32]:
        if query:
            self.query_threads.append(threading.current_thread().name)
        return super().embed(texts, query=query)


def test_in_flight_says_alone_only_to_the_only_search() -> None:
    flight = InFlight()
    with flight.search() as first:
        assert first
        with flight.search() as second:
            assert not second
            assert flight.running == 2
        assert flight.running == 1
    assert flight.running == 0
    with flight.search() as again:
        assert again  # the count went back down: alone again


def test_in_flight_counts_searches_on_many_threads() -> None:
    flight = InFlight()
    inside = threading.Barrier(4)
    alone: list[bool] = []
    lock = threading.Lock()

    def one() -> None:
        with flight.search() as was_alone:
            with lock:
                alone.append(was_alone)
            inside.wait(timeout=10)  # all four in flight at once

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(alone) == [False, False, False, True]  # only the first one in was alone
    assert flight.running == 0


def test_a_lone_search_overlaps_a_busy_one_runs_in_turn(home: Path) -> None:
    for i in range(40):
        write(home / "memory" / f"n{i:02d}.md", f"# note {i}\n\nthe deploy key rotation {i}\n")
    emb = ThreadNotingEmbedder()
    engine = make_engine(home, emb)
    try:
        engine.sync()
        caller = threading.current_thread().name
        emb.query_threads.clear()
        alone = engine.searcher.search({"query": "deploy key rotation"})
        assert emb.query_threads[-1] != caller  # embedded on the executor, beside the keywords
        assert emb.query_threads[-1].startswith("recalld-channel")

        with engine.in_flight.search():  # another search in flight
            busy = engine.searcher.search({"query": "deploy key rotation"})
        assert emb.query_threads[-1] == caller  # one channel after the other, on this thread
        assert engine.in_flight.running == 0

        # The same answer either way, from both channels.
        assert busy["mode"] == alone["mode"] == "hybrid"
        assert [r["path"] for r in busy["results"]] == [r["path"] for r in alone["results"]]
        assert [r["score"] for r in busy["results"]] == [r["score"] for r in alone["results"]]
    finally:
        engine.close()
