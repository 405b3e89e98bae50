"""A remote embedder behind a circuit breaker: a provider that is down or slow never holds up
searches, and is probed again after a cooldown."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from recalld.embedding.base import Embedder, Vectors
from recalld.errors import ProviderError

log = logging.getLogger(__name__)

QUERY_DEADLINE_S = 5.0  # a search waits at most this long for a remote query embedding
PROBE_DEADLINE_S = 15.0  # indexing waits at most this long on a provider that failed before
PROVIDER_COOLDOWN_S = (1.0, 2.0, 4.0, 8.0, 15.0)  # after the 1st, 2nd, ... failure in a row


class ProviderGuard:
    """A remote embedder behind a circuit breaker.

    After a failure (error, 429/5xx after the client's own retries, no answer) the provider is
    *down*: searches skip the vector channel at once and say why in ``degraded``, indexing stores
    chunks without vectors (back-filled later), and one probe is let through after a cooldown
    (1, 2, 4, 8, then every 15 s). A query embedding never holds a search for more than
    ``QUERY_DEADLINE_S``, whatever the provider's timeout and retry settings, and an indexing
    batch never holds the writer for more than ``index_deadline_s`` (the engine passes twice
    ``embedding.timeout_s``: one request and one retry), instead of the client's whole retry
    chain (minutes against a provider that accepts connections and never answers).
    """

    def __init__(self, inner: Embedder, index_deadline_s: float | None = None) -> None:
        self.inner = inner
        self.index_deadline_s = index_deadline_s
        self.kind = inner.kind
        self.model = inner.model
        self.max_input_tokens = inner.max_input_tokens
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="recalld-provider")
        self.failures = 0
        self.down_since: float | None = None
        self.reason: str | None = None
        self._retry_at = 0.0

    @property
    def dims(self) -> int:
        return self.inner.dims

    @dims.setter
    def dims(self, value: int) -> None:
        self.inner.dims = value

    @property
    def key(self) -> str:
        return self.inner.key

    @property
    def label(self) -> str:
        return self.inner.label

    def available(self) -> bool:
        """Healthy, or down with a probe due."""
        with self._lock:
            return self.down_since is None or time.monotonic() >= self._retry_at

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        """Embed through the breaker (raises ProviderError at once while the provider is down)."""
        now = time.monotonic()
        with self._lock:
            down = self.down_since is not None
            if down and now < self._retry_at:
                raise ProviderError(
                    f"{self.label} is unavailable ({self.reason}); "
                    f"next try in {self._retry_at - now:.0f} s",
                    retryable=True,
                )
            if query:
                deadline: float | None = QUERY_DEADLINE_S
            else:
                deadline = PROBE_DEADLINE_S if down else self.index_deadline_s
            if down:  # one probe at a time: others fail fast until it has answered
                self._retry_at = now + (deadline or PROBE_DEADLINE_S)
        try:
            if deadline is None:
                out = self.inner.embed(texts, query=query)
            else:
                future = self._pool.submit(self.inner.embed, list(texts), query=query)
                try:
                    out = future.result(timeout=deadline)
                except FutureTimeout:
                    future.cancel()
                    raise ProviderError(
                        f"{self.label} did not answer within {deadline:g} s", retryable=True
                    ) from None
        except Exception as exc:
            self._failed(exc)
            raise
        self._succeeded()
        return out

    def _failed(self, exc: Exception) -> None:
        with self._lock:
            self.failures += 1
            if self.down_since is None:
                self.down_since = time.time()
            self.reason = str(exc) or type(exc).__name__
            cooldown = PROVIDER_COOLDOWN_S[min(self.failures, len(PROVIDER_COOLDOWN_S)) - 1]
            self._retry_at = time.monotonic() + cooldown
        log.warning("%s failed (%s); vectors off, next try in %g s", self.label, exc, cooldown)

    def _succeeded(self) -> None:
        with self._lock:
            was_down, self.down_since, self.reason, self.failures = self.down_since, None, None, 0
        if was_down is not None:
            log.info("%s answers again after %.1f s", self.label, time.time() - was_down)

    def unavailable_reason(self) -> str | None:
        """Why the provider is considered down, or None."""
        with self._lock:
            if self.down_since is None:
                return None
            wait = max(self._retry_at - time.monotonic(), 0.0)
            return (
                f"{self.label} is unavailable ({self.reason}); keyword results only, "
                f"next try in {wait:.0f} s"
            )

    def state(self) -> dict[str, Any]:
        """The ``provider_health`` block of status."""
        with self._lock:
            if self.down_since is None:
                return {"state": "ok"}
            return {
                "state": "down",
                "since": self.down_since,
                "reason": self.reason,
                "failures": self.failures,
                "retry_in_s": round(max(self._retry_at - time.monotonic(), 0.0), 1),
            }

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
