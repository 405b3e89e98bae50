"""``recalld serve``: the engine behind the socket server, one writer thread, and the watcher.

Handlers are plain functions in one table (callable in tests without a socket). Writes are jobs on
a queue consumed by the single writer thread; searches and gets run on read-only connections in
the server's worker threads, so they never wait for a sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld import fd_limits, paths, security
from recalld.config import Config
from recalld.engine import Engine
from recalld.errors import BadRequest, IndexError_, Unavailable
from recalld.index import index_health
from recalld.index.index_files import describe_write_error
from recalld.ingest.chunking import Chunk
from recalld.ingest.filters import make_filter
from recalld.ingest.indexer import Progress
from recalld.ingest.missed_events import MissedEvents
from recalld.ingest.vector_backfill import BackgroundChunker
from recalld.ingest.watcher import Watcher
from recalld.retrieval import served
from recalld.retrieval.search_request import parse_request
from recalld.serve import log_guard
from recalld.serve.allocator import note_activity
from recalld.serve.backlog import Backlog, JobQueue
from recalld.serve.config_watch import LiveConfig
from recalld.serve.idle_stop import IDLE_KEY, IdleStop
from recalld.serve.path_slices import split_paths
from recalld.serve.search_helper import MAX_VECTORS, SearchHelper
from recalld.serve.shared_link import SharedLink
from recalld.serve.sync_paths import transcript_paths
from recalld.serve.write_handlers import WriteHandlers

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], dict[str, Any]]
RETRY_DELAYS_S = (2.0, 4.0, 8.0, 16.0, 30.0)  # full sync after a failed or incomplete one
# How long a stop waits for the writer's current batch. Every batch is one transaction per
# file, so a batch cut short by the exit is rolled back and redone at the next start; waiting
# longer would let a big sync hold SIGTERM for minutes.
STOP_WAIT_S = 2.0


@dataclass
class Job:
    """One unit of work for the writer thread."""

    kind: str  # "paths" | "full" | "reindex" | "sessions" | "recover" | "call"
    paths: set[Path] = field(default_factory=set)
    run: Callable[[], None] | None = None  # "call": run on the writer thread before the rest
    deferred: bool = False  # "paths": the rest of a big batch, behind fresh ones (path_slices)
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] | None = None
    error: str | None = None


class Daemon:
    """The long-running service around one :class:`Engine`."""

    def __init__(self, config: Config, *, engine: Engine | None = None) -> None:
        self.config = config
        self.engine = engine or Engine(config, writable=True)
        self.engine.on_progress = self._on_progress
        self.started = time.time()
        # Where clients reach us: fixed by the environment at start, and shown by every status
        # poll (working it out again costs ~0.1 ms, a tenth of a status call).
        self.socket_path = paths.socket_path()
        self.jobs = JobQueue()  # of Job | None (None: stop)
        self._stop = threading.Event()
        self._writer = threading.Thread(
            target=self._writer_loop, name="recalld-writer", daemon=True
        )
        self.watcher: Watcher | None = None
        self._watcher_lock = threading.Lock()
        self.missed = MissedEvents()  # overflows and dead watcher threads, across watchers
        self.paused = False
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        self._listeners_lock = threading.Lock()
        self._last_progress_event = 0.0
        self.sessions: Any = None
        self._retry_lock = threading.Lock()
        self._retry_timer: threading.Timer | None = None
        self._retry_at: float | None = None
        self._retry_failures = 0
        # Set when a damaged index was moved aside (at start or later): kept in status warnings.
        self.health_note: str | None = None
        self._recover_asked = threading.Event()
        # The index was closed cleanly: its integrity is checked after start (check_later).
        self.check_after_start = False
        self._damage_found: str | None = None
        # Big notes are chunked on a thread of their own; a sync writes them when ready.
        self.chunker: BackgroundChunker[list[Chunk]] = BackgroundChunker(self._on_chunked)
        self.engine.background, self.engine.keyword_first = self.chunker, True
        self.live: LiveConfig | None = None  # set by serve(): the config file's watcher
        self.idle: IdleStop | None = None  # set by serve(): who started it, the on-demand stop
        self.connections: Callable[[], dict[str, Any]] | None = None  # set by serve()
        # One job's progress across back-to-back syncs; progress lines in the log.
        self.backlog = Backlog(
            self.engine, self._waiting_paths, config.float("sync.progress_log_s")
        )
        # A second process for searches while several run at once (search_helper); it follows
        # every committed change and retires when the index, provider or settings change.
        self.helper = SearchHelper(
            self._helper_hello,
            eligible=self._helper_blocked,
            enabled=lambda: self.engine.config.bool("search.helper_process"),
        )
        self.engine.change_listener = self.helper.changed
        self.engine.epoch_listener = self.helper.retire
        self.shared = SharedLink(config, self.engine)  # off unless [shared] url is set

    # lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer; reconcile with the disk, then watch."""
        self._writer.start()
        self.backlog.start()
        self._create_default_root()
        # Watching starts before the reconcile so that no edit made during it is missed.
        self.watcher = self._new_watcher()
        self.submit(Job("full"))
        self._start_sessions()
        if self.check_after_start:
            threading.Thread(target=self._check_later, name="recalld-check", daemon=True).start()
        self.shared.start()

    def _check_later(self) -> None:
        """The start's integrity check of a cleanly closed index, while searches are answered:
        damage found is recovered like damage met by a read (moved aside, rebuilt)."""
        problem = index_health.quick_check(self.engine.index_path)
        if problem is None or self._stop.is_set():
            return
        self._damage_found = problem
        if not self._recover_asked.is_set():
            self._recover_asked.set()
            with contextlib.suppress(Unavailable):
                self.submit(Job("recover"))

    def _new_watcher(self) -> Watcher | None:
        """A started watcher over the configured memory folders (None when sync.watch is off)."""
        if not self.config.bool("sync.watch"):
            return None
        watcher = Watcher(
            self.config.memory_roots(),
            make_filter(self.config.list("memory.extensions")),
            self.config.float("sync.debounce_s"),
            self._on_batch,
            self._on_roots_changed,
            scan_interval_s=self.config.float("sync.scan_interval_s"),
            roots_now=self.config.memory_roots,
            on_roots_moved=self._on_roots_moved,
            missed=self.missed,
        )
        watcher.paused = self.paused
        watcher.start()
        return watcher

    def restart_watcher(self) -> None:
        """Watch the memory folders of the current config (after a config edit)."""
        with self._watcher_lock:  # a config edit and a moved root may ask at once
            old, self.watcher = self.watcher, None
            if old is not None:
                old.stop()  # its dirty paths are covered by the full sync that follows
            if self._stop.is_set():
                return
            self._create_default_root()
            self.watcher = self._new_watcher()

    def _on_roots_moved(self, roots: list[Path]) -> None:
        """A memory root's symlink now leads to another folder: watch that one, then sync.

        Called on the old watcher's own thread, which its stop() joins: the swap runs on a
        thread of its own.
        """

        def swap() -> None:
            self.restart_watcher()
            with contextlib.suppress(Unavailable):
                self.submit(Job("full"))

        threading.Thread(target=swap, name="recalld-rewatch", daemon=True).start()

    def restart_shared(self) -> None:
        """The shared store's settings (or what it shares) changed: a new link, the old one
        stopped (its pushes resume from the store's own state: nothing is lost)."""
        old, self.shared = self.shared, SharedLink(self.config, self.engine)
        old.stop()
        if not self._stop.is_set():
            self.shared.start()

    def restart_sessions(self) -> None:
        """Poll the transcript globs of the current config (after a config edit)."""
        old, self.sessions = self.sessions, None
        if old is not None:
            old.stop()
        self._start_sessions()

    def _create_default_root(self) -> None:
        """Create the default memory folder on first use (never a configured one: a missing
        folder may be an unmounted drive, reported in status and watched again when back)."""
        if self.config.list("memory.paths"):
            return
        root = self.config.memory_roots()[0]
        if root.exists():
            return
        try:
            with self.engine.reader() as store:
                indexed = store.files("memory")
        except Exception:  # noqa: BLE001 - no index yet: a first run
            indexed = {}
        if not any(p.startswith(str(root) + os.sep) for p in indexed):
            with contextlib.suppress(OSError):
                root.mkdir(parents=True, exist_ok=True)

    def _on_roots_changed(self, roots: list[Path]) -> None:
        """A memory folder vanished, came back or was (un)mounted: reconcile with the disk."""
        self.submit(Job("full"))

    def _start_sessions(self) -> None:
        from recalld.ingest.session_sync import SessionWatcher

        if not self.config.session_globs():
            return
        self.sessions = SessionWatcher(self.config, self._on_sessions_due)
        self.sessions.start()

    def stop(self) -> bool:
        """Stop watching, let the current job finish for a moment, close the index.

        Returns False when the writer was still busy: its connection is then left open (closing
        it under the running batch would only raise there) and the process should exit now.
        """
        self._stop.set()
        self.helper.close()
        self.shared.stop()
        with self._retry_lock:
            if self._retry_timer is not None:
                self._retry_timer.cancel()
        with self._watcher_lock:  # not while a moved root swaps it (it sees _stop after)
            if self.watcher is not None:
                self.watcher.stop()
        if self.sessions is not None:
            self.sessions.stop()
        self.chunker.close()
        self.backlog.stop()
        if self._writer.is_alive():
            self.jobs.put(None)
            self._writer.join(timeout=STOP_WAIT_S)
        if self._writer.is_alive():
            log.warning(
                "the writer is still indexing after %g s; exiting anyway (the unfinished batch "
                "is rolled back and redone at the next start)",
                STOP_WAIT_S,
            )
            return False
        self.engine.close()
        index_health.mark_clean(self.engine.index_path)
        return True

    # writer -------------------------------------------------------------------------------------

    def submit(self, job: Job) -> Job:
        """Queue a job for the writer thread."""
        if self._stop.is_set():
            raise Unavailable("the daemon is shutting down")
        self.jobs.put(job)
        return job

    def _on_chunked(self, path: Path) -> None:
        with contextlib.suppress(Unavailable):
            self.submit(Job("paths", {path}))

    def _on_sessions_due(self, due: set[Path]) -> None:
        self.submit(Job("sessions", due))

    def _on_batch(self, batch: list[Path]) -> None:
        self.submit(Job("paths", set(batch)))

    def _take(self) -> list[Job] | None:
        """The next job, merged with queued ones of the same kind (a burst becomes one sync)."""
        first = self.jobs.get()
        if first is None:
            return None
        merged = [first]
        while True:
            try:
                nxt = self.jobs.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                self.jobs.put(None)
                break
            merged.append(nxt)
        return merged

    def _writer_loop(self) -> None:
        try:
            self.engine.warm()  # model and vector matrix ready before the first search needs them
        except Exception:
            log.exception("warming up failed")
        while True:
            batch = self._take()
            if batch is None:
                return
            kinds = {j.kind for j in batch}
            missed = self.missed.asked  # what a full sync starting now catches up on
            self.backlog.begin()
            try:
                report: dict[str, Any] = {}
                for job in batch:
                    if job.run is not None:
                        job.run()
                if "recover" in kinds:
                    why = self._damage_found or "a search or status read hit a damaged page"
                    self._recover(why)
                    kinds.add("full")
                if "reindex" in kinds:
                    report = self.engine.reindex().as_dict()
                elif "full" in kinds:
                    report = self.engine.sync().as_dict()
                elif "paths" in kinds:
                    now, later = split_paths(
                        [(sorted(j.paths), j.deferred) for j in batch if j.kind == "paths"]
                    )
                    if later:  # a storm: the rest after edits that arrive meanwhile
                        with contextlib.suppress(Unavailable):  # stopping: the start resyncs
                            self.submit(Job("paths", set(later), deferred=True))
                    report = self.engine.sync(now).as_dict()
                if "sessions" in kinds and not kinds & {"full", "reindex"}:
                    due: set[Path] = set().union(*(j.paths for j in batch if j.kind == "sessions"))
                    report["sessions"] = self.engine.sync_sessions(sorted(due))
                sessions = self.sessions  # read once: a config edit may swap it
                if sessions is not None:
                    sessions.mark_indexed(self.engine.last_session_sizes)
                if self.engine.vector_backlog.more:  # the next back-fill step, after queued jobs
                    with contextlib.suppress(Unavailable):
                        self.submit(Job("paths"))
                error = None
            except Exception as exc:
                log.exception("sync failed")
                report, error = {}, describe_write_error(exc, self.engine.index_path)
                if index_health.is_corruption(exc):
                    self._recover(str(exc))
                    self.submit(Job("full"))  # rebuild from the files, progress in status
            self._after_batch(kinds, report, error)
            if error is None and kinds & {"full", "reindex"}:
                self.missed.caught_up(missed)
            if self.engine.preloader and self.jobs.empty() and not self.engine.vector_backlog.more:
                # idle: the common words' postings, read ahead (before the batch counts as
                # done, so that a status saying "idle" already says "preloading")
                self.engine.preloader.start()
            self.jobs.batch_done()
            note_activity()  # the batch's freed memory goes back to the system once quiet
            self.backlog.after_batch(self.jobs.empty() and not self._dirty_count())
            for job in batch:
                job.result, job.error = report, error
                job.done.set()
            self._emit_status()

    def _recover(self, why: str) -> None:
        """The index is damaged: move it aside and start an empty one (the writer thread)."""
        self._recover_asked.clear()
        self._damage_found = None
        problem = index_health.quick_check(self.engine.index_path) or why
        aside = self.engine.start_over(index_health.move_aside)
        self.note_damaged(problem, aside)

    def note_damaged(self, problem: str, aside: Path) -> None:
        """Say in status that a damaged index was moved aside and is being rebuilt."""
        problem = " ".join(problem.split())  # quick_check reports one line per problem
        self.health_note = (
            f"the index was damaged ({problem[:200]}); it was moved aside to {aside} and is "
            "rebuilt from the files (searches answer from what is indexed so far)"
        )
        self.engine.last_error = self.health_note
        log.warning("%s", self.health_note)

    def _index_guard(self, handler: Handler) -> Handler:
        """``handler``, but a damaged index met while reading starts its recovery and gives a
        clear error (not an internal one)."""

        def guarded(params: dict[str, Any]) -> dict[str, Any]:
            try:
                return handler(params)
            except Exception as exc:
                if not index_health.is_corruption(exc):
                    raise
                if not self._recover_asked.is_set():
                    self._recover_asked.set()
                    with contextlib.suppress(Unavailable):
                        self.submit(Job("recover"))
                raise IndexError_(
                    f"the index is damaged ({exc}): it is being moved aside and rebuilt from the "
                    "files; retry in a moment (`recalld status` shows the progress)"
                ) from exc

        return guarded

    def _after_batch(self, kinds: set[str], report: dict[str, Any], error: str | None) -> None:
        """Schedule a full sync later when this one failed (a full disk, a broken index write)
        or left chunks without vectors (provider down): the dirty paths of a failed batch are
        not lost, and back-filling resumes by itself. Backoff 2, 4, 8, 16, then every 30 s."""
        self.shared.poke()
        # Files not read for want of descriptors are read again by the retry's full sync.
        if error is not None or report.get("embed_error") or report.get("files_to_retry"):
            self._schedule_retry()
        elif kinds & {"full", "reindex"}:
            with self._retry_lock:
                self._retry_failures = 0

    def _schedule_retry(self) -> None:
        with self._retry_lock:
            if self._stop.is_set() or self._retry_timer is not None:
                return
            delay = RETRY_DELAYS_S[min(self._retry_failures, len(RETRY_DELAYS_S) - 1)]
            self._retry_failures += 1
            self._retry_at = time.time() + delay
            timer = threading.Timer(delay, self._retry_now)
            timer.daemon = True
            self._retry_timer = timer
            timer.start()
        log.info("sync incomplete; retrying in %g s", delay)

    def _retry_now(self) -> None:
        with self._retry_lock:
            self._retry_timer, self._retry_at = None, None
        with contextlib.suppress(Unavailable):
            self.submit(Job("full"))

    def retry_in(self) -> float | None:
        """Seconds until the scheduled retry, or None."""
        with self._retry_lock:
            at = self._retry_at
        return None if at is None else round(max(at - time.time(), 0.0), 1)

    # events ---------------------------------------------------------------------------------------

    def _on_progress(self, progress: Progress) -> None:
        now = time.monotonic()
        if now - self._last_progress_event >= 0.25 or progress.phase == "idle":
            self._last_progress_event = now
            self._emit_status()

    def _emit_status(self) -> None:
        """Send :meth:`status_event` to ``watch`` subscribers; with none it is not built (it
        counts rows, and every back-fill step's vectors make the counts stale)."""
        with self._listeners_lock:
            if not self._listeners:
                return
        self._emit(self.status_event())

    def _emit(self, event: dict[str, Any]) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.debug("a watch listener failed", exc_info=True)

    def status_event(self) -> dict[str, Any]:
        """A compact status for ``watch`` subscribers (the tray)."""
        engine = self.engine
        try:
            with engine.reader() as store:
                counts = engine.counts(store)
        except Exception:  # noqa: BLE001 - during a swap the counts can wait
            counts = {}
        progress, pending = self.backlog.snapshot()
        event = {
            "state": "paused" if self.paused and engine.state == "idle" else self._state(),
            "provider": engine.embedder.label if engine.embedder else "none",
            "degraded": engine.degraded(),
            "progress": progress,
            "files": counts.get("files"),
            "chunks": counts.get("chunks"),
            "last_sync": engine.last_sync,
            "last_error": engine.last_error,
            "pending": pending + self.chunker.pending(),
            "paused": self.paused,
            "time": time.time(),
            "watch_warnings": self._watch_warnings(),
            "config_error": self.live.error if self.live is not None else None,
            "on_demand": self.idle.started_by if self.idle and self.idle.on_demand else None,
        }
        return served.status_texts(event)  # the tray shows its errors: through the gate

    def _watch_warnings(self) -> list[str]:
        """Folders the watcher cannot watch (inotify limits) and that are scanned instead;
        events it missed (a queue overflow) while the reconcile has not caught up."""
        watcher = self.watcher  # read once: a config edit may swap it meanwhile
        return (watcher.warnings() if watcher is not None else []) + self.missed.warnings()

    def pending(self) -> int:
        """Files left: of the running job, waiting in the watcher or the queue, being chunked."""
        return self.backlog.snapshot()[1] + self.chunker.pending()

    def _state(self) -> str:
        """The engine's state, but "syncing" between the syncs of one job (no flicker)."""
        state: str = self.engine.state
        if state == "idle" and self.engine.job is not None and not self.paused:
            return "syncing"
        return state

    def _dirty_count(self) -> int:
        watcher = self.watcher  # read once: a config edit may swap it meanwhile
        return len(watcher.dirty) if watcher is not None else 0

    def _waiting_paths(self) -> tuple[list[Path], list[Path], int]:
        """Memory paths dirty or in queued batches, those of the running batch, and the
        queued jobs that name no such paths."""
        watcher = self.watcher  # read once: a config edit may swap it meanwhile
        waiting = watcher.dirty.paths() if watcher is not None else []
        queued, taken = self.jobs.waiting()
        running = [p for job in taken if job is not None and job.kind == "paths" for p in job.paths]
        other = 0
        for job in queued:
            if job is not None and job.kind == "paths" and job.paths:
                waiting.extend(job.paths)
            elif job is not None:
                other += 1  # a full sync, a rebuild, transcripts, a back-fill step
        return waiting, running, other

    # handlers -----------------------------------------------------------------------------------

    def handlers(self) -> dict[str, Handler]:
        """The dispatch table of plain methods."""
        return {
            "search": self._index_guard(self.h_search),
            "get": self._index_guard(self.h_get),
            "status": self._index_guard(self.h_status),
            "sync": self.h_sync,
            "reindex": self.h_reindex,
            "pause": self.h_pause,
            **{m: self._index_guard(h) for m, h in self._write_handlers().items()},
        }

    def _write_handlers(self) -> dict[str, Handler]:
        """``write`` and ``forget`` (recalld.serve.write_handlers), on this writer's queue."""

        def submit(kind: str, run: Callable[[], None] | None) -> None:
            self.submit(Job(kind, run=run))

        return WriteHandlers(self.engine, submit).table()

    def h_search(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A search of the local index (and of the shared store when one is configured)."""
        return self.shared.search(params, lambda: self._search_local(params))

    def h_get(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``get``: lines of a local file, or of a shared one (``shared:...`` citations)."""
        return self.shared.get(params) or self.engine.get(params)

    def _search_local(self, params: Mapping[str, Any]) -> dict[str, Any]:
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
                return result
        return self.engine.search(params)

    def _helper_hello(self) -> dict[str, Any]:
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

    def _helper_blocked(self) -> str | None:
        """Why no search helper may start now (None: it may)."""
        engine = self.engine
        emb = engine.embedder
        if self._stop.is_set():
            return "the daemon is stopping"
        if emb is None or emb.kind != "local" or engine.degraded() is not None:
            return "searches do not use the local model now"
        if engine.config.str("rerank.provider") not in ("", "none"):
            return "a reranker is on (its searches wait on it, not on the interpreter)"
        if engine.state == "reindexing":
            return "a rebuild is running"
        if engine.vector_count() > MAX_VECTORS:
            return f"over {MAX_VECTORS:,} vectors: a second copy would cost too much memory"
        return None

    def h_status(self, params: Mapping[str, Any]) -> dict[str, Any]:
        status = self.engine.status()
        status["progress"], pending = self.backlog.snapshot()
        status["progress"].update(status["vectors"])  # the index's count (vectors_missing)
        status["state"] = self._state()
        status["daemon"] = {
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 1),
            "socket": str(self.socket_path),
            "watching": self.watcher is not None and not self.paused,
            "paused": self.paused,
            "pending": pending + self.chunker.pending(),
            "retry_in_s": self.retry_in(),
            "search_helper": self.helper.status(),
            "missed_events": self.missed.status(),
            "connections": self.connections() if self.connections is not None else None,
            **(self.idle.status() if self.idle is not None else {}),  # who started it
        }
        sessions = self.sessions
        if sessions is not None:
            status["sessions"] = sessions.stats()
        status["warnings"] = security.config_warnings(self.config) + self._watch_warnings()
        if self.health_note:
            status["warnings"].append(self.health_note)
        if self.live is not None:
            self.live.annotate(status)
        shared = self.shared.status()
        if shared is not None:
            status["shared"] = shared
        return served.status_texts(status)  # the daemon's errors and warnings: the gate too

    def _run_job(self, job: Job, params: Mapping[str, Any]) -> dict[str, Any]:
        wait = params.get("wait", False)
        if not isinstance(wait, bool):
            raise BadRequest("wait must be true or false")
        timeout = params.get("timeout_s", 3600)
        if (
            not isinstance(timeout, int | float)
            or isinstance(timeout, bool)
            or not 0 < timeout <= 86_400
        ):
            raise BadRequest(
                f"timeout_s must be seconds, above 0 and at most 86400: {timeout!r:.80}"
            )
        self.submit(job)
        if not wait:
            return {"queued": True, "job": job.kind}
        deadline = time.monotonic() + float(timeout)
        if not job.done.wait(float(timeout)):
            raise Unavailable(f"the {job.kind} is still running after {timeout} s")
        if job.error:
            raise Unavailable(f"{job.kind} failed: {job.error}")
        report = dict(job.result or {})
        # Keyword first: the files are searchable now; waiting means their vectors too.
        backlog = self.engine.vector_backlog
        while backlog.more and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(0.05)
        if "vectors_pending" in report:
            report["vectors_pending"] = bool(backlog.pending)
        return {"queued": False, "job": job.kind, "report": report}

    def h_sync(self, params: Mapping[str, Any]) -> dict[str, Any]:
        if "paths" in params:  # an agent's hook: read these transcripts now
            found = transcript_paths(params, self.config.session_globs())
            return self._run_job(Job("sessions", paths=found), params)
        return self._run_job(Job("full"), params)

    def h_reindex(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self._run_job(Job("reindex"), params)

    def h_pause(self, params: Mapping[str, Any]) -> dict[str, Any]:
        paused = params.get("paused", True)
        if not isinstance(paused, bool):
            raise BadRequest("paused must be true or false")
        self.paused = paused
        watcher = self.watcher
        if watcher is not None:
            watcher.paused = paused
        self._emit_status()
        return {"paused": paused}

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

        with self._listeners_lock:
            self._listeners.append(listener)
        try:
            yield await asyncio.to_thread(self.status_event)
            while not self._stop.is_set():
                try:
                    yield await asyncio.wait_for(events.get(), timeout=15.0)
                except TimeoutError:
                    yield await asyncio.to_thread(self.status_event)  # heartbeat
        finally:
            with self._listeners_lock:
                self._listeners.remove(listener)


def serve(config: Config, config_path: Path | None = None) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT or a ``shutdown`` request.

    ``config_path`` is the file to watch for edits (default: the one ``config`` was read from,
    else the platform's, which may not exist yet); SIGHUP reloads it at once.
    """
    from recalld.serve.allocator import tune_allocator
    from recalld.serve.config_overview import describe_config
    from recalld.serve.server import Server

    config_path = config_path or config.source or paths.config_path()
    tune_allocator()  # before the model loads; freed memory goes back to the system when idle
    fd_limits.raise_soft_limit()  # systemd's 1,024 is too few under a flood of clients
    log_guard.protect_logs(config)  # no API key in the log, whatever prints it
    socket_path: Path = paths.socket_path()
    # The index holds every note and transcript: private files, whatever the login umask.
    os.umask(os.umask(security.PRIVATE_UMASK) | security.PRIVATE_UMASK)
    index = paths.index_path(config.base_dir)
    index_health.ensure_writable(index.parent, "index")
    index_health.ensure_writable(socket_path.parent, "socket")
    # Where the notes live, first in the log (after the one-sentence refusals above).
    for line in describe_config(config, config_path):
        log.info("%s", line)
    security.private_log_dir(paths.log_dir())  # 0700, daemon.log 0600 (older homes: 0755/0644)
    for loose in security.tighten(security.index_files(paths.index_path(config.base_dir))):
        log.warning("%s was readable by other users; it is now private (0600)", loose)
    for warning in security.config_warnings(config):
        log.warning("%s", warning)
    daemon = _open_daemon(config, index)
    daemon.live = LiveConfig(daemon, config_path)
    idle = daemon.idle = IdleStop(
        lambda: daemon.engine.config.float(IDLE_KEY),
        lambda: daemon.pending() > 0 or daemon._state() != "idle",
    )
    servers: list[Server] = []

    async def main() -> None:
        server = Server(
            idle.wrap(daemon.handlers()),
            {"watch": daemon.watch},
            socket_path,
            quick={"status", "get"},
            keep_lock=True,
        )
        servers.append(server)
        daemon.connections = lambda: server.admission.stats()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, server.request_shutdown)
        live = daemon.live
        assert live is not None
        with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
            loop.add_signal_handler(signal.SIGHUP, live.watcher.ask)  # no SIGHUP on Windows
        await server.start()
        log.info(
            "recalld listening on %s (provider %s)",
            socket_path,
            daemon.engine.embedder.label if daemon.engine.embedder else "none",
        )
        daemon.start()
        live.start()
        idle_task = asyncio.create_task(idle.run(server.request_shutdown))
        await server.serve_forever()
        idle_task.cancel()

    try:
        asyncio.run(main())
    finally:
        daemon.live.watcher.stop()
        clean = daemon.stop()
        if clean:  # otherwise the exit below releases it, once nothing writes any more
            for server in servers:
                server.release_lock()
    busy = _busy_handlers()
    if not clean or busy:
        # Handler threads still inside a long search or get, or the writer inside a batch:
        # the interpreter would join them at exit. Nothing they do needs finishing (reads, or
        # a transaction SQLite rolls back), so exit now rather than hold SIGTERM for minutes.
        log.info("exiting with busy threads: %s", ", ".join(busy) or "recalld-writer")
        logging.shutdown()
        os._exit(0)
    return 0


def _open_daemon(config: Config, index: Path) -> Daemon:
    """The daemon over a checked index: one that fails ``quick_check`` (or cannot even be
    opened as a database) is moved aside first, and the start's full sync rebuilds it. An index
    the last daemon closed cleanly is checked after the start instead (``_check_later``)."""
    clean = index_health.take_clean_mark(index)
    problem = None if clean else index_health.quick_check(index)
    aside = index_health.move_aside(index) if problem else None
    try:
        daemon = Daemon(config)
    except Exception as exc:  # a raw apsw error too: the engine reads the index at once
        if aside is not None or not index_health.is_corruption(exc):
            raise
        problem, aside = str(exc), index_health.move_aside(index)
        daemon = Daemon(config)
    if problem and aside is not None:
        daemon.note_damaged(problem, aside)
    daemon.check_after_start = clean and aside is None
    return daemon


def _busy_handlers(wait_s: float = 0.5) -> list[str]:
    """Names of the server's handler threads still running after ``wait_s`` (idle ones have
    ended by then: their pools were shut down)."""
    deadline = time.monotonic() + wait_s
    busy = []
    for thread in threading.enumerate():
        if thread.name.startswith(("recalld-handler", "recalld-quick")):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                busy.append(thread.name)
    return busy
