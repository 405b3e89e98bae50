"""What the daemon reports: ``status`` (whole), the ``watch`` events (compact), and the
warnings and counts both are built from."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from recalld import security
from recalld.config import Config
from recalld.engine import Engine
from recalld.ingest.chunking import Chunk
from recalld.ingest.missed_events import MissedEvents
from recalld.ingest.vector_backfill import BackgroundChunker
from recalld.ingest.watcher import Watcher
from recalld.retrieval import served
from recalld.serve.backlog import Backlog
from recalld.serve.config_watch import LiveConfig
from recalld.serve.idle_stop import IdleStop
from recalld.serve.retry_schedule import RetrySchedule
from recalld.serve.search_helper import SearchHelper
from recalld.serve.shared_link import SharedLink


class StatusSource(Protocol):
    """The parts of the daemon a status is read from (recalld.serve.daemon.Daemon)."""

    config: Config
    engine: Engine
    started: float
    socket_path: Path
    watcher: Watcher | None
    paused: bool
    missed: MissedEvents
    backlog: Backlog
    chunker: BackgroundChunker[list[Chunk]]
    retries: RetrySchedule
    helper: SearchHelper
    connections: Callable[[], dict[str, Any]] | None
    idle: IdleStop | None
    sessions: Any
    health_note: str | None
    live: LiveConfig | None
    shared: SharedLink


def daemon_status(d: StatusSource) -> dict[str, Any]:
    """The ``status`` answer: the engine's, with the daemon's progress, state and warnings."""
    status = d.engine.status()
    status["progress"], pending = d.backlog.snapshot()
    status["progress"].update(status["vectors"])  # the index's count (vectors_missing)
    status["state"] = state(d)
    status["daemon"] = _daemon_facts(d, pending)
    sessions = d.sessions
    if sessions is not None:
        status["sessions"] = sessions.stats()
    status["warnings"] = security.config_warnings(d.config) + watch_warnings(d)
    if d.health_note:
        status["warnings"].append(d.health_note)
    if d.live is not None:
        d.live.annotate(status)
    shared = d.shared.status()
    if shared is not None:
        status["shared"] = shared
    return served.status_texts(status)  # the daemon's errors and warnings: the gate too


def _daemon_facts(d: StatusSource, pending: int) -> dict[str, Any]:
    """The process itself: pid, uptime, socket, watching, queues, helper, connections."""
    return {
        "pid": os.getpid(),
        "uptime_s": round(time.time() - d.started, 1),
        "socket": str(d.socket_path),
        "watching": d.watcher is not None and not d.paused,
        "paused": d.paused,
        "pending": pending + d.chunker.pending(),
        "retry_in_s": d.retries.retry_in(),
        "search_helper": d.helper.status(),
        "search_first": d.engine.search_first.as_dict(),  # background embedding's waits
        "missed_events": d.missed.status(),
        "connections": d.connections() if d.connections is not None else None,
        **(d.idle.status() if d.idle is not None else {}),  # who started it
    }


def status_event(d: StatusSource) -> dict[str, Any]:
    """A compact status for ``watch`` subscribers (the tray)."""
    engine = d.engine
    try:
        with engine.reader():  # the swap lock's shared side: no swap while counting
            counts = engine.row_counts.get()
    except Exception:  # noqa: BLE001 - during a swap the counts can wait
        counts = {}
    progress, pending = d.backlog.snapshot()
    event = {
        "state": "paused" if d.paused and engine.state == "idle" else state(d),
        "provider": engine.embedder.label if engine.embedder else "none",
        "degraded": engine.degraded(),
        "progress": progress,
        "files": counts.get("files"),
        "chunks": counts.get("chunks"),
        "last_sync": engine.last_sync,
        "last_error": engine.last_error,
        "pending": pending + d.chunker.pending(),
        "paused": d.paused,
        "time": time.time(),
        "watch_warnings": watch_warnings(d),
        "config_error": d.live.error if d.live is not None else None,
        "on_demand": d.idle.started_by if d.idle and d.idle.on_demand else None,
    }
    return served.status_texts(event)  # the tray shows its errors: through the gate


def watch_warnings(d: StatusSource) -> list[str]:
    """Folders the watcher cannot watch (inotify limits) and that are scanned instead;
    events it missed (a queue overflow) while the reconcile has not caught up."""
    watcher = d.watcher  # read once: a config edit may swap it meanwhile
    return (watcher.warnings() if watcher is not None else []) + d.missed.warnings()


def pending(d: StatusSource) -> int:
    """Files left: of the running job, waiting in the watcher or the queue, being chunked."""
    return d.backlog.snapshot()[1] + d.chunker.pending()


def state(d: StatusSource) -> str:
    """The engine's state, but "syncing" between the syncs of one job (no flicker)."""
    engine_state: str = d.engine.state
    if engine_state == "idle" and d.engine.job is not None and not d.paused:
        return "syncing"
    return engine_state
