"""Who started this daemon, and the idle stop of one started on demand.

``recalld mcp`` (or a hook) starts a daemon when none answers: the user did not ask for one, so
it must not run on unannounced after the agent has gone. Such a daemon says so in ``status``
(``daemon.started_by``, ``daemon.idle_stop``) and stops once no request came for
``daemon.on_demand_idle_s`` seconds while it had nothing to index (0: it keeps running). A
daemon started by ``recalld start``, ``recalld serve`` or the service never stops by itself. A
caller that finds it gone starts it again (the MCP shim does).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from recalld import paths

log = logging.getLogger(__name__)

STARTED_BY_ENV = "RECALLD_STARTED_BY"  # set by recalld.surfaces.daemon_spawn.spawn_daemon
ON_DEMAND = ("mcp", "hook")
IDLE_KEY = "daemon.on_demand_idle_s"

Handler = Callable[[Any], Any]


def started_by() -> str:
    """``start``, ``mcp``, ``hook`` (from the environment), else ``serve`` (by hand, service)."""
    return paths.env(STARTED_BY_ENV) or "serve"


class IdleStop:
    """Counts requests and tells when an on-demand daemon has been idle long enough."""

    def __init__(self, limit_s: Callable[[], float], busy: Callable[[], bool]) -> None:
        self.started_by = started_by()
        self.on_demand = self.started_by in ON_DEMAND
        self._limit_s = limit_s  # read each time: a live config edit applies
        self._busy = busy
        self.last_request = time.monotonic()

    def touch(self) -> None:
        """A request arrived."""
        self.last_request = time.monotonic()

    def wrap(self, handlers: Mapping[str, Handler]) -> dict[str, Handler]:
        """``handlers``, each noting its request when it starts and when it ends (a long
        search is activity until its answer)."""

        def noted(handler: Handler) -> Handler:
            def run(params: Any) -> Any:
                self.touch()
                try:
                    return handler(params)
                finally:
                    self.touch()

            return run

        return {name: noted(h) for name, h in handlers.items()}

    def idle_s(self) -> float:
        return time.monotonic() - self.last_request

    def due(self) -> bool:
        """Whether an on-demand daemon should stop now."""
        limit = self._limit_s()
        if not self.on_demand or limit <= 0:
            return False
        if self._busy():
            self.touch()  # indexing is activity: the idle time counts from its end
            return False
        return self.idle_s() >= limit

    def status(self) -> dict[str, Any]:
        """What ``status`` says under ``daemon``."""
        limit = self._limit_s()
        out: dict[str, Any] = {"started_by": self.started_by, "on_demand": self.on_demand}
        if self.on_demand:
            out["idle_stop"] = {
                "after_s": limit if limit > 0 else None,
                "idle_s": round(self.idle_s(), 1),
                "key": IDLE_KEY,
            }
        return out

    async def run(self, stop: Callable[[], None]) -> None:
        """Check now and then; call ``stop`` once :meth:`due` (returns then)."""
        while True:
            limit = self._limit_s()
            await asyncio.sleep(min(max(limit / 10, 0.2), 30.0) if limit > 0 else 30.0)
            if self.due():
                log.info(
                    "stopping: started on demand by %s and idle for %.0f s (%s = %s; "
                    "`recalld start` runs a daemon that stays)",
                    self.started_by,
                    self.idle_s(),
                    IDLE_KEY,
                    f"{limit:g}",
                )
                stop()
                return
