"""Embedding ahead of the writer (issue 16): the daemon's back-fill embeds on a thread of its own,
newest offer first, and the writer writes only vectors of text a chunk still has.

The thread and the engine steps are driven directly with a gated embedder, so that an edit can
land while a call is in flight; the real model and daemon run in tests/test_keyword_first.py.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from conftest import make_engine, write
from recalld.ingest.embed_ahead import AHEAD_CALL, AHEAD_CALL_CHARS, EmbedAhead


class GatedEmbedder:
    """Vectors from a hash of each text; each call waits for ``gate`` and is recorded."""

    kind = "test"
    model = "gated"
    dims = 8
    max_input_tokens = 256
    key = "test||gated|8"
    label = "test/gated"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.fail: str | None = None
        self.gated_from = 0  # calls of fewer texts pass the gate

    def embed(self, texts: Sequence[str], *, query: bool = False) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        if len(texts) >= self.gated_from:
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
        if self.fail:
            raise RuntimeError(self.fail)
        return np.stack([vector_of(t) for t in texts]) if texts else np.zeros((0, 8), np.float32)


def vector_of(text: str) -> npt.NDArray[np.float32]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
    return v / np.linalg.norm(v)


def _rows(n: int, prefix: str = "h") -> list[tuple[str, str]]:
    return [(f"{prefix}{i}", f"text {prefix}{i}") for i in range(n)]


def test_offered_texts_are_embedded_in_calls_newest_offer_first() -> None:
    emb = GatedEmbedder()
    emb.gate.clear()
    ahead = EmbedAhead(emb)
    try:
        ahead.offer(_rows(AHEAD_CALL + 40))
        assert emb.entered.wait(10)
        assert len(emb.calls[0]) == AHEAD_CALL  # a full call, in the offered order
        assert emb.calls[0][0] == "text h0"
        # A newer offer replaces the old one while a call is in flight: an edit's chunk goes
        # first, texts no longer offered are dropped, the one being embedded is not repeated.
        ahead.offer([("new", "text new"), ("h0", "text h0"), *_rows(AHEAD_CALL + 40)[-5:]])
        assert ahead.collect(0.05).vectors == {}  # still in flight: nothing yet
        emb.gate.set()
        got = ahead.collect(10)
        assert ahead.idle()
        rest = [f"text h{i}" for i in range(AHEAD_CALL + 35, AHEAD_CALL + 40)]
        assert emb.calls[1] == ["text new", *rest]
        assert len(emb.calls) == 2
        assert len(got.vectors) == AHEAD_CALL + 6 and got.error is None
        assert np.array_equal(got.vectors["new"], vector_of("text new"))
        assert ahead.collect(0).vectors == {}  # each vector is handed over once
    finally:
        ahead.close()


def test_a_call_holds_at_most_its_share_of_text() -> None:
    emb = GatedEmbedder()
    ahead = EmbedAhead(emb)
    try:
        long = "w" * 4000
        ahead.offer([(f"l{i}", long + str(i)) for i in range(80)])
        got = ahead.collect(10)
        assert len(got.vectors) == 80
        assert all(sum(map(len, call)) <= AHEAD_CALL_CHARS for call in emb.calls)
        assert len(emb.calls) == 3  # 32 + 32 + 16 texts of ~4 KB
    finally:
        ahead.close()


def test_a_provider_error_is_said_once_and_the_thread_waits_for_the_next_offer() -> None:
    emb = GatedEmbedder()
    emb.fail = "connection refused"
    ahead = EmbedAhead(emb)
    try:
        ahead.offer(_rows(3))
        got = ahead.collect(10)
        assert got.vectors == {} and got.error == "test/gated: connection refused"
        assert len(emb.calls) == 1  # paused: not retried in a loop
        assert ahead.collect(0.2).error is None
        assert len(emb.calls) == 1
        emb.fail = None
        ahead.offer(_rows(3))  # the daemon's retry
        got = ahead.collect(10)
        assert sorted(got.vectors) == ["h0", "h1", "h2"] and got.error is None
    finally:
        ahead.close()


def _stored(engine: object, home: Path) -> dict[str, npt.NDArray[np.float32]]:
    """Every chunk's text -> its stored vector."""
    from recalld.index.store import Store

    with Store(home / "index.sqlite", readonly=True) as store:
        rows = store.conn.execute("SELECT id, text FROM chunks").fetchall()
        blobs = store.vectors([int(r[0]) for r in rows])
    return {
        str(text): np.frombuffer(blobs[int(cid)], dtype="<f4")
        for cid, text in rows
        if int(cid) in blobs
    }


def _daemon_engine(home: Path, emb: GatedEmbedder, notes: int = 0) -> Any:
    """An in-process engine run as the daemon runs it (keyword first, vectors ahead)."""
    for i in range(notes):
        write(home / "memory" / f"n{i}.md", f"# {i}\n\nan older note, number {i} " + "w " * i)
    engine = make_engine(home, emb)
    engine.keyword_first = True
    return engine


def _steps(engine: Any, most: int = 200) -> int:
    """The back-fill steps the daemon queues while ``more`` is set; returns how many ran."""
    steps = 0
    while engine.vector_backlog.more and steps < most:
        engine.sync([])
        steps += 1
    return steps


def test_an_edit_during_a_call_never_gets_the_vector_of_its_old_text(home: Path) -> None:
    emb = GatedEmbedder()
    engine = _daemon_engine(home, emb)
    try:
        note = write(home / "memory" / "a.md", "# a\n\nthe first version of the note\n")
        write(home / "memory" / "b.md", "# b\n\nanother note that stays\n")
        emb.gate.clear()
        report = engine.sync()  # keyword rows written; the step waits a second, then returns
        assert report.vectors_pending and emb.entered.is_set()
        assert engine.searcher.search({"query": "first version", "mode": "keyword"})["results"]
        write(note, "# a\n\nthe second version, edited while its vectors were embedded\n")
        engine.sync([note])  # written at once: the writer does not wait for the call
        hits = engine.searcher.search({"query": "edited while", "mode": "keyword"})["results"]
        assert hits and hits[0]["path"].endswith("a.md")
        emb.gate.set()
        _steps(engine)
        assert engine.vector_backlog.pending == 0
        stored = _stored(engine, home)
        assert stored and all(np.array_equal(v, vector_of(t)) for t, v in stored.items())
        assert not any("first version" in t for t in stored)
        assert any("second version" in t for t in stored)
        text = next(t for t in stored if "second version" in t)
        res = engine.searcher.search(
            {"query": text, "mode": "vector"}
        )  # the same text, the same vector
        assert res["results"][0]["path"].endswith("a.md")
    finally:
        engine.close()


def test_a_provider_that_fails_ahead_is_reported_and_nothing_is_written(home: Path) -> None:
    emb = GatedEmbedder()
    emb.fail = "503 from the provider"
    engine = _daemon_engine(home, emb)
    try:
        write(home / "memory" / "a.md", "# a\n\nsome text to embed\n")
        report = engine.sync()
        assert report.embed_error and "503 from the provider" in report.embed_error
        assert not report.vectors_pending  # the daemon's retry timer takes over, no busy loop
        assert engine.vector_backlog.pending > 0 and len(emb.calls) == 1
        emb.fail = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the daemon's retries (the breaker waits a second)
            report = engine.sync()
            if not report.embed_error:
                break
            time.sleep(0.5)
        assert report.embed_error is None and engine.vector_backlog.pending == 0
    finally:
        engine.close()


@pytest.mark.parametrize("keyword_first", [False, True])
def test_inline_and_ahead_give_the_same_vectors(home: Path, keyword_first: bool) -> None:
    engine = _daemon_engine(home, GatedEmbedder(), notes=30)
    engine.keyword_first = keyword_first
    try:
        engine.sync()
        _steps(engine)
        stored = _stored(engine, home)
        assert len(stored) >= 30
        assert all(np.array_equal(v, vector_of(t)) for t, v in stored.items())
    finally:
        engine.close()


def test_a_backlog_longer_than_the_kept_head_is_filled_to_the_end(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's steps keep going until no chunk is due: a step that used up the kept head
    of due ids scans again instead of saying it is done (a 10k-file first sync stopped at
    4,081 of 25,413 vectors that way until a later edit or retry)."""
    from recalld.ingest import vector_backfill

    monkeypatch.setattr(vector_backfill, "DUE_HEAD", 20)
    monkeypatch.setattr(vector_backfill, "AHEAD_OFFER", 8)
    engine = _daemon_engine(home, GatedEmbedder(), notes=40)
    try:
        engine.sync()
        steps = _steps(engine)
        assert engine.vector_backlog.pending == 0, (steps, engine.vector_backlog.as_dict())
        assert len(_stored(engine, home)) == engine.vector_backlog.total >= 40
    finally:
        engine.close()


def test_an_edit_during_a_big_backfill_gets_its_vectors_in_its_own_sync(home: Path) -> None:
    emb = GatedEmbedder()
    engine = _daemon_engine(home, emb, notes=40)
    try:
        emb.gate.clear()  # the thread's call of the backlog stays in flight
        emb.gated_from = 2  # the edit's own call of one text is not held
        engine.sync()
        assert emb.entered.is_set() and engine.vector_backlog.pending > 40 - 1
        note = write(home / "memory" / "fresh.md", "# fresh\n\nwritten during the back-fill\n")
        engine.sync([note])
        stored = _stored(engine, home)
        assert [t for t in stored] == [t for t in stored if "during the back-fill" in t]
        assert stored, "the edit's chunk has its vector, the backlog's call is still held"
        emb.gate.set()
        _steps(engine)
        stored = _stored(engine, home)
        assert engine.vector_backlog.pending == 0 and len(stored) == engine.vector_backlog.total
        assert all(np.array_equal(v, vector_of(t)) for t, v in stored.items())
    finally:
        engine.close()
