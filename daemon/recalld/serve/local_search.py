"""Searches of the local index: here, or by the search helper process while others run here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from recalld.engine import Engine
from recalld.retrieval.answer_budget import refit
from recalld.retrieval.search_request import parse_request
from recalld.serve.search_helper import MAX_VECTORS, SearchHelper


class LocalSearch:
    """The engine's searches, handed to a :class:`SearchHelper` when several run at once."""

    def __init__(self, engine: Engine, stopping: Callable[[], bool]) -> None:
        self.engine = engine
        self._stopping = stopping
        # A second process for searches while several run at once (search_helper); it follows
        # every committed change and retires when the index, provider or settings change.
        self.helper = SearchHelper(
            self._hello,
            eligible=self._blocked,
            enabled=lambda: self.engine.config.bool("search.helper_process"),
        )
        engine.change_listener = self.helper.changed
        engine.epoch_listener = self.helper.retire

    def search(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A search: here, or by the search helper while others run here."""
        in_flight = self.engine.in_flight
        running = in_flight.running  # here and handed over: a search alone overlaps channels
        if running and self.helper.enabled:
            request = parse_request(params, self.engine.config)  # a bad one fails here
            with in_flight.search():
                result = self.helper.search(params, running)
            if result is not None:
                # The writer's count: the helper's engine does not follow the back-fill.
                wants_vectors = request.mode != "keyword"
                result["vectors_pending"] = (
                    self.engine.vector_backlog.pending if wants_vectors else 0
                )
                return refit(result)  # this count may be wider than the helper's
        return self.engine.searcher.search(params)

    def _hello(self) -> dict[str, Any]:
        """What a new search helper opens: these settings, this index."""
        config = self.engine.config
        # The local model, as here (a helper starts only then); no secret it has no use for.
        values = {**config.values(), "embedding.provider": "local", "embedding.api_key": ""}
        return {
            "op": "hello",
            "config": values,
            "base_dir": str(config.base_dir),
            "index": str(self.engine.index_path),
        }

    def _blocked(self) -> str | None:
        """Why no search helper may start now (None: it may)."""
        engine = self.engine
        emb = engine.embedder
        if self._stopping():
            return "the daemon is stopping"
        if emb is None or emb.kind != "local" or engine.degraded() is not None:
            return "searches do not use the local model now"
        if engine.config.str("rerank.provider") not in ("", "none"):
            return "a reranker is on (its searches wait on it, not on the interpreter)"
        if engine.state == "reindexing":
            return "a rebuild is running"
        if engine.matrix.count() > MAX_VECTORS:
            return f"over {MAX_VECTORS:,} vectors: a second copy would cost too much memory"
        return None
