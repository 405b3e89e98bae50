"""The ``watch`` stream: status events pushed to subscribers (the tray) as they happen."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

log = logging.getLogger("recalld.serve.daemon")  # the daemon's log lines, as before the split

Listener = Callable[[dict[str, Any]], None]


class StatusStream:
    """Subscribers of status events; an event is built only when someone listens."""

    def __init__(self, build: Callable[[], dict[str, Any]], stopped: threading.Event) -> None:
        self._build = build  # the compact status event (daemon_status.status_event)
        self._stopped = stopped
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def emit_status(self) -> None:
        """Send a fresh event to subscribers; with none it is not built (it counts rows, and
        every back-fill step's vectors make the counts stale)."""
        with self._lock:
            if not self._listeners:
                return
        self._emit(self._build())

    def _emit(self, event: dict[str, Any]) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.debug("a watch listener failed", exc_info=True)

    async def watch(self, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Stream of status events: the current one, then one per change."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=100)

        def listener(event: dict[str, Any]) -> None:
            def put() -> None:
                if events.full():
                    events.get_nowait()  # a slow reader gets the newest state, not a backlog
                events.put_nowait(event)

            loop.call_soon_threadsafe(put)

        with self._lock:
            self._listeners.append(listener)
        try:
            yield await asyncio.to_thread(self._build)
            while not self._stopped.is_set():
                try:
                    yield await asyncio.wait_for(events.get(), timeout=15.0)
                except TimeoutError:
                    yield await asyncio.to_thread(self._build)  # heartbeat
        finally:
            with self._lock:
                self._listeners.remove(listener)
