"""Incremental sync of memory folders into the store.

A file is skipped by size + mtime, then by content hash; a changed file is re-chunked and only
chunks whose text is missing from the embedding cache are embedded. Each file is written in a
savepoint of its own (inside one transaction per batch of files), so a crash leaves every file
either fully old or fully new. Chunks of several files are embedded together, because the model
is fastest on full batches.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.fd_limits import OUT_OF_RESOURCES
from recalld.index import tombstones
from recalld.index.index_health import is_index_failure
from recalld.index.store import FileChange, FileRow, Store
from recalld.ingest import first_pass
from recalld.ingest.batch_write import fewer_checkpoints, write_batch
from recalld.ingest.chunk_pool import Outcome, Raw, pool_for
from recalld.ingest.chunk_vectors import ChunkVectors
from recalld.ingest.chunking import Chunk
from recalld.ingest.dirty_paths import DirtyPaths
from recalld.ingest.embed_ahead import EmbedAhead
from recalld.ingest.facts_backfill import backfill_facts
from recalld.ingest.filters import PathFilter, make_filter
from recalld.ingest.forgotten import Forgotten
from recalld.ingest.note_rows import ChunkSettings, note_rows, note_text, pieces_of
from recalld.ingest.note_rows import text_hash as text_hash  # re-exported: where callers look
from recalld.ingest.path_rule import (
    PathRule,
    Swapped,
    Verdict,
    read_checked,
    shown,
)
from recalld.ingest.removals import ChangeHook as ChangeHook  # re-exported
from recalld.ingest.removals import Removals
from recalld.ingest.sessions.redaction_tally import count as tally_redactions
from recalld.ingest.sync_report import Prepared as Prepared  # re-exported: engine, daemon, tests
from recalld.ingest.sync_report import Progress as Progress
from recalld.ingest.sync_report import SyncReport as SyncReport
from recalld.ingest.sync_report import changed_file, skip_file
from recalld.ingest.vector_backfill import (
    BACKFILL_BUDGET_S,
    BIG_FILE_BYTES,
    BackgroundChunker,
    VectorBacklog,
    fill,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")

EMBED_GROUP_CHUNKS = 256  # chunks embedded per call across files


def content_hash(data: bytes) -> str:
    """Hash of a file's bytes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


ProgressHook = Callable[[Progress], None]


class Indexer(DirtyPaths, Removals, ChunkVectors):
    """Brings the store in line with the memory folders (the writer side; one per write conn)."""

    def __init__(
        self,
        store: Store,
        config: Config,
        embedder: Embedder | None,
        count_tokens: Callable[[str], int],
        *,
        on_change: ChangeHook | None = None,
        on_progress: ProgressHook | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.embedder = embedder
        self.count_tokens = count_tokens
        from recalld.tokens import adds_up  # here: importing the indexer loads no tokenizer

        self.additive = adds_up(count_tokens)  # WordPiece's: chunks are not counted twice
        self.on_change = on_change
        self.on_progress = on_progress
        self.roots = config.memory_roots()
        self.filter: PathFilter = make_filter(config.list("memory.extensions"))
        self.rule = PathRule(self.roots, self.filter)
        self._verdicts: dict[str, Verdict] = {}  # admitted by this sync's listing
        self.max_bytes = config.int("memory.max_file_bytes")
        self.max_tokens = config.int("chunking.max_tokens")
        if embedder is not None:
            self.max_tokens = min(self.max_tokens, embedder.max_input_tokens)
        self.target_tokens = min(config.int("chunking.target_tokens"), self.max_tokens)
        self.front_matter = config.bool("chunking.front_matter")
        self.chat_overlap = (
            config.float("chunking.chat_window_overlap")
            if config.bool("chunking.chat_windows")
            else None
        )
        self.chat_chars = config.int("chunking.chat_window_chars")
        self.progress = Progress()
        # Set by the daemon while one job spans several syncs (watcher batches back to back):
        # they all count into it, each file once.
        self.job: Progress | None = None
        self.embed_error: str | None = None
        self._known: dict[str, FileRow] | None = None
        self._sorted_keys: tuple[dict[str, FileRow], list[str]] | None = None  # _indexed_under
        # Roots whose files must not be removed now (missing, unmounted), set by the engine.
        self.unavailable_roots: dict[Path, str] = {}
        # Set by the daemon: files go in keyword-first (big notes chunked off the writer), their
        # vectors embedded by ``ahead``'s thread and written in steps of about a second (see
        # recalld.ingest.vector_backfill). Unset (in-process syncs): vectors are embedded inline.
        self.background: BackgroundChunker[list[Chunk]] | None = None
        self.ahead: EmbedAhead | None = None
        self.backlog: VectorBacklog | None = None  # the engine's count of chunks due a vector
        self.quick_first_pass = False  # the daemon's live index (not a rebuild's): first_pass
        # False for a note recalld just wrote: two writes within one tick of the file system's
        # clock may leave the same size and mtime, so the content hash decides.
        self.trust_stat = True
        self.cut_short = False  # the last sync ended early: the daemon is stopping

    # discovery --------------------------------------------------------------------------------

    def memory_files(self, report: SyncReport | None = None) -> list[Path]:
        """Every file under the memory roots that the path rule admits."""
        seen: dict[str, Path] = {}
        for root in self.roots:
            for path, is_link in self.filter.walk(root):
                if self._stopping():  # nothing is removed after (sync), nor indexed
                    break
                verdict = self.rule.check_walked(path, root, is_link)
                if verdict.ok:
                    seen.setdefault(str(path), path)
                    self._verdicts[str(path)] = verdict  # _prepare uses it: one lstat per file
                elif report is not None and verdict.reported and verdict.reason != "gone":
                    skip_file(report, path, verdict.reason)
        return list(seen.values())

    def root_of(self, path: Path) -> Path | None:
        """The memory root that holds ``path``."""
        return self.rule.root_of(path)

    # sync ---------------------------------------------------------------------------------------

    def sync(self, paths: Iterable[Path] | None = None) -> SyncReport:
        """Reconcile all memory files (``paths`` None) or just the given ones (watcher batches)."""
        started = time.monotonic()
        backfill_facts(self.store)  # rows indexed before the search filters' facts existed
        report = SyncReport()
        self._begin()
        files, gone, forgotten = self._work(paths, report)
        report.files_seen = len(files)
        # Each file once: those listed, those refused at listing (skipped already), and the
        # indexed rows whose file is no longer listed (or forgotten).
        report.files_checked = len(files) + report.files_skipped + len(gone)
        self.progress.phase = "indexing"
        self.progress.add(gone)
        self.progress.add(str(f) for f in files)
        self._first_pass(files)  # a full sync's, or a folder copied in (a watcher batch)
        self._index_files(files, report)
        # After the files: the sources of 20,000 renames are 20,000 removals, which must not
        # hold up the edits among the files (a removal has nothing newer to show).
        if not self._stopping():
            self._remove_gone(gone, forgotten, report)
        self._end(report, started)
        return report

    def _first_pass(self, files: list[Path]) -> None:
        """A big first sync in the daemon (or a big folder copied in): every new note
        keyword-searchable as one row before the notes are chunked (recalld.ingest.first_pass);
        the chunked pass then replaces them."""
        if not self.quick_first_pass or len(files) < first_pass.first_pass_files():
            return
        known = self._indexed()
        new = first_pass.new_notes(files, known)
        if len(new) < first_pass.first_pass_files():
            return
        # What reading finds (skipped, vanished) is counted by the chunked pass, not here.
        scratch, progress, self.progress = SyncReport(), self.progress, Progress()

        def read(path: Path) -> Raw | None:
            verdict = self._verdicts.get(str(path))
            try:
                return self._prepare_one(path, scratch, partial(self._read, path, scratch))
            finally:
                if verdict is not None:  # the chunked pass checks the file with it again
                    self._verdicts[str(path)] = verdict

        started = time.monotonic()
        try:
            rows = first_pass.write(self.store, map(read, new), self._stopping, self._apply)
        finally:
            self.progress = progress
        known.update(rows)  # read again by the chunked pass: their stat never matches
        took = time.monotonic() - started
        log.info("first pass: %d new notes keyword-searchable in %.2f s", len(rows), took)

    def _begin(self) -> None:
        """Start counting into the daemon's job (or a progress of this sync's own)."""
        self.progress = self.job if self.job is not None else Progress()
        self.progress.phase = "scanning"
        self.progress.syncs += 1
        self._emit()

    def _work(
        self, paths: Iterable[Path] | None, report: SyncReport
    ) -> tuple[list[Path], list[str], set[str]]:
        """The files to read (newest first), the rows to check for removal, the forgotten rows."""
        if paths is None:
            files = self.memory_files(report)
            indexed = self.store.files("memory")
            self._known = indexed  # one query instead of one per file (no-op resyncs)
            present = {str(f) for f in files}
            gone = [p for p in indexed if p not in present]
        else:
            files, gone = self._expand(paths, report)
        files, forgotten_rows = self._leave_out_forgotten(files)
        gone += forgotten_rows
        files.sort(key=self._newest_first)  # an edit made during a storm is not the last
        return files, gone, set(forgotten_rows)

    def _index_files(self, files: list[Path], report: SyncReport) -> None:
        """Prepare each file and write them in batches of about EMBED_GROUP_CHUNKS chunks."""
        pending: list[Prepared] = []
        pending_chunks = 0
        for path, prepared in self._prepared(files, report):
            if self._stopping():  # a stop within seconds of a start closes cleanly (issue 40)
                break
            self.progress.finish(str(path))
            if prepared is None:
                self._emit_throttled()
                continue
            pending.append(prepared)
            pending_chunks += len(prepared.chunks)
            if pending_chunks >= EMBED_GROUP_CHUNKS:
                self._flush(pending, report)
                pending, pending_chunks = [], 0
            self._emit_throttled()
        if pending:
            self._flush(pending, report)

    def _prepared(
        self, files: list[Path], report: SyncReport
    ) -> Iterator[tuple[Path, Prepared | None]]:
        """Each file with its rows (None: nothing to write), in order; a big keyword-first
        sync has worker processes chunk the notes while this thread writes (chunk_pool)."""
        pool = None
        if self.background is not None:  # keyword-first: the daemon
            to_read, settings = self._to_read(files), self.chunk_settings
            nice = self.config.int("embedding.background_nice")  # searches first, as embedding
            pool = pool_for(to_read, settings, self.count_tokens, BIG_FILE_BYTES, nice)
        if pool is None:
            for path in files:
                yield path, self._prepare_one(path, report, partial(self._prepare, path, report))
            return
        reads = ((p, self._prepare_one(p, report, partial(self._read, p, report))) for p in files)
        with pool, fewer_checkpoints(self.store):  # a big sync: its batches checkpoint less
            for path, raw, outcome in pool.in_order(reads):
                done = None if raw is None else partial(self._from_pool, raw, outcome, report)
                yield path, (None if done is None else self._prepare_one(path, report, done))

    def _to_read(self, files: list[Path]) -> int:
        """How many of ``files`` a sync reads: new ones and those whose size or mtime moved
        (a restart over 10k unchanged notes starts no chunking worker)."""
        known = self._known if self._known is not None and self.trust_stat else {}
        moved = 0
        for path in files:
            row, verdict = known.get(str(path)), self._verdicts.get(str(path))
            st = verdict.st if verdict is not None else None
            moved += (
                row is None
                or st is None
                or (row.size, row.mtime_ns) != (st.st_size, st.st_mtime_ns)
            )
        return moved

    @property
    def chunk_settings(self) -> ChunkSettings:
        """This indexer's chunking settings."""
        s = (self.max_tokens, self.target_tokens, self.chat_overlap, self.chat_chars)
        return ChunkSettings(*s, self.additive, self.front_matter)

    def _from_pool(self, raw: Raw, outcome: Outcome, report: SyncReport) -> Prepared | None:
        """A note a worker (or this thread, for the pool) chunked: its rows to write."""
        if isinstance(outcome, BaseException):
            raise outcome  # reported as a failure of this file (_prepare_one)
        if outcome is None:  # a big note: the background chunker's, as without workers
            return self._chunk(raw.path, raw.data, raw.st, raw.digest, report)
        self._note_read(raw.path, outcome.valid, outcome.redacted)
        return changed_file(report, self.progress, raw, outcome.rows)

    def _stopping(self) -> bool:
        """The daemon stops: the rest waits for the next start's sync (each file commits)."""
        self.cut_short = self.background is not None and self.background.closed
        return self.cut_short

    def _prepare_one(self, path: Path, report: SyncReport, work: Callable[[], _T]) -> _T | None:
        """``work`` on one file; a failure skips the file, unless the index itself failed."""
        try:
            return work()
        except Exception as exc:  # one bad file never stops the others
            if is_index_failure(exc):
                raise  # the index, not the file: the whole sync fails (retried / rebuilt)
            log.exception("indexing %s failed", shown(path))
            skip_file(report, path, f"indexing failed: {exc}")
            return None

    def _remove_gone(self, gone: list[str], forgotten: set[str], report: SyncReport) -> None:
        """Remove the rows of files that are forgotten or really gone (see _really_gone)."""
        for gone_path in gone:
            if gone_path in forgotten or self._really_gone(gone_path, report):
                self._remove(gone_path, report)
            self.progress.finish(gone_path)

    def _end(self, report: SyncReport, started: float) -> None:
        """Drop this sync's caches, complete the report and tell the progress hook."""
        self._known = self._sorted_keys = None
        self._verdicts.clear()
        report.embed_error = self.embed_error
        report.seconds = round(time.monotonic() - started, 3)
        self.progress.phase = "idle"
        if self.job is None:
            self.progress.end()
            self.progress.release()
        self._emit()

    def _leave_out_forgotten(self, files: list[Path]) -> tuple[list[Path], list[str]]:
        """Files a tombstone covers are not read; their indexed rows go (ingest.forgotten):
        the files to read, and the forgotten ones that are indexed (removed, on disk or not)."""
        forgotten = Forgotten(tombstones.all_of(self.store.conn), self.roots)
        if not forgotten:
            return files, []
        kept = [f for f in files if forgotten.covers(f) is None]
        dropped = {str(f) for f in files} - {str(f) for f in kept}
        return kept, sorted(d for d in dropped if self.store.file(d) is not None)

    def _newest_first(self, path: Path) -> int:
        """Sort key: the last modified first (renamed files keep their old mtime)."""
        verdict = self._verdicts.get(str(path))
        st = verdict.st if verdict is not None else None
        return -st.st_mtime_ns if st is not None else 0

    def _prepare(self, path: Path, report: SyncReport) -> Prepared | None:
        """One file read and chunked: its rows to write, or None."""
        raw = self._read(path, report)
        return None if raw is None else self._chunk(raw.path, raw.data, raw.st, raw.digest, report)

    def _read(self, path: Path, report: SyncReport) -> Raw | None:
        """One changed file's bytes to chunk, or None (unchanged, gone, skipped, dropped)."""
        key = str(path)
        verdict = self._verdicts.pop(key, None) or self.rule.check(path)
        known = self._known.get(key) if self._known is not None else self.store.file(key)
        if not verdict.ok:
            if verdict.reason == "gone":
                self._drop_stale(key, known, report)
            elif not verdict.transient:
                self._drop_stale(key, known, report, verdict.reason if verdict.reported else None)
            else:
                skip_file(report, path, verdict.reason)
            return None
        st = verdict.st
        assert st is not None
        if (
            self.trust_stat
            and known
            and known.size == st.st_size
            and known.mtime_ns == st.st_mtime_ns
        ):
            report.files_unchanged += 1
            return None
        if st.st_size > self.max_bytes:
            over = f"{st.st_size} bytes is over memory.max_file_bytes"
            self._drop_stale(key, known, report, over)
            return None
        try:
            data = read_checked(verdict, self.rule.real_roots, self.max_bytes)
        except FileNotFoundError:  # deleted between listing and reading
            self._vanished(key, known, report)
            return None
        except Swapped as exc:
            skip_file(report, path, f"not read: {exc.strerror}")
            return None
        except OSError as exc:
            if exc.errno in OUT_OF_RESOURCES:  # the process is out of fds, not the file bad
                report.files_to_retry += 1
            skip_file(report, path, f"cannot read: {exc.strerror or exc}")
            return None
        if len(data) > self.max_bytes:  # grew between the stat and the read
            self._drop_stale(
                key, known, report, f"over memory.max_file_bytes ({self.max_bytes} bytes)"
            )
            return None
        digest = content_hash(data)
        if known and known.hash == digest:
            self.store.touch_file(key, st.st_size, st.st_mtime_ns)
            report.files_unchanged += 1
            return None
        if b"\x00" in data[:8192]:
            self._drop_stale(key, known, report, "looks binary (NUL bytes)")
            return None
        return Raw(path, data, st, digest)

    def _chunk(
        self, path: Path, data: bytes, st: os.stat_result, digest: str, report: SyncReport
    ) -> Prepared | None:
        note = note_text(data)  # secrets never reach the index (line numbers kept)
        redacted = (note.redacted, note.text) if note.redacted is not None else None
        self._note_read(path, note.valid, redacted)
        pieces = self._chunks(str(path), digest, note.text)
        if pieces is None:
            report.files_deferred += 1
            return None
        rows = note_rows(path, note.text, pieces, st.st_mtime_ns, self.front_matter)
        return changed_file(report, self.progress, Raw(path, data, st, digest), rows)

    def _note_read(self, path: Path, valid: bool, redacted: tuple[str, str] | None) -> None:
        """Say what decoding replaced; tally the secrets redaction hid (status.redactions)."""
        if not valid:
            log.warning("%s is not valid UTF-8; undecodable bytes are replaced", path)
        if redacted is not None:
            tally_redactions("indexed", *redacted)

    def _chunks(self, key: str, digest: str, text: str) -> list[Chunk] | None:
        """The file's chunks; None when a big file went to the background chunker."""

        def chunk() -> list[Chunk]:
            return pieces_of(text, self.count_tokens, self.chunk_settings)

        if self.background is None or len(text) <= BIG_FILE_BYTES:
            return chunk()
        done = self.background.take(key, digest)
        if done is None:
            self.background.request(key, digest, chunk)
        return done

    @property
    def keyword_first(self) -> bool:
        """Whether files are written before their vectors (the daemon), see vector_backfill."""
        return self.ahead is not None

    def _flush(self, batch: Sequence[Prepared], report: SyncReport) -> None:
        hashes = {c.hash: c.text for p in batch for c in p.chunks}
        # Keyword first: only cached vectors now, the rest are back-filled after the writes.
        vectors = self.vectors_for(hashes, report, embed=not self.keyword_first)
        # One transaction for the batch: a file lands whole or not at all, a bad one is left
        # out alone, and the batch costs one commit (and FTS5 one new segment to merge).
        written = write_batch(self.store, batch, vectors, report)
        for prepared, change in written:  # committed: the hooks may tell readers now
            self._apply(change)
            if self.backlog is not None and self.keyword_first:
                due = sum(c.embed for c in prepared.chunks) - change.kept - len(change.added)
                self.backlog.wrote(due)
            report.chunks_written += len(prepared.chunks)
            self.progress.chunks_done += len(prepared.chunks)

    def backfill_vectors(self, report: SyncReport | None = None) -> int:
        """Embed chunks indexed without a vector: a step of about a second when keyword-first
        (the daemon queues the next), else all of them (see recalld.ingest.vector_backfill.fill)."""
        return fill(self, report, budget_s=BACKFILL_BUDGET_S if self.keyword_first else None)

    def apply_vectors(
        self, pairs: list[tuple[int, npt.NDArray[np.float32]]], generation: int | None = None
    ) -> None:
        """Tell the in-memory vector index about vectors just written (at that generation)."""
        self._apply(FileChange([], pairs, generation))

    # hooks -------------------------------------------------------------------------------------

    _last_emit = 0.0

    def _emit(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def _emit_throttled(self) -> None:
        now = time.monotonic()
        if now - self._last_emit >= 0.1:
            self._last_emit = now
            self._emit()
