"""The daemon: the engine behind the socket server, one writer thread, and the watcher.

Handlers are plain functions in one table (callable in tests without a socket). Writes are jobs on
a queue consumed by the single writer thread; searches and gets run on read-only connections in
the server's worker threads, so they never wait for a sync. The process around it (``recalld
serve``) is in :mod:`recalld.serve.daemon_start`; status in :mod:`recalld.serve.daemon_status`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from recalld import paths
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
from recalld.serve import daemon_status
from recalld.serve.allocator import note_activity
from recalld.serve.backlog import Backlog, JobQueue
from recalld.serve.config_watch import LiveConfig
from recalld.serve.idle_stop import IdleStop
from recalld.serve.local_search import LocalSearch
from recalld.serve.path_slices import split_paths
from recalld.serve.retry_schedule import RetrySchedule
from recalld.serve.shared_link import SharedLink
from recalld.serve.status_stream import StatusStream
from recalld.serve.sync_paths import transcript_paths
from recalld.serve.write_handlers import WriteHandlers
from recalld.serve.writer_jobs import Job, run_job, take_batch, warm_wait

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], dict[str, Any]]
# How long a stop waits for the writer's current batch. Every batch is one transaction per
# file, so a batch cut short by the exit is rolled back and redone at the next start; waiting
# longer would let a big sync hold SIGTERM for minutes.
STOP_WAIT_S = 2.0


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
        self.stream = StatusStream(self.status_event, self._stop)
        self._last_progress_event = 0.0
        self.sessions: Any = None
        self.retries = RetrySchedule(self._retry_full, self._stop.is_set)
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
        self.searches = LocalSearch(self.engine, self._stop.is_set)
        self.helper = self.searches.helper  # status and stop reach it here
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
        self.retries.cancel()
        with self._watcher_lock:  # not while a moved root swaps it (it sees _stop after)
            if self.watcher is not None:
                self.watcher.stop()
        if self.sessions is not None:
            self.sessions.stop()
        self.chunker.close()
        self.backlog.stop()
        if self._writer.is_alive():
            self.jobs.put(None)
            self._writer.join(timeout=max(STOP_WAIT_S, warm_wait(self.engine)))
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

    def _writer_loop(self) -> None:
        """The writer thread: warm up, then one batch of merged jobs after another."""
        try:
            self.engine.warm()  # model and vector matrix ready before the first search needs them
        except Exception:
            log.exception("warming up failed")
        while True:
            batch = take_batch(self.jobs)
            if batch is None:
                return
            kinds = {j.kind for j in batch}
            missed = self.missed.asked  # what a full sync starting now catches up on
            self.backlog.begin()
            try:
                report, error = self._run_batch(batch, kinds), None
            except Exception as exc:
                log.exception("sync failed")
                report, error = {}, describe_write_error(exc, self.engine.index_path)
                if index_health.is_corruption(exc):
                    self._recover(str(exc))
                    self.submit(Job("full"))  # rebuild from the files, progress in status
            self._after_batch(kinds, report, error)
            if error is None and kinds & {"full", "reindex"}:
                self.missed.caught_up(missed)
            self._finish_batch(batch, report, error)

    def _run_batch(self, batch: list[Job], kinds: set[str]) -> dict[str, Any]:
        """Do one batch's work: calls, recovery, then the widest sync it asks for."""
        report: dict[str, Any] = {}
        for job in batch:
            if job.run is not None:
                job.run()
        if "recover" in kinds:
            why = self._damage_found or "a search or status read hit a damaged page"
            self._recover(why)
            kinds.add("full")  # the caller's set: after the batch it counts as a full sync
        if "reindex" in kinds:
            report = self.engine.reindex().as_dict()
        elif "full" in kinds:
            report = self.engine.sync().as_dict()
        elif "paths" in kinds:
            report = self._sync_paths(batch)
        if "sessions" in kinds and not kinds & {"full", "reindex"}:
            due: set[Path] = set().union(*(j.paths for j in batch if j.kind == "sessions"))
            report["sessions"] = self.engine.sync_sessions(sorted(due))
        sessions = self.sessions  # read once: a config edit may swap it
        if sessions is not None:
            sessions.mark_indexed(self.engine.last_session_sizes)
        if self.engine.vector_backlog.more:  # the next back-fill step, after queued jobs
            with contextlib.suppress(Unavailable):
                self.submit(Job("paths"))
        return report

    def _sync_paths(self, batch: list[Job]) -> dict[str, Any]:
        """Sync the batch's changed paths; a storm's rest is queued behind fresh edits."""
        now, later = split_paths(
            [(sorted(j.paths), j.deferred) for j in batch if j.kind == "paths"]
        )
        if later:  # a storm: the rest after edits that arrive meanwhile
            with contextlib.suppress(Unavailable):  # stopping: the start resyncs
                self.submit(Job("paths", set(later), deferred=True))
        return self.engine.sync(now).as_dict()

    def _finish_batch(self, batch: list[Job], report: dict[str, Any], error: str | None) -> None:
        """Preload when idle, settle the progress, answer the jobs' waiters, tell watchers."""
        if self.engine.preloader and self.jobs.empty() and not self.engine.vector_backlog.more:
            # idle: the common words' postings, read ahead (before the batch counts as
            # done, so that a status saying "idle" already says "preloading")
            self.engine.preloader.start()
        self.jobs.batch_done(report)
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
            self.retries.schedule()
        elif kinds & {"full", "reindex"}:
            self.retries.succeeded()

    def _retry_full(self) -> None:
        """The retry schedule's full sync (none while the daemon stops)."""
        with contextlib.suppress(Unavailable):
            self.submit(Job("full"))

    # events ---------------------------------------------------------------------------------------

    def _on_progress(self, progress: Progress) -> None:
        now = time.monotonic()
        if now - self._last_progress_event >= 0.25 or progress.phase == "idle":
            self._last_progress_event = now
            self._emit_status()

    def _emit_status(self) -> None:
        """Send :meth:`status_event` to ``watch`` subscribers (status_stream)."""
        self.stream.emit_status()

    def status_event(self) -> dict[str, Any]:
        """A compact status for ``watch`` subscribers (recalld.serve.daemon_status)."""
        return daemon_status.status_event(self)

    def pending(self) -> int:
        """Files left: of the running job, waiting in the watcher or the queue, being chunked."""
        return daemon_status.pending(self)

    def state(self) -> str:
        """The engine's state, but "syncing" between the syncs of one job (no flicker)."""
        return daemon_status.state(self)

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

        # The link of the moment: a config edit may replace it (restart_shared).
        return WriteHandlers(self.engine, submit, lambda p, s: self.shared.shares(p, s)).table()

    def h_search(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A search of the local index (and of the shared store when one is configured)."""
        return self.shared.search(params, lambda: self.searches.search(params))

    def h_get(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``get``: lines of a local file, or of a shared one (``shared:...`` citations)."""
        return self.shared.get(params) or self.engine.searcher.get(params)

    def h_status(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``status``: the engine's, with the daemon's progress and warnings."""
        return daemon_status.daemon_status(self)

    def _run_job(self, job: Job, params: Mapping[str, Any]) -> dict[str, Any]:
        """Queue ``job`` on the writer; wait for its report when asked (writer_jobs.run_job)."""
        return run_job(job, params, self.submit, self.engine, self._stop.is_set)

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

    def watch(self, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Stream of status events: the current one, then one per change (status_stream)."""
        return self.stream.watch(params)
