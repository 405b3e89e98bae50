"""The circuit breaker around remote providers: deadlines for queries and indexing batches."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from recalld.embedding.base import Vectors
from recalld.embedding.provider_guard import ProviderGuard
from recalld.errors import ProviderError


class HangingEmbedder:
    """A remote provider that accepts a request and answers only when released."""

    kind = "openai"
    model = "fake-model"
    dims = 4
    max_input_tokens = 256
    key = "openai|http://127.0.0.1|fake-model|4"
    label = "openai/fake-model"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        self.calls += 1
        self.release.wait(30)
        return np.ones((len(texts), self.dims), dtype=np.float32)


def test_an_indexing_batch_never_holds_the_writer_past_its_deadline() -> None:
    inner = HangingEmbedder()
    guard = ProviderGuard(inner, index_deadline_s=0.5)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        with pytest.raises(ProviderError, match=r"did not answer within 0\.5 s"):
            guard.embed(["a chunk"])
        assert time.monotonic() - started < 3.0
        assert guard.state()["state"] == "down"
        # While down, the next batch fails at once instead of waiting again.
        started = time.monotonic()
        with pytest.raises(ProviderError, match="unavailable"):
            guard.embed(["another chunk"])
        assert time.monotonic() - started < 0.1 and inner.calls == 1
        # Once the provider answers again, a probe after the cooldown closes the breaker.
        inner.release.set()
        time.sleep(1.1)
        assert guard.embed(["back"]).shape == (1, 4)
        assert guard.state() == {"state": "ok"}
    finally:
        inner.release.set()
        guard.close()


def test_without_a_deadline_a_slow_batch_is_waited_for() -> None:
    inner = HangingEmbedder()
    guard = ProviderGuard(inner)  # type: ignore[arg-type]
    try:
        threading.Timer(0.3, inner.release.set).start()
        assert guard.embed(["slow but fine"]).shape == (1, 4)
        assert guard.state() == {"state": "ok"}
    finally:
        inner.release.set()
        guard.close()
