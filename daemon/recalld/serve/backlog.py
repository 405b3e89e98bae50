"""The daemon's current job: the syncs that follow one another until nothing is left to do.

Copying 2,000 notes into a watched folder reaches the writer as dozens of watcher batches (the
debouncer hands over whatever has been quiet long enough, a few paths at a time), and a folder
copied in is walked once and then announced again file by file. Counted per sync, the progress
restarted with every batch and ``pending`` counted queued batches, not files. A job counts every
file once across its syncs (see :class:`~recalld.ingest.sync_report.Progress`); it ends when the
queue and the watcher's dirty set are both empty after a sync.

While a job runs, the log gets one progress line every ``sync.progress_log_s`` seconds (from a
thread of its own: an embedding call of half a minute must not silence it), and one line at
the end.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recalld.ingest.progress_text import describe
from recalld.ingest.sync_report import Progress

log = logging.getLogger("recalld.progress")

WAITING_CACHE_S = 0.5  # status and watch events ask often; counting 100k dirty paths is not free


class Backlog:
    """One job's progress across syncs, what waits for it, and its log lines."""

    def __init__(
        self,
        engine: Any,
        waiting_paths: Callable[[], tuple[list[Path], list[Path], int]],
        log_every_s: float,
    ) -> None:
        # ``waiting_paths``: paths dirty or in queued batches, the paths of the batch the
        # writer took, and the number of queued jobs that name no paths (a full sync, a
        # back-fill step, transcripts).
        self.engine = engine
        self.waiting_paths = waiting_paths
        self.log_every_s = log_every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cache: tuple[float, tuple[int, ...], int, int] | None = None

    # writer thread ------------------------------------------------------------------------------

    def begin(self) -> None:
        """A batch is about to run: start a job unless one is open."""
        self._cache = None
        if self.engine.job is None:
            job = Progress(phase="scanning")
            self.engine.job = job
            self.engine.progress = job

    def after_batch(self, drained: bool) -> None:
        """A batch ran; with nothing queued and nothing dirty, the job is over."""
        self._cache = None
        job = self.engine.job
        if not drained or job is None:
            return
        self.engine.job = None
        job.phase = "idle"
        job.end()
        job.release()
        # The last progress shown: the job's, or that of a rebuild run as part of it.
        last: Progress = self.engine.progress
        last.end()
        what = "sync" if last is job else "reindex"
        elapsed = time.monotonic() - job.started
        changed = last.files_changed + last.files_removed
        busy = changed or what == "reindex" or elapsed >= self.log_every_s > 0
        log.log(
            logging.INFO if busy else logging.DEBUG,
            "%s done: %s files checked (%s changed, %s removed), %s chunks written "
            "(%s embedded) in %.1f s%s",
            what,
            f"{last.files_done:,}",
            f"{last.files_changed:,}",
            f"{last.files_removed:,}",
            f"{last.chunks_done:,}",
            f"{last.chunks_embedded:,}",
            elapsed,
            f" ({job.syncs} syncs back to back)" if what == "sync" and job.syncs > 1 else "",
        )

    # any thread ---------------------------------------------------------------------------------

    def _waiting(self) -> tuple[int, int]:
        """(new, again): waiting paths not yet counted in the job, and queued work that only
        re-checks counted files or names no files (cached briefly)."""
        now = time.monotonic()
        job = self.engine.job
        queued, taken, other_jobs = self.waiting_paths()
        waiting, running = set(queued), set(taken)
        # Valid while nothing moved: a path goes from waiting to counted when a sync lists it.
        total = job.files_total if job is not None else -1
        key = (id(job), total, len(waiting), len(running), other_jobs)
        cached = self._cache
        if cached is not None and now - cached[0] < WAITING_CACHE_S and cached[1] == key:
            return cached[2], cached[3]
        new = again = 0
        for p in waiting | running:
            # A folder is walked when its turn comes (then its files count): work, not a file.
            if (job is not None and job.counted(str(p))) or _is_dir(p):
                again += p in waiting  # the running batch's own work is in the job's count
            else:
                new += 1  # taken by the writer but not listed yet: still counts
        again = 1 if again or other_jobs else 0
        self._cache = (now, key, new, again)
        return new, again

    def snapshot(self) -> tuple[dict[str, Any], int]:
        """The ``progress`` map of status and watch events (files waiting included) and the
        ``pending`` count, from the same numbers: files of the job not handled yet, new files
        waiting, and 1 while queued work only re-checks files the job has handled already."""
        job = self.engine.job
        if job is None:
            return self._snapshot()
        with job.lock:  # no file counted both as waiting and in the total (see Progress.lock)
            return self._snapshot()

    def _snapshot(self) -> tuple[dict[str, Any], int]:
        new, again = self._waiting()
        vectors = self.engine.vector_backlog.as_dict()  # keyword first: the vectors behind
        if self.engine.job is None and self.engine.state == "idle":
            shown = Progress(phase="waiting") if new else self.engine.progress
            return {**shown.as_dict(new), **vectors}, new + again
        # The job's own progress, or a rebuild's (a reindex counts every file afresh).
        progress: Progress = self.engine.progress
        p = {**progress.as_dict(new), **vectors}
        return p, max(p["files_total"] - p["files_done"], 0) + again

    def progress(self) -> dict[str, Any]:
        """The ``progress`` map alone."""
        return self.snapshot()[0]

    # the log ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Log progress lines while jobs run (nothing when ``sync.progress_log_s`` is 0)."""
        if self.log_every_s <= 0:
            return
        self._thread = threading.Thread(target=self._run, name="recalld-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the log thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.log_every_s):
            job = self.engine.job
            if job is None or time.monotonic() - job.started < self.log_every_s:
                continue  # short jobs get only their closing line
            try:
                what = "reindex" if self.engine.state == "reindexing" else "sync"
                log.info("%s", describe(self.progress(), f"{what} progress"))
            except Exception:  # a log line is never worth a dead thread
                log.debug("progress line failed", exc_info=True)


class JobQueue(queue.Queue[Any]):
    """The writer's queue; what the writer took stays visible (``taken``) until its batch is
    done, so that a status read between the take and the sync's listing misses nothing."""

    def _init(self, maxsize: int) -> None:
        super()._init(maxsize)
        self.taken: list[Any] = []

    def _get(self) -> Any:  # called with the queue's lock held
        item = super()._get()
        self.taken.append(item)
        return item

    def waiting(self) -> tuple[list[Any], list[Any]]:
        """(queued, taken) items, in one consistent read."""
        with self.mutex:
            return list(self.queue), list(self.taken)

    def batch_done(self, report: dict[str, Any]) -> None:
        """The writer finished what it took, with ``report``: given to every job a client waits
        for, taken or still queued (see writer_jobs.Job.reports)."""
        with self.mutex:
            for job in (*self.queue, *self.taken):
                reports = getattr(job, "reports", None)  # None: the stop marker, unwaited jobs
                if reports is not None:
                    reports.append(report)
            self.taken = []


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False
