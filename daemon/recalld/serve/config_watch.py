"""Live configuration: the daemon notices edits of its config file (or a SIGHUP) and applies them.

The file is polled by ``stat`` (path, inode, size, mtime, ctime) every :data:`POLL_S` seconds,
so every way of saving is seen: in place, or a temporary file renamed over it (a new inode),
also when the folder or the file did not exist at start. A change is loaded once its stat has
stayed the same for one poll, so a half-written file is not read. SIGHUP reloads at once.

What a valid edit does (see :func:`diff`): search, rerank and debounce settings apply to the
next request; new memory folders or transcript globs are watched and a full sync indexes their
files and drops the rows of folders and globs no longer configured; a changed embedding
provider is resolved again; a change of chunking or of the embedding space starts the full
rebuild (``reindex``), its reason in ``status``. An invalid edit (TOML error, unknown key, value
out of range, an empty or unreadable file) changes nothing: the error is logged and shown in
``status`` until the file is fixed. A deleted config file is not taken to mean "defaults":
that could drop whole folders from the index because of an editor's save; a restart uses the
defaults.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from recalld.config import SETTINGS, Config
from recalld.engine import Engine
from recalld.errors import ConfigError, RecalldError, Unavailable
from recalld.ingest.identity_check import chunking_identity
from recalld.ingest.watcher import Watcher
from recalld.serve import log_guard
from recalld.serve.writer_jobs import Job

log = logging.getLogger(__name__)

POLL_S = 0.5  # one stat of one file: nothing next to the watcher's own work
MEMORY_WATCH_KEYS = ("memory.paths", "memory.extensions", "sync.watch", "sync.scan_interval_s")
SESSION_WATCH_KEYS = (
    "sessions.paths",
    "sessions.delta_bytes",
    "sessions.delta_messages",
    "sessions.quiet_s",
)
# What a full sync must look at again: files of new roots or globs, rows of removed ones.
RESYNC_KEYS = ("memory.paths", "memory.extensions", "memory.max_file_bytes", "sessions.paths")
# How background embedding yields to searches: read at the next back-fill step, no new provider.
PACING_KEYS = ("embedding.search_first", "embedding.background_nice")

Signature = tuple[int, int, int, int, int] | None


@dataclass(frozen=True)
class Change:
    """What an edit changed and what that asks of the daemon."""

    keys: tuple[str, ...]
    rewatch_memory: bool = False
    rewatch_sessions: bool = False
    resync: bool = False
    provider: bool = False  # embedding.*: resolve the embedder again
    chunking: bool = False  # the chunking identity changed: a full rebuild
    reranker: bool = False
    shared: bool = False  # shared.* or the memory folders: the shared store's link anew


def diff(old: Config, new: Config) -> Change:
    """The keys whose values differ, and what applying them takes."""
    keys = tuple(s.key for s in SETTINGS if old.get(s.key) != new.get(s.key))
    return Change(
        keys=keys,
        rewatch_memory=any(k in MEMORY_WATCH_KEYS for k in keys),
        rewatch_sessions=any(k in SESSION_WATCH_KEYS for k in keys),
        resync=any(k in RESYNC_KEYS for k in keys),
        provider=any(k.startswith("embedding.") and k not in PACING_KEYS for k in keys),
        chunking=chunking_identity(old) != chunking_identity(new),
        reranker=any(k.startswith("rerank.") for k in keys),
        shared=any(k.startswith("shared.") or k in MEMORY_WATCH_KEYS for k in keys),
    )


def signature(path: Path) -> Signature:
    """What changes when the file is saved in any way; None while it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class ConfigWatcher:
    """A thread that calls ``reload`` when the file's stat changed and settled, or when asked."""

    def __init__(
        self, path: Path, reload: Callable[[str], None], *, poll_s: float = POLL_S
    ) -> None:
        self.path = path
        self.reload = reload
        self.poll_s = poll_s
        self._asked = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start polling (the file as it is now counts as loaded)."""
        self._thread = threading.Thread(target=self._run, name="recalld-config", daemon=True)
        self._thread.start()

    def ask(self) -> None:
        """Reload now (SIGHUP; safe from a signal handler: it only sets an event)."""
        self._asked.set()

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()
        self._asked.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        loaded = candidate = signature(self.path)
        while True:
            self._asked.wait(self.poll_s)
            if self._stop.is_set():
                return
            now = signature(self.path)
            why = None
            if self._asked.is_set():
                self._asked.clear()
                why = "SIGHUP"
            elif now != loaded and now == candidate:
                why = "the config file changed"
            candidate = now
            if why is None:
                continue
            loaded = now
            try:
                self.reload(why)
            except Exception:  # the watcher must outlive any one reload
                log.exception("reloading the config failed")


@dataclass
class _Rebuild:
    reason: str
    job: Job


class ConfiguredDaemon(Protocol):
    """What an edit is applied to (recalld.serve.daemon.Daemon; a protocol, so that the two
    modules do not import each other)."""

    config: Config
    engine: Engine
    watcher: Watcher | None

    def restart_watcher(self) -> None: ...
    def restart_sessions(self) -> None: ...
    def restart_shared(self) -> None: ...
    def submit(self, job: Job) -> Job: ...


class LiveConfig:
    """Loads the config file again and applies it to a running :class:`Daemon`."""

    def __init__(self, daemon: ConfiguredDaemon, path: Path) -> None:
        self.daemon = daemon
        self.path = path
        self.loaded_at = time.time()
        self.error: str | None = None
        self.last_change: dict[str, Any] | None = None
        self._rebuild: _Rebuild | None = None
        self._lock = threading.Lock()
        self.watcher = ConfigWatcher(path, self.reload)

    def start(self) -> None:
        """Watch the file."""
        self.watcher.start()

    def stop(self) -> None:
        """Stop watching."""
        self.watcher.stop()

    def reload(self, why: str) -> None:
        """Load the file; apply it when valid, else keep the current config and say why."""
        try:
            new = self._load()
        except (RecalldError, OSError) as exc:  # OSError: unreadable (permissions, I/O)
            kept = time.strftime("%H:%M:%S", time.localtime(self.loaded_at))
            self.error = (
                f"{exc} (the edit is not applied: recalld keeps the settings loaded at {kept}; "
                "fix the file and save it again)"
            )
            log.error("config not applied (%s): %s", why, self.error)
            return
        self.error = None
        change = diff(self.daemon.config, new)
        self.loaded_at = time.time()
        if not change.keys:
            log.info("config reloaded (%s): nothing changed", why)
            return
        log.info("config reloaded (%s): %s changed", why, ", ".join(change.keys))
        self._apply(new, change)

    def _load(self) -> Config:
        if not self.path.exists():
            raise ConfigError(
                f"the config file {self.path} is gone; restart recalld to use the defaults"
            )
        return Config.load(self.path)

    def _apply(self, new: Config, change: Change) -> None:
        daemon = self.daemon
        daemon.config = new
        daemon.engine.reconfigure(new, reranker=change.reranker)
        log_guard.protect_logs(new)  # a new key must not reach the log either
        if change.rewatch_memory:
            daemon.restart_watcher()
        elif daemon.watcher is not None:
            daemon.watcher.dirty.debounce_s = new.float("sync.debounce_s")
        if change.rewatch_sessions:
            daemon.restart_sessions()
        if change.shared:
            daemon.restart_shared()
        applied = {"at": time.time(), "keys": list(change.keys), "rebuild": None}
        with self._lock:
            self.last_change = applied
        if not (change.resync or change.provider or change.chunking):
            return

        def check() -> None:  # on the writer thread: it owns the index's identity row
            reason = daemon.engine.check_config(provider_changed=change.provider)
            if reason:
                log.info("config change needs a full rebuild: %s; starting it", reason)
                with self._lock:
                    applied["rebuild"] = reason
                    self._rebuild = _Rebuild(reason, sync)

        sync = Job("full")  # a rebuild when check() found one needed (Engine.sync decides)
        try:
            daemon.submit(Job("call", run=check))
            daemon.submit(sync)
        except Unavailable:
            pass  # shutting down

    def status(self) -> dict[str, Any]:
        """The ``config`` block of ``status``."""
        with self._lock:
            rebuild = self._rebuild
            last = dict(self.last_change) if self.last_change else None
        out: dict[str, Any] = {
            "path": str(self.path),
            "exists": self.path.is_file(),  # no file: the defaults, nothing was "loaded"
            "loaded_at": self.loaded_at,
            "error": self.error,
            "last_change": last,
            "rebuild": None,
        }
        if rebuild is not None:
            done = rebuild.job.done.is_set()
            out["rebuild"] = {
                "reason": rebuild.reason,
                "state": ("failed" if rebuild.job.error else "done") if done else "running",
                "error": rebuild.job.error,
            }
        return out

    def annotate(self, status: dict[str, Any]) -> None:
        """Add the config block, ``config_error`` and a warning to a daemon status."""
        block = self.status()
        status["config"] = block
        status["config_error"] = self.error
        if self.error:
            status.setdefault("warnings", []).append(f"config: {self.error}")
        rebuild = block["rebuild"]
        if rebuild is not None and rebuild["state"] == "running":
            status.setdefault("warnings", []).append(
                f"rebuilding the index because {rebuild['reason']} (config edited); searches "
                "answer from the old index until it is done"
            )
