"""Transcripts into the index on byte and message deltas.

:class:`SessionIndexer` (writer side) reads only the complete new lines of each transcript, parses
and redacts them, and rewrites only the transcript's open last chunk plus the new ones, in one
transaction with the tail state. :class:`SessionWatcher` (daemon side) polls the transcript globs
cheaply (``stat``) and asks for a sync when enough new bytes or messages arrived, or when a grown
file has been quiet for a few seconds.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.index import tombstones
from recalld.index.chunk_facts import put_file_facts
from recalld.index.index_health import is_index_failure
from recalld.index.store import FileChange, FileRow, Store
from recalld.ingest.forgotten import Forgotten
from recalld.ingest.path_rule import Swapped, Verdict, inside, name_problem, open_checked, shown
from recalld.ingest.session_delta import Saved, Step, chunk_delta, state_row, tail_extra
from recalld.ingest.session_delta import new_chunk as new_chunk  # re-exported
from recalld.ingest.sessions import Delta, SessionChunker, TailState, TranscriptParser, read_delta
from recalld.ingest.sessions.chunking import checked_kinds
from recalld.paths import glob_base

log = logging.getLogger(__name__)

MAX_DELTA_BYTES = 64 * 1024 * 1024  # per call; a bigger backlog is read in several steps


def transcript_files(globs: Iterable[str], skipped: dict[str, str] | None = None) -> list[Path]:
    """Files matching the transcript globs (``**`` recursive) that pass the path rule.

    As on the memory side (:mod:`recalld.ingest.path_rule`): a match whose real path lies outside
    the glob's fixed folder (a link out) is left out, since ``get`` refuses it; so is a name that
    is not valid UTF-8 (it cannot be stored) and anything but a regular file. Refusals worth
    telling the user go into ``skipped`` (shown path -> reason).
    """
    found: dict[str, Path] = {}
    for pattern in globs:
        expanded = os.path.expanduser(pattern)
        base = os.path.realpath(glob_base(expanded))
        for name in glob.glob(expanded, recursive=True):
            path = Path(name).absolute()
            reason = name_problem(path)
            try:
                real = os.path.realpath(path)
            except OSError:  # a link swapped while it was resolved: the next scan sees it
                continue
            if reason is None and base not in ("/", ".") and not inside(real, [base]):
                reason = f"a link out of {base}"
            if reason is None:
                if os.path.isfile(real):
                    found.setdefault(str(path), path)
                continue
            log.info("skipping transcript %s: %s", shown(path), reason)
            if skipped is not None:
                skipped[shown(path)] = reason
    return sorted(found.values())


def transcript_bases(globs: Iterable[str]) -> list[str]:
    """The real folders the transcript globs start from (``/`` when a glob has no fixed part)."""
    bases = {os.path.realpath(glob_base(os.path.expanduser(g))) for g in globs}
    return sorted(b if b not in ("", ".") else "/" for b in bases)


def open_transcript(path: Path, bases: Sequence[str]) -> BinaryIO:
    """A transcript opened for reading, the same file that was checked.

    The read is what reaches the index, so it must not follow a link swapped in after
    :func:`transcript_files` admitted the path: the real path must lie under a glob's folder,
    the last part is opened with ``O_NOFOLLOW`` and the descriptor is compared with what was
    checked (:func:`recalld.ingest.path_rule.open_checked`). Raises ``OSError`` (``Swapped``)
    otherwise.
    """
    real = os.path.realpath(path)
    if not inside(real, bases):
        raise Swapped(0, f"{shown(path)} leads out of the transcript folders (a link?)")
    st = os.stat(real)
    fd = open_checked(Verdict(True, real=real, st=st), bases)
    return os.fdopen(fd, "rb")


@dataclass
class SessionReport:
    """What one sessions sync did."""

    files: int = 0
    files_changed: int = 0
    files_reset: int = 0
    files_removed: int = 0
    lines: int = 0
    messages: int = 0
    chunks_written: int = 0
    skipped_lines: int = 0
    long_lines: int = 0  # of skipped_lines: over sessions.max_line_bytes, never read whole
    indexed_sizes: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Wire form (without the per-file sizes)."""
        out = dict(self.__dict__)
        out.pop("indexed_sizes")
        return out


class SessionIndexer:
    """Indexes transcripts into a store (one per write connection)."""

    def __init__(
        self,
        store: Store,
        config: Config,
        vectors_for: Callable[[dict[str, str]], dict[str, Any] | None],
        count_tokens: Callable[[str], int],
        embedder: Embedder | None,
        *,
        on_change: Callable[[FileChange], None] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.vectors_for = vectors_for
        self.count_tokens = count_tokens
        self.on_change = on_change
        self.max_tokens = config.int("chunking.max_tokens")
        if embedder is not None:
            self.max_tokens = min(self.max_tokens, embedder.max_input_tokens)
        self.target_tokens = min(config.int("chunking.target_tokens"), self.max_tokens)
        self.skipped: dict[str, str] = {}  # transcripts not indexed (shown path -> why)
        self.max_line_bytes = config.int("sessions.max_line_bytes")

    def _parser(self, fmt: str | None) -> TranscriptParser:
        return TranscriptParser(
            fmt,
            include_thinking=self.config.bool("sessions.include_thinking"),
            tool_result_chars=self.config.int("sessions.tool_result_chars"),
            max_line_bytes=self.max_line_bytes,
        )

    def _chunker(self) -> SessionChunker:
        return SessionChunker(
            self.count_tokens,
            max_tokens=self.max_tokens,
            target_tokens=self.target_tokens,
            embed_kinds=checked_kinds(self.config.list("sessions.embed_kinds")),
            tool_head_chars=self.config.int("sessions.embed_tool_head_chars"),
            overlap=self.config.float("chunking.message_window_overlap"),
        )

    def sync(self, paths: Iterable[Path] | None = None) -> SessionReport:
        """Index new lines of the given transcripts (all matching files when None)."""
        report = SessionReport()
        globs = self.config.session_globs()
        if paths is None:
            files = transcript_files(globs, self.skipped)
            known = self.store.files("sessions")
            present = {str(p) for p in files}
            for gone in [p for p in known if p not in present]:
                self._change(self.store.remove_file(gone))
                report.files_removed += 1
        else:
            files = []
            for p in paths:
                if Path(p).is_file():
                    files.append(Path(p))
                elif self.store.file(str(p)) is not None:
                    self._change(self.store.remove_file(str(p)))
                    report.files_removed += 1
        files = self._leave_out_forgotten(files, report)
        report.files = len(files)
        for path in files:
            try:
                self._sync_file(path, report)
            except FileNotFoundError:  # vanished mid-read: its rows go now, as a note's do
                if self.store.file(str(path)) is not None:
                    self._change(self.store.remove_file(str(path)))
                    report.files_removed += 1
            except Exception as exc:  # one bad transcript never stops the others
                if is_index_failure(exc):
                    raise  # the index, not the file: the whole sync fails (retried / rebuilt)
                log.warning("skipping transcript %s: %s", path, exc, exc_info=True)
                self.skipped[str(path)] = f"indexing failed: {exc}"
        return report

    def _leave_out_forgotten(self, files: list[Path], report: SessionReport) -> list[Path]:
        """Transcripts a tombstone covers are not read, however they grow; their rows go."""
        forgotten = Forgotten(tombstones.all_of(self.store.conn), self.config.memory_roots())
        if not forgotten:
            return files
        kept = []
        for path in files:
            if forgotten.covers(path) is None:
                kept.append(path)
                continue
            with contextlib.suppress(OSError):  # the poller counts it as seen at this size
                report.indexed_sizes[str(path)] = path.stat().st_size
            if self.store.file(str(path)) is not None:
                self._change(self.store.remove_file(str(path)))
                report.files_removed += 1
        return kept

    def _open(self, path: Path) -> BinaryIO:
        """``path`` opened as checked: never through a link swapped in out of the folders."""
        return open_transcript(path, transcript_bases(self.config.session_globs()))

    def _sync_file(self, path: Path, report: SessionReport) -> None:
        """Index a transcript's new lines, at most MAX_DELTA_BYTES of them at a time."""
        key = str(path)
        saved = Saved.load(self.store.session_state(key))
        while True:
            delta = read_delta(
                path,
                saved.tail,
                max_bytes=MAX_DELTA_BYTES,
                max_line_bytes=self.max_line_bytes,
                opener=self._open,
            )
            fresh = delta.reset or saved.tail is None
            parser, chunker, keep_from = self._resume(saved, delta, report, fresh=fresh)
            report.indexed_sizes[key] = delta.state.scan_end
            if not delta.lines and not delta.reset and saved.tail is not None:
                if delta.state != saved.tail:  # scanned further into an unfinished line, or touched
                    self._save_state(key, saved.row, saved.extra, delta.state, saved.long_lines)
                return
            step = chunk_delta(delta, saved, parser, chunker, fresh=fresh)
            self._write(path, step, keep_from, fresh=fresh)
            _count(report, delta, step)
            if not delta.more:
                return
            saved.advance(step)

    def _resume(
        self, saved: Saved, delta: Delta, report: SessionReport, *, fresh: bool
    ) -> tuple[TranscriptParser, SessionChunker, int]:
        """The parser and chunker to feed the delta, and the first line whose rows it rewrites."""
        if fresh:
            saved.skipped = saved.long_lines = 0
            if delta.reset and saved.tail is not None:
                report.files_reset += 1
            return self._parser(None), self._chunker(), 1  # replace everything indexed for it
        assert saved.tail is not None  # not fresh: resumed from a stored tail
        parser = self._parser(str(saved.extra.get("format") or "") or None)
        parser.calls = dict(saved.extra.get("calls") or {})
        chunker = self._chunker()
        chunker.restore(saved.extra.get("chunker", {}))
        open_start = saved.extra.get("open_start")
        return parser, chunker, int(open_start) if open_start else (saved.tail.line_count + 1)

    def _write(self, path: Path, step: Step, keep_from: int, *, fresh: bool) -> None:
        """The delta's chunks, tail state and file facts, in one transaction."""
        key = str(path)
        vectors = self.vectors_for({c.hash: c.text for c in step.chunks if c.embed})
        tail = step.tail
        row = FileRow(
            key, "sessions", tail.size, _mtime_ns(path), tail.last_line_hash, tail.line_count
        )
        with self.store.transaction():
            change = self.store.replace_file(
                row,
                step.chunks,
                vectors,
                keep_from_line=keep_from,
                session_state=step.state,
                rewrite_kinds=None if fresh else ["message"],  # tool chunks are final
            )
            put_file_facts(self.store.conn, key, *step.ident)
        self._change(change)

    def _save_state(
        self,
        key: str,
        saved: dict[str, Any] | None,
        extra: dict[str, Any],
        tail: TailState,
        long_lines: int,
    ) -> None:
        """Store a new tail state for a file whose chunks did not change."""
        state = state_row(tail, str(saved["format"]) if saved else "unknown", 0)
        state["skipped"] = int(saved["skipped"]) if saved else 0
        state["state"] = {**extra, "tail": tail_extra(tail), "long_lines": long_lines}
        with self.store.conn:
            self.store.set_session_state(key, state)

    def _change(self, change: FileChange) -> None:
        if self.on_change is not None:
            self.on_change(change)


def _count(report: SessionReport, delta: Delta, step: Step) -> None:
    """Add one written delta to the report."""
    report.files_changed += 1
    report.lines += len(delta.lines)
    report.messages += step.messages
    report.chunks_written += len(step.chunks)
    report.skipped_lines += step.dropped + delta.skipped_lines
    report.long_lines += delta.skipped_lines


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


class SessionWatcher:
    """Polls transcript files and triggers a sync on byte/message deltas or quiet time."""

    def __init__(
        self,
        config: Config,
        trigger: Callable[[set[Path]], None],
        *,
        poll_s: float = 0.5,
        rescan_s: float = 5.0,
    ) -> None:
        self.globs = config.session_globs()
        self.delta_bytes = config.int("sessions.delta_bytes")
        self.delta_messages = config.int("sessions.delta_messages")
        self.quiet_s = config.float("sessions.quiet_s")
        self.trigger = trigger
        self.poll_s = poll_s
        self.rescan_s = rescan_s
        self._indexed: dict[Path, int] = {}
        self._seen: dict[Path, tuple[int, float]] = {}  # size, time it last changed
        # When the bytes not indexed yet were first seen: a transcript growing by a message
        # every second is never quiet, and may stay under the deltas for minutes.
        self._waiting_since: dict[Path, float] = {}
        self.max_wait_s = max(3 * self.quiet_s, 4.0)
        self._sigs: dict[Path, tuple[int, int, int]] = {}  # size, mtime_ns, ctime_ns
        self._touched: set[Path] = set()  # changed without changing size, not yet synced
        self._requested: set[Path] = set()
        self._files: list[Path] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start polling (no-op without globs)."""
        if not self.globs:
            return
        self._thread = threading.Thread(target=self._run, name="recalld-sessions", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def mark_indexed(self, sizes: dict[str, int]) -> None:
        """Record what the writer has indexed (bytes per file)."""
        with self._lock:
            for name, size in sizes.items():
                self._indexed[Path(name)] = size
                self._requested.discard(Path(name))

    def stats(self) -> dict[str, Any]:
        """For ``status``."""
        with self._lock:
            waiting = sum(
                1 for p, (size, _) in self._seen.items() if size != self._indexed.get(p, -1)
            )
            return {"files": len(self._files), "waiting": waiting, "globs": self.globs}

    def _run(self) -> None:
        last_scan = 0.0
        while not self._stop.wait(self.poll_s):
            now = time.monotonic()
            if now - last_scan >= self.rescan_s:
                self._files = transcript_files(self.globs)
                last_scan = now
            due = self.poll_once(now)
            if due:
                self.trigger(due)

    def poll_once(self, now: float) -> set[Path]:
        """Paths whose pending delta should be indexed now."""
        due: set[Path] = set()
        with self._lock:
            for path in self._files:
                try:
                    st = path.stat()
                except OSError:
                    continue
                size = st.st_size
                prev = self._seen.get(path)
                if prev is None or prev[0] != size:
                    self._seen[path] = (size, now)
                # Same size but new mtime/ctime: maybe edited in place (the writer re-hashes).
                sig = (size, st.st_mtime_ns, st.st_ctime_ns)
                old_sig = self._sigs.get(path)
                self._sigs[path] = sig
                if old_sig is not None and old_sig[0] == size and old_sig != sig:
                    self._touched.add(path)
                indexed = self._indexed.get(path)
                if path in self._requested:
                    continue
                if indexed is None or old_sig is None or path in self._touched:
                    # New to this run (it may have changed since it was indexed: the writer
                    # compares with what it saw then), or changed in place since.
                    self._touched.discard(path)
                    due.add(path)
                    continue
                if size == indexed:
                    self._waiting_since.pop(path, None)
                    continue
                new_bytes = size - indexed
                quiet = now - self._seen[path][1] >= self.quiet_s
                waited = now - self._waiting_since.setdefault(path, now) >= self.max_wait_s
                if (
                    new_bytes < 0
                    or new_bytes >= self.delta_bytes
                    or quiet
                    or waited
                    or _count_lines(path, indexed, size) >= self.delta_messages
                ):
                    due.add(path)
                    self._waiting_since.pop(path, None)
            self._requested |= due
        return due


def _count_lines(path: Path, start: int, end: int) -> int:
    """Newlines among the pending bytes (bounded: only called below ``delta_bytes``)."""
    try:
        with path.open("rb") as fh:
            fh.seek(start)
            return fh.read(max(end - start, 0)).count(b"\n")
    except OSError:
        return 0
