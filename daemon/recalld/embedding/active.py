"""The active provider of one engine: resolved once, remote ones behind a breaker.

The provider is chosen the first time it is needed (``embedding.provider``; ``auto`` prefers the
local model) and kept: no flip-flopping at run time. A remote model of unknown width learns it
from the index when the index was built with that model, else from one bounded probe, so that a
provider that is down never stops the daemon. Remote embedders are wrapped in a
:class:`~recalld.embedding.provider_guard.ProviderGuard`: one that fails is skipped for a
cooldown, and ``degraded`` says why.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from recalld.config import Config
from recalld.embedding.base import Embedder, provider_key
from recalld.embedding.provider_guard import PROBE_DEADLINE_S, ProviderGuard
from recalld.embedding.registry import ProviderChoice, resolve_embedder
from recalld.errors import RecalldError

log = logging.getLogger(__name__)

#: (provider key, dims) of the vector space the index was built with, or None.
StoredSpace = Callable[[], "tuple[str, int] | None"]


class ActiveProvider:
    """The provider choice of one engine, its breaker, and why vectors are off."""

    def __init__(
        self, config: Config, stored_space: StoredSpace, choice: ProviderChoice | None = None
    ) -> None:
        self.config = config
        self._stored_space = stored_space
        self._choice = choice
        self._lock = threading.Lock()
        self.guard: ProviderGuard | None = None

    @property
    def choice(self) -> ProviderChoice:
        """The active embedding provider (resolved once; no flip-flopping at run time)."""
        with self._lock:
            if self._choice is None:
                choice = resolve_embedder(self.config)
                warm = getattr(choice.embedder, "warm", None)
                if warm is not None:
                    try:
                        warm()
                    except RecalldError as exc:
                        choice = ProviderChoice(
                            None, f"the embedding model failed to load ({exc}); keyword-only"
                        )
                if choice.embedder is not None and choice.embedder.kind != "local":
                    choice = self._settle_dims(choice)
                self._choice = choice
            return self._choice

    @property
    def embedder(self) -> Embedder | None:
        """The embedder, or None when search is keyword-only (remote ones behind a breaker)."""
        emb = self.choice.embedder
        if emb is None or emb.kind == "local":
            return emb
        with self._lock:
            if self.guard is None or self.guard.inner is not emb:
                deadline = 2 * self.config.float("embedding.timeout_s")
                self.guard = ProviderGuard(emb, index_deadline_s=deadline)
            return self.guard

    def reset(self, config: Config) -> None:
        """Resolve the provider again at the next use (its settings changed)."""
        with self._lock:
            guard, self._choice, self.guard = self.guard, None, None
            self.config = config
        if guard is not None:
            guard.close()

    def available(self) -> bool:
        """Whether a search may use the provider now (a remote one past its cooldown)."""
        return self.guard is None or self.guard.available()

    def outage(self) -> str | None:
        """Why a remote provider is skipped now, or None."""
        return self.guard.unavailable_reason() if self.guard is not None else None

    def health(self) -> dict[str, Any]:
        """The breaker's state for ``status``."""
        return self.guard.state() if self.guard is not None else {"state": "ok"}

    def warm_up(self) -> Callable[[], object] | None:
        """Resolve the provider now; returns what loads its model (one query embedded), or
        None with no embedder (run it beside other loads: it is CPU, they are I/O)."""
        emb = self.embedder
        return (lambda: emb.embed(["warm up"], query=True)) if emb is not None else None

    def close(self) -> None:
        if self.guard is not None:
            self.guard.close()

    def _settle_dims(self, choice: ProviderChoice) -> ProviderChoice:
        """Learn a remote model's vector size without letting a provider that is down stop the
        daemon: from the index when it was built with this model, else one bounded probe."""
        emb = choice.embedder
        assert emb is not None
        if getattr(emb, "_dims", 1):
            return choice  # configured, or a model of known size: nothing to ask
        stored = self._stored_space()
        base_url = str(getattr(emb, "base_url", ""))
        if stored is not None and stored[0] == provider_key(
            emb.kind, base_url, emb.model, stored[1]
        ):
            emb.dims = stored[1]  # the index's vector space; answers are checked against it
            return choice
        probe = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recalld-dims")
        try:
            probe.submit(lambda: emb.dims).result(timeout=PROBE_DEADLINE_S)
        except (RecalldError, FutureTimeout) as exc:
            why = str(exc) or f"no answer within {PROBE_DEADLINE_S:g} s"
            log.warning("%s did not tell its vector size: %s", emb.label, why)
            return ProviderChoice(
                None,
                f"{emb.label} did not answer to tell its vector size ({why}); search is "
                "keyword-only until recalld restarts (or set embedding.dims)",
            )
        finally:
            probe.shutdown(wait=False)
        return choice
