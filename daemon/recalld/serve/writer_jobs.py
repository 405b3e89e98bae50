"""The writer thread's jobs: one unit of work, and a burst of queued ones taken as one batch."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld.engine import Engine
from recalld.errors import BadRequest, Unavailable
from recalld.serve.backlog import JobQueue

#: How long a stop waits for a writer that has not finished its first sync: the warm-up (model,
#: vector matrix, row lengths: reads, nothing to roll back), then the start's sync, which a stop
#: cuts short. Exiting before leaves the index without its clean mark, so the next start checks
#: it before serving (up to 20 s at 1M): a quick restart cost 1.8-2.4x a cold start at 1M. A
#: saved matrix maps in 1-5 s there; a load from vec0 (22-60 s) is not waited for.
WARM_WAIT_S = 10.0


def warm_wait(engine: Engine) -> float:
    """Seconds a stop waits for the writer's warm-up (0 once a sync has finished)."""
    return WARM_WAIT_S if engine.last_sync is None else 0.0


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
    # A client waits for it: the reports of the batches that ended meanwhile (JobQueue), its own
    # last. A `sync --wait` sent during the start's sync waits for that one too, and answers both.
    reports: list[dict[str, Any]] | None = None


def take_batch(jobs: JobQueue) -> list[Job] | None:
    """The next job, merged with queued ones of the same kind (a burst becomes one sync);
    None when the stop marker comes first."""
    first = jobs.get()
    if first is None:
        return None
    merged = [first]
    while True:
        try:
            nxt = jobs.get_nowait()
        except queue.Empty:
            break
        if nxt is None:
            jobs.put(None)  # the stop marker stays for the next take
            break
        merged.append(nxt)
    return merged


def run_job(
    job: Job,
    params: Mapping[str, Any],
    submit: Callable[[Job], Job],
    engine: Engine,
    stopping: Callable[[], bool],
) -> dict[str, Any]:
    """Queue ``job``; with ``wait``, answer its report once it (and its vectors) are done."""
    wait = params.get("wait", False)
    if not isinstance(wait, bool):
        raise BadRequest("wait must be true or false")
    timeout = params.get("timeout_s", 3600)
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not 0 < timeout <= 86_400
    ):
        raise BadRequest(f"timeout_s must be seconds, above 0 and at most 86400: {timeout!r:.80}")
    if wait:
        job.reports = []
    submit(job)
    if not wait:
        return {"queued": True, "job": job.kind}
    deadline = time.monotonic() + float(timeout)
    if not job.done.wait(float(timeout)):
        raise Unavailable(f"the {job.kind} is still running after {timeout} s")
    if job.error:
        raise Unavailable(f"{job.kind} failed: {job.error}")
    report = merged_reports(job.reports or [job.result or {}])
    # Keyword first: the files are searchable now; waiting means their vectors too.
    vectors = engine.vector_backlog
    while vectors.more and time.monotonic() < deadline and not stopping():
        time.sleep(0.05)
    if "vectors_pending" in report:
        report["vectors_pending"] = bool(vectors.pending)
    return {"queued": False, "job": job.kind, "report": report}


# Counts a waiter's syncs add up; files checked are the most any one checked (each full sync
# checks them all) and so are the files skipped (each skips the same ones); the files not changed
# are what is left of those checked.
_ADDED = (
    "files_changed",
    "files_removed",
    "files_kept",
    "files_deferred",
    "chunks_written",
    "chunks_embedded",
)
_MOST = ("files_seen", "files_checked", "files_skipped", "files_to_retry")


def merged_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The reports of the syncs a client waited through, as one: the running sync it arrived
    during (the start's, which did the work) and its own (which found that work done)."""
    done = [r for r in reports if r]  # a batch of calls (remember, forget) reports nothing
    if len(done) <= 1:
        return dict(done[0] if done else reports[-1] if reports else {})
    out = dict(done[-1])  # its own sync's: vectors_pending, sessions, embed_error
    for key in _ADDED:
        out[key] = sum(int(r.get(key) or 0) for r in done)
    for key in _MOST:
        out[key] = max(int(r.get(key) or 0) for r in done)
    settled = sum(out[k] for k in ("files_changed", "files_removed", "files_skipped"))
    out["files_unchanged"] = max(out["files_checked"] - settled - out["files_deferred"], 0)
    out["seconds"] = round(sum(float(r.get("seconds") or 0) for r in done), 3)
    out["skipped"] = [s for r in done for s in r.get("skipped") or []][:100]
    out["embed_error"] = next(
        (r["embed_error"] for r in reversed(done) if r.get("embed_error")), None
    )
    sessions = [r["sessions"] for r in done if isinstance(r.get("sessions"), dict)]
    if sessions:
        out["sessions"] = _merged_sessions(sessions)
    out["syncs"] = len(done)
    return out


def _merged_sessions(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Transcript figures of several syncs: files checked the most any one did, the rest added."""
    out = dict(parts[-1])
    for key in {
        k for p in parts for k, v in p.items() if isinstance(v, int) and not isinstance(v, bool)
    }:
        values = [int(p.get(key) or 0) for p in parts]
        out[key] = max(values) if key == "files" else sum(values)
    return out
