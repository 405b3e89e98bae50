"""A second process for searches while several run at once (the daemon's side).

Searches are partly Python, and one interpreter runs Python on one core at a time: with four
clients on two cores, a daemon alone left a quarter of a core idle while its threads waited for
one another. So when a search arrives while another is running, the daemon starts a helper
(:mod:`recalld.serve.helper_process`): a read-only engine in its own interpreter, with its own
model and vectors (only once overlap lasts: ``START_AFTER`` overlapping searches within
``OVERLAP_WINDOW_S``). From then on, a search that finds more searches running here than in the
helper is handed to the helper; a lone search always runs here (no hand-off on its way).

The helper mirrors every change the writer commits: the daemon sends each one on the same
ordered stream as the searches, from before the helper opens the index, so nothing committed
is missed and a search handed over after a write sees it. A new index file, provider or config
retires the helper (a new one starts when searches overlap again), as do ``IDLE_S`` seconds
without a search handed over: its memory goes back. Idle time counts from when the helper was
ready or last answered, never while it loads (a start slower than ``IDLE_S`` on a busy machine
must not end a helper that never served); a start that takes over ``START_S`` is a failure.

Anything wrong with the helper (it failed to start, died, answered an error or too late) costs
nothing but time: the search runs here, and ``status`` says what happened. After
``MAX_FAILURES`` failures in a row it is not started again until the daemon restarts.
Only with the local model on a POSIX system: remote providers wait on the network, not on the
interpreter, and Windows has no descriptors to hand a child.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from recalld.index.store import FileChange
from recalld.serve.helper_link import HelperGone, Link
from recalld.serve.helper_wire import change_to_wire

log = logging.getLogger(__name__)

IDLE_S = 300.0  # a helper without a search handed over for this long is stopped
# Searches overlap now and then with two agents at work; a helper costs ~2 s of CPU to start.
# It starts only when overlap lasts: this many searches arriving while others ran, within
# OVERLAP_WINDOW_S (four clients searching back to back reach it in ~0.1 s).
START_AFTER = 8
OVERLAP_WINDOW_S = 5.0
# A handed-over search not answered by then runs here, and the helper is replaced. Searches it
# takes are local and ~10-100 ms (no reranker, at most MAX_VECTORS): seconds mean it is stuck.
ANSWER_S = 5.0
MAX_FAILURES = 3
# A helper loads in ~2 s (BENCHMARKS); one not ready after this long is stuck, not slow.
START_S = 120.0
# The helper loads its own copy of the vectors: not past this many (at 384 floats a vector,
# ~1.5 GB at 1M). A big index's searches are mostly native scanning, which threads share well.
MAX_VECTORS = 400_000


class SearchHelper:
    """Starts, feeds, uses and retires the daemon's search helper."""

    def __init__(
        self,
        hello: Callable[[], dict[str, Any]],
        *,
        eligible: Callable[[], str | None],
        enabled: Callable[[], bool] = lambda: True,
        idle_s: float = IDLE_S,
        answer_s: float = ANSWER_S,
        start_s: float = START_S,
    ) -> None:
        """``hello``: the settings message for a new helper; ``eligible``: why no helper may
        run now (None: it may); ``enabled``: whether the settings allow one (read each time; a
        config edit also retires a running helper, see ``Engine.reconfigure``)."""
        self._hello = hello
        self._eligible = eligible
        self._enabled = enabled
        self.idle_s = idle_s
        self.answer_s = answer_s
        self.start_s = start_s
        self._lock = threading.Lock()
        self._link: Link | None = None
        self._ready = False
        self._running = 0  # searches handed over and not answered yet
        self._last_used = time.monotonic()  # since ready or the last answer (ready helpers only)
        self._started_at = time.monotonic()
        self._failures = 0
        self.started = 0
        self.idle_stops = 0
        self.blocked: str | None = None  # why the last lasting overlap started no helper
        self.searches = 0
        self.fallbacks = 0
        self.load_s: float | None = None
        self.last_error: str | None = None
        self._stopped = False
        self._wake = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._overlaps: collections.deque[float] = collections.deque(maxlen=START_AFTER)

    @property
    def enabled(self) -> bool:
        """Whether a helper may be used at all (the settings, and POSIX)."""
        return os.name == "posix" and self._enabled()

    # routing ------------------------------------------------------------------------------

    def search(self, params: Mapping[str, Any], running: int) -> dict[str, Any] | None:
        """The helper's answer, or None: run the search here. ``running``: searches in flight
        now, here and in the helper (this one not counted)."""
        if running < 1 or not self.enabled:
            return None
        with self._lock:
            link = self._link
            if link is None:
                if self._overlap_lasts():
                    self._maybe_start()
                return None
            if not self._ready or self._running >= running - self._running:
                return None
            self._running += 1
            self._last_used = time.monotonic()
        try:
            result = link.search(params, self.answer_s)
        except HelperGone as exc:
            self._failed(link, str(exc))
            return None
        finally:
            with self._lock:
                self._running -= 1
                self._last_used = time.monotonic()  # idle from its last answer on
        with self._lock:
            self.searches += 1
            self._failures = 0
        return result

    # feeding ------------------------------------------------------------------------------

    def changed(self, change: FileChange) -> None:
        """A committed change: the helper (starting or ready) applies it in order."""
        link = self._link
        if link is not None:
            link.send(change_to_wire(change))

    def retire(self, why: str = "the index, provider or settings changed") -> None:
        """Stop the current helper; a new one starts when searches overlap again."""
        with self._lock:
            link, self._link, self._ready = self._link, None, False
        if link is not None:
            link.close(why)

    def close(self) -> None:
        """Stop for good (the daemon is stopping)."""
        with self._lock:
            self._stopped = True
        self._wake.set()
        self.retire("the daemon is stopping")

    def _watch_idle(self) -> None:
        """Retire an idle helper, until the daemon stops."""
        while not self._wake.wait(min(self.idle_s / 4, 30.0)):
            self.check_idle()

    def check_idle(self) -> None:
        """Retire a ready helper unused for ``idle_s``; fail one still loading after
        ``start_s`` (a helper loading is never idle: it has not had its chance to serve)."""
        with self._lock:
            link, now = self._link, time.monotonic()
            if link is None:
                return
            idle = self._ready and not self._running and now - self._last_used > self.idle_s
            stuck = not self._ready and now - self._started_at > self.start_s
            if idle:
                self.idle_stops += 1
        if idle:
            self.retire(f"no search handed over for {self.idle_s:g} s")
        elif stuck:
            self._failed(link, f"not ready within {self.start_s:g} s", fallback=False)

    def status(self) -> dict[str, Any]:
        """For ``status.daemon.search_helper``: its state, why it is not running, and what it
        did (helpers started, searches it answered, searches that fell back to the daemon)."""
        blocked = self._eligible() if self.enabled else None
        with self._lock:
            link = self._link
            state = (
                "off"
                if not self.enabled
                else "ready"
                if self._ready
                else "starting"
                if link is not None
                else "failed"
                if self._failures >= MAX_FAILURES
                else "idle"
            )
            return {
                "state": state,
                "pid": link.process.pid if link and link.process and self._ready else None,
                "started": self.started,
                "searches": self.searches,
                "fallbacks": self.fallbacks,
                "load_s": self.load_s,
                "last_error": self.last_error,
                "idle_stops": self.idle_stops,
                "why": self._why(state, blocked),
            }

    def _why(self, state: str, blocked: str | None) -> str | None:
        """Why no helper answers searches now, in words (lock held); None when one is ready."""
        if state == "off":
            if os.name != "posix":
                return "a search helper needs a POSIX system"
            return "switched off (search.helper_process = false)"
        if state == "ready":
            return None
        if state == "starting":
            return f"loading for {time.monotonic() - self._started_at:.1f} s"
        if state == "failed":
            return f"not started again after {MAX_FAILURES} failures in a row: {self.last_error}"
        if blocked is not None:
            return f"may not start: {blocked}"
        now = time.monotonic()
        recent = sum(1 for t in self._overlaps if now - t <= OVERLAP_WINDOW_S)
        waiting = (
            f"starts when {START_AFTER} searches arrive while others run within "
            f"{OVERLAP_WINDOW_S:g} s ({recent} in the last {OVERLAP_WINDOW_S:g} s)"
        )
        if self.blocked is not None:
            return f"{waiting}; the last time, it might not start: {self.blocked}"
        return waiting

    # internals ----------------------------------------------------------------------------

    def _overlap_lasts(self) -> bool:
        """Count one search that arrived while others ran; whether overlap lasts (lock held)."""
        now = time.monotonic()
        self._overlaps.append(now)
        return len(self._overlaps) == START_AFTER and now - self._overlaps[0] <= OVERLAP_WINDOW_S

    def _maybe_start(self) -> None:
        """Start a helper when one may run (lock held)."""
        if self._stopped or self._failures >= MAX_FAILURES:
            return
        blocked = self._eligible()
        if blocked is not None and blocked != self.blocked:  # once a reason, not each search
            log.info("searches overlap, but no search helper may start: %s", blocked)
        self.blocked = blocked
        if blocked is not None:
            return
        if self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._watch_idle, name="recalld-helper-idle", daemon=True
            )
            self._watchdog.start()
        # The hello is queued before the link is published: a change the writer sends from
        # then on follows it.
        link = Link(self._hello(), self._on_ready)
        self._link, self._ready = link, False
        self._started_at = time.monotonic()
        self.started += 1
        try:
            link.start()
        except Exception as exc:  # noqa: BLE001 - no helper: searches run here
            self._link = None
            self._note_failure(f"the helper did not start: {exc}")
            link.close(str(exc))

    def _on_ready(self, link: Link, msg: dict[str, Any]) -> None:
        with self._lock:
            current = link is self._link
            if current and msg.get("op") == "ready":
                self._ready = True
                self._last_used = time.monotonic()  # idle from now on, not from its start
                self.load_s = msg.get("load_s")
                log.info("search helper %s ready in %s s", msg.get("pid"), self.load_s)
                return
        why = str(msg.get("error") or msg)
        if current:
            self._failed(link, f"the helper did not start: {why}", fallback=False)
        else:
            link.close(why)

    def _failed(self, link: Link, why: str, *, fallback: bool = True) -> None:
        """``link`` failed (``fallback``: a search it was handed runs here instead)."""
        with self._lock:
            self.fallbacks += fallback
            if link is self._link:
                self._link, self._ready = None, False
                self._note_failure(why)
        link.close(why)

    def _note_failure(self, why: str) -> None:
        """(lock held)"""
        self._failures += 1
        self.last_error = why
        log.warning("search helper: %s (searches run in the daemon)", why)
