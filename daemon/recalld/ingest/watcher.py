"""Watch memory folders: watchdog handler threads only mark paths dirty; a debouncer hands over
batches of paths that have been quiet for ``sync.debounce_s``.

Editors save in many ways (write in place, write a temp file and rename it over the original,
delete and recreate); all of them end as "this path is dirty", and the indexer decides from the
disk what happened. Folder moves and deletes mark the folder, which the indexer expands.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from recalld.ingest.filters import PathFilter
from recalld.ingest.missed_events import OVERFLOW, THREAD_DIED, MissedEvents, OverflowLog
from recalld.ingest.watch_coverage import Coverage, unwatched_folders, watch_problem

log = logging.getLogger(__name__)

BatchHandler = Callable[[list[Path]], None]
RootsHandler = Callable[[list[Path]], None]
ROOT_CHECK_S = 2.0  # how often the roots' presence and mounts are checked

# Only changes. Without a filter inotify also reports every open and read-only close: a grep over
# the memory folder (2,410 files) then costs the daemon thousands of Python events per run, which
# the bench saw as 3x slower searches next to ripgrep.
EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileClosedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]


MAX_WAIT_S = 4.0  # a path written again and again is handed over at least this often


def max_wait(debounce_s: float) -> float:
    """How long a path may stay dirty while its events continue (never under the debounce)."""
    return max(MAX_WAIT_S, 2 * debounce_s)


class DirtySet:
    """Paths with the times of their first and last events; ``wait_ready`` pops those quiet for
    the debounce time, or dirty for :func:`max_wait` (a note rewritten every 0.3 s is indexed
    while the writes go on, not only once they stop).

    ``mark`` runs on watchdog's thread for every event of a storm (40,000 for 20,000 renames),
    so it wakes the waiting thread only when a path is due before the wake-up already planned.
    """

    def __init__(self, debounce_s: float) -> None:
        self.debounce_s = debounce_s
        self._dirty: dict[Path, tuple[float, float]] = {}  # path: (first, last) event
        self._handing: list[Path] = []  # popped by wait_ready, not yet handed over
        self._cond = threading.Condition()
        self._wake_at = 0.0  # when wait_ready means to look again (0: it is not waiting)

    def mark(self, path: Path) -> None:
        """Record an event on ``path`` (called from watchdog's threads: must be cheap)."""
        now = time.monotonic()
        with self._cond:
            first = self._dirty.get(path, (now, now))[0]
            self._dirty[path] = (first, now)
            if first == now and self._wake_at and now + self.debounce_s < self._wake_at:
                self._cond.notify()

    def paths(self) -> list[Path]:
        """The dirty paths, and those being handed over (for counting what waits)."""
        with self._cond:
            return [*self._dirty, *self._handing]

    def handed(self) -> None:
        """The batch of the last ``wait_ready`` is with its receiver now."""
        with self._cond:
            self._handing = []

    def __len__(self) -> int:
        with self._cond:
            return len(self._dirty) + len(self._handing)

    def wait_ready(self, stop: threading.Event) -> list[Path]:
        """Block until some paths are due (or ``stop`` is set); pop and return them."""
        with self._cond:
            while not stop.is_set():
                now = time.monotonic()
                quiet, longest = self.debounce_s, max_wait(self.debounce_s)
                due = now + 0.5  # nothing dirty: look again in a while (a stop, a new path)
                ready = []
                for p, (first, last) in self._dirty.items():
                    at = min(last + quiet, first + longest)
                    if at <= now:
                        ready.append(p)
                    elif at < due:
                        due = at
                if ready:
                    for p in ready:
                        del self._dirty[p]
                    self._handing = ready
                    self._wake_at = 0.0
                    return sorted(ready)
                # Not sooner than 0.05 s: in a storm every wake-up walks every dirty path.
                self._wake_at = max(due, now + 0.05)
                self._cond.wait(self._wake_at - now)
            self._wake_at = 0.0
            return []


class _Handler(FileSystemEventHandler):
    def __init__(self, root: Path, filter_: PathFilter, dirty: DirtySet) -> None:
        self.root = root
        self.filter = filter_
        self.dirty = dirty

    def _consider(self, raw: str | bytes, is_dir: bool) -> None:
        path = Path(os.fsdecode(raw))  # any bytes: the indexer's path rule decides
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return
        if any(not self.filter.dir_ok(part) for part in rel.parts[:-1]):
            return
        if is_dir:
            if rel.parts and not self.filter.dir_ok(rel.parts[-1]):
                return
            self.dirty.mark(path)
        elif self.filter.file_ok(path, self.root):
            self.dirty.mark(path)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory and event.event_type == "modified":
            return  # a folder's mtime changes with its files; those have their own events
        self._consider(event.src_path, event.is_directory)
        dest = getattr(event, "dest_path", "")
        if dest:
            self._consider(dest, event.is_directory)


class Watcher:
    """Observer over the memory roots plus the debounce thread that delivers batches."""

    def __init__(
        self,
        roots: Sequence[Path],
        filter_: PathFilter,
        debounce_s: float,
        on_batch: BatchHandler,
        on_roots_changed: RootsHandler | None = None,
        scan_interval_s: float = 30.0,
        roots_now: Callable[[], Sequence[Path]] | None = None,
        on_roots_moved: RootsHandler | None = None,
        missed: MissedEvents | None = None,
    ) -> None:
        self.roots = list(roots)
        # The roots as the config resolves them now: a root configured through a symlink that
        # is re-pointed leads elsewhere, while this watcher still watches the old folder.
        self.roots_now = roots_now
        self.on_roots_moved = on_roots_moved
        self._moved = False
        self.scan_interval_s = max(scan_interval_s, 0.5)  # 0 would spin
        self.filter = filter_
        self.dirty = DirtySet(debounce_s)
        self.on_batch = on_batch
        self.on_roots_changed = on_roots_changed
        self.paused = False
        self._stop = threading.Event()
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._thread: threading.Thread | None = None
        self._roots_thread: threading.Thread | None = None
        self._watches: dict[Path, Any] = {}
        self._signatures: dict[Path, tuple[Any, ...]] = {}
        self.coverage = Coverage()
        self._extra: dict[Path, list[Any]] = {}  # per root: watches of folders added later
        self._scan_thread: threading.Thread | None = None
        self._suspects: dict[Path, set[Path]] = {}  # unwatched at the last periodic check
        # Events lost (a queue overflow, a dead thread): the owner's, so that counts outlive
        # a restart of this watcher.
        self.missed = missed or MissedEvents()

    def start(self) -> None:
        """Start watching. A missing root is not created (it may be an unmounted drive): the
        root monitor starts watching it when it appears."""
        OverflowLog.listen(self._on_overflow)
        self._observer = self._new_observer()
        for root in self.roots:
            self._signatures[root] = root_signature(root)
            self._schedule(root)
        self._thread = threading.Thread(target=self._run, name="recalld-debounce", daemon=True)
        self._thread.start()
        self._roots_thread = threading.Thread(
            target=self._watch_roots, name="recalld-roots", daemon=True
        )
        self._roots_thread.start()
        self._scan_thread = threading.Thread(target=self._scan, name="recalld-scan", daemon=True)
        self._scan_thread.start()

    def _new_observer(self) -> Any:
        """A started observer, or None when the system has no inotify instance left for us."""
        try:
            observer = Observer()
            observer.daemon = True
            observer.start()
        except OSError as exc:
            self.coverage.set_all(self.roots, watch_problem(exc))
            log.warning("cannot watch memory folders: %s", watch_problem(exc))
            return None
        return observer

    def _schedule(self, root: Path) -> None:
        old = [self._watches.pop(root, None), *self._extra.pop(root, [])]
        for watch in old:
            if watch is not None and self._observer is not None:
                with contextlib.suppress(Exception):  # its emitter may have stopped by itself
                    self._observer.unschedule(watch)
        if not root.is_dir():
            self.coverage.clear(root)
            log.warning("memory folder %s is missing; watching it again when it is back", root)
            return
        if self._observer is None:
            self.coverage.set(root, [root], self.coverage.problem_of(root) or "not watched")
            return
        try:
            self._watches[root] = self._observer.schedule(
                _Handler(root, self.filter, self.dirty),
                str(root),
                recursive=True,
                event_filter=EVENTS,
            )
        except OSError as exc:
            self.coverage.set(root, [root], watch_problem(exc))
            log.warning("cannot watch %s: %s", root, watch_problem(exc))
            return
        self.check_coverage(root)

    def check_coverage(self, root: Path, *, settled: bool = True) -> None:
        """Find the folders under ``root`` that inotify does not watch (watchdog skips a
        folder silently when the watch limit is reached) and remember them for scanning.

        ``settled=False`` (the periodic check) counts a folder only when the previous check
        missed it too: watchdog adds the watch of a folder created a moment ago on its own
        thread, and that moment is not a reason to warn.
        """
        missing = unwatched_folders(root, self.filter)
        if missing is None:
            return  # this system cannot tell (no /proc): trust the watcher
        if not settled:
            suspects, self._suspects[root] = self._suspects.get(root, set()), set(missing)
            missing = [m for m in missing if m in suspects or m in self.coverage.folders(root)]
        problem = watch_problem(OSError(errno.ENOSPC, "")) if missing else ""
        before = self.coverage.folders(root)
        self.coverage.set(root, missing, problem)
        if missing and missing != before:
            log.warning(
                "%d folders under %s are not watched (%s); scanning them every %g s",
                len(missing),
                root,
                problem,
                self.scan_interval_s,
            )
        elif before and not missing:
            log.info("every folder under %s is watched again", root)

    def _scan(self) -> None:
        """While some folders are not watched: try to watch them (the limit may have been
        raised, other programs may have let go of watches), and mark them dirty so that the
        indexer reconciles them (new, changed and deleted files) like a moved-in folder."""
        while not self._stop.wait(self.scan_interval_s):
            for root in self.roots:
                if self._observer is not None and root in self._watches:
                    # Folders created since are watched by watchdog only while the limit allows.
                    self.check_coverage(root, settled=False)
                missing = self.coverage.folders(root)
                if not missing:
                    continue
                try:
                    self._watch_more(root, missing)
                except Exception:  # keep scanning whatever happens
                    log.warning("cannot watch %s again", root, exc_info=True)
                for folder in missing:  # also the ones watched just now: changes meanwhile
                    self.dirty.mark(folder)

    def _watch_more(self, root: Path, missing: list[Path]) -> None:
        """Add watches for unwatched folders without dropping the ones that work."""
        if self._observer is None:
            self._observer = self._new_observer()
            if self._observer is not None:
                self._schedule(root)
            return
        if missing == [root] and root not in self._watches:
            self._schedule(root)
            return
        for folder in missing:
            try:
                self._extra.setdefault(root, []).append(
                    self._observer.schedule(
                        _Handler(root, self.filter, self.dirty),
                        str(folder),
                        recursive=True,
                        event_filter=EVENTS,
                    )
                )
            except OSError:
                break  # still at the limit: scanning goes on
        self.check_coverage(root)

    def warnings(self) -> list[str]:
        """Lines for ``status.warnings`` (empty while every folder is watched)."""
        return self.coverage.warnings(self.scan_interval_s)

    def _watch_roots(self) -> None:
        """Notice roots that vanish, come back or get (un)mounted; re-watch them.

        inotify stops reporting when a watched folder is deleted or its file system unmounted,
        and never starts again by itself, so the roots' identities are polled cheaply.
        """
        while not self._stop.wait(ROOT_CHECK_S):
            self._check_moved()
            self._check_threads()
            self._reconcile_if_due()
            changed = []
            for root in self.roots:
                sig = root_signature(root)
                if sig != self._signatures.get(root):
                    self._signatures[root] = sig
                    try:
                        self._schedule(root)
                    except Exception:  # e.g. the observer is stopping
                        log.warning("cannot watch %s again", root, exc_info=True)
                    changed.append(root)
            if changed:
                log.info("memory folders changed state: %s", ", ".join(map(str, changed)))
                if self.on_roots_changed is not None:
                    try:
                        self.on_roots_changed(changed)
                    except Exception:
                        log.exception("handling changed memory folders failed")

    def _on_overflow(self) -> None:
        """watchdog logged a queue overflow (on its own thread): note it, reconcile later."""
        self.missed.note(OVERFLOW)

    def _check_threads(self) -> None:
        """An observer or emitter thread that ended (an exception in watchdog) sees nothing
        more: start a new observer and reconcile what was missed meanwhile."""
        observer = self._observer
        if observer is None or self._stop.is_set():
            return
        emitters = list(getattr(observer, "emitters", ()))
        if observer.is_alive() and all(e.is_alive() for e in emitters):
            return
        log.warning("the folder watcher's thread stopped; starting it again")
        self.missed.note(THREAD_DIED)
        with contextlib.suppress(Exception):
            observer.stop()
        self._watches.clear()
        self._extra.clear()
        self._observer = self._new_observer()
        for root in self.roots:
            self._schedule(root)

    def _reconcile_if_due(self) -> None:
        """After missed events, once calm: reconcile the roots with the disk, as after a root
        change (a full sync), and look for folders the rebuilt watches left out."""
        if not self.missed.due():
            return
        why = self.missed.warnings()
        log.warning("%s", why[0] if why else "events were missed; reconciling with the disk")
        for root in self.roots:
            if root in self._watches:  # watchdog's rebuilt watches may have left folders out
                self.check_coverage(root, settled=False)
        if self.on_roots_changed is None:
            for root in self.roots:  # a dirty folder is walked and reconciled by the indexer
                self.dirty.mark(root)
            return
        try:
            self.on_roots_changed(list(self.roots))
        except Exception:
            log.exception("reconciling after missed events failed")

    def _check_moved(self) -> None:
        """Hand over the roots once they resolve to other folders (the owner re-watches)."""
        if self.roots_now is None or self.on_roots_moved is None or self._moved:
            return
        try:
            now = list(self.roots_now())
        except Exception:  # a config that cannot be resolved now: keep watching
            log.warning("cannot resolve the memory folders", exc_info=True)
            return
        if now == self.roots:
            return
        self._moved = True  # once: the owner replaces this watcher
        log.info(
            "memory folders now lead elsewhere: %s -> %s",
            ", ".join(map(str, self.roots)),
            ", ".join(map(str, now)),
        )
        try:
            self.on_roots_moved(now)
        except Exception:
            log.exception("handling moved memory folders failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self.dirty.wait_ready(self._stop)
            if batch and not self.paused:
                try:
                    self.on_batch(batch)
                except Exception:
                    log.exception("handing over a batch of %d paths failed", len(batch))
                self.dirty.handed()
            elif batch:
                for p in batch:  # paused: keep them dirty for when watching resumes
                    self.dirty.mark(p)
                self.dirty.handed()
                self._stop.wait(0.5)

    def stop(self) -> None:
        """Stop the observer and the debounce thread."""
        self._stop.set()
        OverflowLog.forget(self._on_overflow)
        with self.dirty._cond:
            self.dirty._cond.notify_all()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._roots_thread is not None:
            self._roots_thread.join(timeout=5)
        if self._scan_thread is not None:
            self._scan_thread.join(timeout=5)


def root_signature(root: Path) -> tuple[Any, ...]:
    """What identifies a root's current folder: deleted, recreated or (un)mounted changes it."""
    try:
        st = os.stat(root)
    except OSError as exc:
        return ("unavailable", exc.errno)
    return (st.st_dev, st.st_ino, stat.S_ISDIR(st.st_mode), os.path.ismount(root))
