"""The daemon's side of the shared store: its pusher, its search channel, ``get`` and ``status``.

Made only when ``[shared] url`` is set. A missing psycopg (the ``recalld[shared]`` extra) or a
bad ``[shared]`` table is not fatal: the daemon serves its local index and ``status`` says why
the shared store is off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from recalld import paths
from recalld.config import Config
from recalld.embedding.query_vector import QUERY_VECTORS, query_vector
from recalld.engine import Engine
from recalld.errors import RecalldError
from recalld.retrieval.answer_budget import refit

log = logging.getLogger("recalld.shared")


class SharedLink:
    """Pusher + channel of one daemon, or the reason there are none."""

    def __init__(self, config: Config, engine: Engine) -> None:
        self.engine = engine
        self.off_reason: str | None = None
        self.pusher: Any = None
        self.channel: Any = None
        self.settings: Any = None
        try:
            self._open(config)
        except ImportError as exc:
            self.off_reason = (
                f"psycopg is not installed ({exc.name}): pip install 'recalld[shared]'"
            )
        except RecalldError as exc:
            self.off_reason = str(exc)
        if self.off_reason:
            log.warning("shared store off: %s", self.off_reason)

    @property
    def configured(self) -> bool:
        return self.settings is not None or self.off_reason is not None

    def _open(self, config: Config) -> None:
        from recalld.shared import settings as shared_settings

        settings = shared_settings.load(config)
        if settings is None:
            return
        from recalld.shared.channel import SharedChannel
        from recalld.shared.push import Pusher, Scope
        from recalld.shared.remote import Remote

        self.settings = settings
        remote = Remote(settings)
        scope = Scope(settings.share, config.memory_roots())
        state_file = paths.index_path(config.base_dir).with_name("shared-pushed.json")
        self.pusher = Pusher(settings, remote, self.engine.reader, scope, state_file)
        self.channel = SharedChannel(Remote(settings), config)

    def start(self) -> None:
        if self.pusher is not None:
            self.pusher.start()

    def stop(self) -> None:
        if self.pusher is not None:
            self.pusher.stop()
        if self.channel is not None:
            self.channel.close()

    def shares(self, path: str, source: str) -> bool:
        """Whether this daemon pushes the indexed file ``path`` to the store."""
        return self.pusher is not None and self.pusher.scope.key(path, source) is not None

    def poke(self) -> None:
        """The index changed: the pusher looks for work now."""
        if self.pusher is not None:
            self.pusher.poke()

    def search(
        self, params: Mapping[str, Any], local: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """The local answer, with the shared store's hits when it is on."""
        if self.channel is None:
            return local()
        # Both channels' vectors are this search's one query vector (embedded once).
        with QUERY_VECTORS.sharing(str(params.get("query", ""))):
            # The shared hits and any `degraded` come after the local fit: fit the whole again.
            return refit(dict(self.channel.search(params, local, self._embed)))

    def get(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """``get`` of a shared citation, or None for a local path."""
        from recalld.shared.channel import get_shared, is_shared

        raw = params.get("path")
        if self.channel is None or not isinstance(raw, str) or not is_shared(raw):
            return None
        lines = params.get("lines")
        from_line = int(params.get("from_line", params.get("from", 1)) or 1)
        return get_shared(self.channel.remote, raw, from_line, lines if lines else None)

    def status(self) -> dict[str, Any] | None:
        """The ``shared`` part of ``status`` (None when the store is not configured)."""
        if not self.configured:
            return None
        if self.settings is None:
            return {"on": False, "why": self.off_reason}
        from recalld.shared.settings import redact_url

        s = self.settings
        push = self.pusher.state.as_dict()
        down = self.channel.probe()  # what the last push or search found may be old news
        if down is None and push["reachable"] is False:
            self.pusher.poke()  # back: push what waits now, not after the backoff
        return {
            "on": True,
            "url": redact_url(s.url),
            "member": s.member,
            "collection": s.collection,
            "team": s.team,
            "reachable": down is None,
            "unreachable": down,
            "push": push,
            "search_error": self.channel.search_error(self.pusher.answered_at(), down is not None),
        }

    def _embed(self, query: str) -> Any:
        embedder = self.engine.embedder
        if embedder is None or self.engine.degraded() is not None:
            return None
        return query_vector(embedder, query)  # the local vector channel's, made once
