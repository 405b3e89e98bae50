"""QueryVector: the local and shared channels of one search embed the query once."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from recalld.embedding.base import Vectors
from recalld.embedding.local import LocalEmbedder
from recalld.embedding.query_vector import QueryVector


class _Slow:
    """Counts its calls; each takes ``delay`` seconds (so that two channels overlap)."""

    kind, model, dims, max_input_tokens = "test", "slow", 3, 512

    def __init__(self, delay: float = 0.2, fail: bool = False) -> None:
        self.calls = 0
        self.delay = delay
        self.fail = fail

    @property
    def key(self) -> str:
        return "test|slow|3"

    @property
    def label(self) -> str:
        return "test/slow"

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("provider down")
        return np.asarray([[float(len(t)), float(self.calls), 0.0] for t in texts], np.float32)


def _both(qv: QueryVector, emb: _Slow, text: str) -> list[Vectors]:
    """Two channels asking at the same time, as the local and shared ones do."""
    out: list[Vectors] = []
    threads = [threading.Thread(target=lambda: out.append(qv.get(emb, text))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_two_channels_of_one_search_share_one_embedding() -> None:
    qv, emb = QueryVector(), _Slow()
    a, b = _both(qv, emb, "billing retry budget")
    assert emb.calls == 1 and qv.made == 1
    assert np.array_equal(a, b)
    qv.get(emb, "another query")  # another text is another vector
    assert emb.calls == 2


def test_a_vector_is_kept_only_while_its_search_runs() -> None:
    qv, emb = QueryVector(), _Slow(delay=0.0)
    with qv.sharing("q"):
        first = qv.get(emb, "q")
        late = qv.get(emb, "q")  # the other channel of the search, after the first finished
        assert np.array_equal(late, first) and emb.calls == 1
    qv.get(emb, "q")  # a later search embeds afresh
    assert emb.calls == 2
    qv.get(emb, "q")  # and without a sharing search nothing is kept at all
    assert emb.calls == 3


def test_a_failure_reaches_every_waiting_channel_and_is_not_kept() -> None:
    qv, emb = QueryVector(), _Slow(fail=True)
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            qv.get(emb, "q")
        except RuntimeError as exc:
            errors.append(exc)

    with qv.sharing("q"):
        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(errors) == 2 and emb.calls == 1
        emb.fail = False
        assert qv.get(emb, "q")[0] == 1.0  # tried again, not the kept failure
        assert emb.calls == 2


@pytest.mark.slow
def test_the_shared_vector_is_the_models_query_vector() -> None:
    emb = LocalEmbedder()
    qv = QueryVector()
    with qv.sharing("how do I rotate the credentials"):
        got = qv.get(emb, "how do I rotate the credentials")
    want = emb.embed(["how do I rotate the credentials"], query=True)[0]
    assert got.shape == (emb.dims,)
    assert np.allclose(got, want, atol=1e-6)
