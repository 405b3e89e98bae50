"""Incremental sync of memory folders into the store.

A file is skipped by size + mtime, then by content hash; a changed file is re-chunked and only
chunks whose text is missing from the embedding cache are embedded. Each file is written in one
transaction, so a crash leaves every file either fully old or fully new. Chunks of several files
are embedded together, because the model is fastest on full batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.chunking import chunk_markdown
from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.filters import PathFilter, make_filter
from recalld.store import FileChange, FileRow, Identity, NewChunk, Store

log = logging.getLogger(__name__)

CHUNKER_VERSION = "md-3"
SESSION_CHUNKER_VERSION = "sessions-2"  # 2: whole transcripts, chunk kinds
EMBED_GROUP_CHUNKS = 256  # chunks embedded per call across files
MAX_REPORTED_SKIPS = 100  # skipped files listed by name in a sync report


def _title(pieces: Sequence[Any], path: Path) -> str:
    """The document's title: its first top-level heading, else the file name without suffix."""
    for piece in pieces:
        if piece.heading:
            return str(piece.heading).split(" > ")[0]
    return path.stem.replace("_", " ").replace("-", " ")


def _context(title: str, heading: str) -> str:
    """Title plus heading path, without repeating the title."""
    if not heading:
        return title
    return heading if heading.split(" > ")[0] == title else f"{title} > {heading}"


def content_hash(data: bytes) -> str:
    """Hash of a file's bytes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def text_hash(text: str) -> str:
    """Hash of a chunk's text (the embedding cache key)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def chunking_identity(config: Config) -> str:
    """The chunking settings that an index is built with (part of its identity)."""
    return json.dumps(
        {
            "chunker": CHUNKER_VERSION,
            "session_chunker": SESSION_CHUNKER_VERSION,
            "include_thinking": config.bool("sessions.include_thinking"),
            "tool_result_chars": config.int("sessions.tool_result_chars"),
            "embed_kinds": sorted(config.list("sessions.embed_kinds")),
            "embed_tool_head_chars": config.int("sessions.embed_tool_head_chars"),
            "max_tokens": config.int("chunking.max_tokens"),
            "target_tokens": config.int("chunking.target_tokens"),
        },
        sort_keys=True,
    )


def identity_for(config: Config, embedder: Embedder | None) -> Identity:
    """The identity an index built now with this config and provider would have."""
    if embedder is None:
        return Identity("", "none", "", 0, chunking_identity(config))
    return Identity(
        embedder.key, embedder.label, embedder.model, embedder.dims, chunking_identity(config)
    )


@dataclass
class Progress:
    """Progress of one sync, shown by ``status``, ``watch`` and the CLI's bar."""

    phase: str = "idle"
    files_total: int = 0
    files_done: int = 0
    files_changed: int = 0
    files_removed: int = 0
    chunks_done: int = 0
    chunks_embedded: int = 0
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        """Wire form with rate and ETA."""
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.files_done / elapsed
        left = max(self.files_total - self.files_done, 0)
        return {
            "phase": self.phase,
            "files_total": self.files_total,
            "files_done": self.files_done,
            "files_changed": self.files_changed,
            "files_removed": self.files_removed,
            "chunks_done": self.chunks_done,
            "chunks_embedded": self.chunks_embedded,
            "files_per_s": round(rate, 2),
            "chunks_per_s": round(self.chunks_done / elapsed, 2),
            "elapsed_s": round(elapsed, 3),
            "eta_s": round(left / rate, 1) if rate > 0 and left else 0.0,
        }


@dataclass
class Prepared:
    """A changed file, read and chunked, waiting for its vectors."""

    row: FileRow
    chunks: list[NewChunk]


@dataclass
class SyncReport:
    """What a sync did."""

    files_seen: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    files_skipped: int = 0
    files_kept: int = 0  # gone from a listing but kept: root missing/unmounted, folder unreadable
    chunks_written: int = 0
    chunks_embedded: int = 0
    embed_error: str | None = None
    seconds: float = 0.0
    sessions: dict[str, Any] | None = None
    skipped: list[dict[str, str]] = field(default_factory=list)  # {path, reason}, capped

    def as_dict(self) -> dict[str, Any]:
        """Wire form."""
        return dict(self.__dict__)


ChangeHook = Callable[[FileChange], None]
ProgressHook = Callable[[Progress], None]


class Indexer:
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
        self.on_change = on_change
        self.on_progress = on_progress
        self.roots = config.memory_roots()
        self.filter: PathFilter = make_filter(config.list("memory.extensions"))
        self.max_bytes = config.int("memory.max_file_bytes")
        self.max_tokens = config.int("chunking.max_tokens")
        if embedder is not None:
            self.max_tokens = min(self.max_tokens, embedder.max_input_tokens)
        self.target_tokens = min(config.int("chunking.target_tokens"), self.max_tokens)
        self.progress = Progress()
        self.embed_error: str | None = None
        self._known: dict[str, FileRow] | None = None
        # Roots whose files must not be removed now (missing, unmounted), set by the engine.
        self.unavailable_roots: dict[Path, str] = {}

    # discovery --------------------------------------------------------------------------------

    def memory_files(self) -> list[Path]:
        """Every indexable file under the memory roots."""
        seen: dict[str, Path] = {}
        for root in self.roots:
            for path, is_link in self.filter.walk(root):
                if is_link and not self._inside_roots(Path(os.path.realpath(path))):
                    continue  # a link leading out of the roots is not ours to read
                seen.setdefault(str(path), path)
        return list(seen.values())

    def _inside_roots(self, path: Path) -> bool:
        return any(path == r or r in path.parents for r in self.roots)

    def _skip(self, report: SyncReport, path: Path | str, reason: str) -> None:
        log.warning("skipping %s: %s", path, reason)
        report.files_skipped += 1
        if len(report.skipped) < MAX_REPORTED_SKIPS:
            report.skipped.append({"path": str(path), "reason": reason})

    def _really_gone(self, key: str, report: SyncReport) -> bool:
        """Whether an indexed file that a sync did not find is really gone (else keep its rows).

        Rows are kept while the file's root is unavailable (missing, unmounted) and while the
        file exists but could not be listed or looked at (a folder without read permission, an
        I/O error): a transient problem must not wipe what is indexed.
        """
        path = Path(key)
        root = self.root_of(path)
        if root is not None and root in self.unavailable_roots:
            report.files_kept += 1
            return False
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError as exc:
            report.files_kept += 1
            self._skip(report, path, f"kept as indexed: {exc.strerror or exc}")
            return False
        if root is not None and stat.S_ISREG(st.st_mode) and self.filter.file_ok(path, root):
            report.files_kept += 1
            self._skip(report, path, "kept as indexed: its folder could not be listed")
            return False
        return True  # excluded now (filter, folder rules) or no longer a regular file

    def root_of(self, path: Path) -> Path | None:
        """The memory root that holds ``path``."""
        for root in self.roots:
            if path == root or root in path.parents:
                return root
        return None

    # sync ---------------------------------------------------------------------------------------

    def sync(self, paths: Iterable[Path] | None = None) -> SyncReport:
        """Reconcile all memory files (``paths`` None) or just the given ones (watcher batches)."""
        started = time.monotonic()
        report = SyncReport()
        self.progress = Progress(phase="scanning")
        self._emit()
        if paths is None:
            files = self.memory_files()
            indexed = self.store.files("memory")
            self._known = indexed  # one query instead of one per file (no-op resyncs)
            present = {str(f) for f in files}
            gone = [p for p in indexed if p not in present]
        else:
            files, gone = [], []
            for p in paths:
                p = Path(p)
                root = self.root_of(p)
                ok = root is not None and p.is_file() and self.filter.file_ok(p, root)
                if ok:
                    files.append(p)
                elif self.store.file(str(p)) is not None:
                    gone.append(str(p))
                elif root is not None and p.is_dir():
                    files.extend(path for path, _ in self.filter.walk(p))  # a folder moved in
                elif root is not None:
                    # A folder that vanished: every indexed file under it is gone.
                    prefix = str(p) + os.sep
                    gone.extend(k for k in self.store.files("memory") if k.startswith(prefix))
        gone = [g for g in gone if self._really_gone(g, report)]
        report.files_seen = len(files)
        self.progress.phase = "indexing"
        self.progress.files_total = len(files)
        for gone_path in gone:
            self._apply(self.store.remove_file(gone_path))
            report.files_removed += 1
            self.progress.files_removed += 1
        pending: list[Prepared] = []
        pending_chunks = 0
        for path in files:
            prepared = self._prepare(path, report)
            self.progress.files_done += 1
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
        self._known = None
        self.backfill_vectors(report)
        report.embed_error = self.embed_error
        report.seconds = round(time.monotonic() - started, 3)
        self.progress.phase = "idle"
        self._emit()
        return report

    def _prepare(self, path: Path, report: SyncReport) -> Prepared | None:
        key = str(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            if self.store.file(key) is not None:
                self._apply(self.store.remove_file(key))
                report.files_removed += 1
            return None
        except OSError as exc:
            self._skip(report, path, f"cannot stat: {exc.strerror or exc}")
            return None
        if not stat.S_ISREG(st.st_mode):  # a FIFO named notes.md would block the read forever
            self._skip(report, path, "not a regular file (a pipe, socket or device)")
            return None
        known = self._known.get(key) if self._known is not None else self.store.file(key)
        if known and known.size == st.st_size and known.mtime_ns == st.st_mtime_ns:
            report.files_unchanged += 1
            return None
        if st.st_size > self.max_bytes:
            self._skip(report, path, f"{st.st_size} bytes is over memory.max_file_bytes")
            return None
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None  # deleted between listing and reading; the next sync removes it
        except OSError as exc:
            self._skip(report, path, f"cannot read: {exc.strerror or exc}")
            return None
        digest = content_hash(data)
        if known and known.hash == digest:
            self.store.touch_file(key, st.st_size, st.st_mtime_ns)
            report.files_unchanged += 1
            return None
        if b"\x00" in data[:8192]:
            self._skip(report, path, "looks binary (NUL bytes)")
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            log.warning("%s is not valid UTF-8; undecodable bytes are replaced", path)
            text = data.decode("utf-8", errors="replace")
        if text.startswith("\ufeff"):
            text = text[1:]
        pieces = chunk_markdown(
            text, self.count_tokens, max_tokens=self.max_tokens, target_tokens=self.target_tokens
        )
        title = _title(pieces, path)
        chunks = [
            NewChunk(
                c.start_line, c.end_line, c.text, text_hash(c.text), _context(title, c.heading)
            )
            for c in pieces
        ]
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        row = FileRow(key, "memory", st.st_size, st.st_mtime_ns, digest, lines)
        report.files_changed += 1
        self.progress.files_changed += 1
        return Prepared(row, chunks)

    def _flush(self, batch: Sequence[Prepared], report: SyncReport) -> None:
        hashes = {c.hash: c.text for p in batch for c in p.chunks}
        vectors = self.vectors_for(hashes, report)
        for prepared in batch:
            change = self.store.replace_file(prepared.row, prepared.chunks, vectors)
            self._apply(change)
            report.chunks_written += len(prepared.chunks)
            self.progress.chunks_done += len(prepared.chunks)

    def vectors_for(
        self, texts_by_hash: dict[str, str], report: SyncReport | None = None
    ) -> dict[str, npt.NDArray[np.float32]] | None:
        """Vectors for chunk texts: from the cache, else embedded now (and cached)."""
        emb = self.embedder
        if emb is None or not texts_by_hash or not self.store.has_vec_table():
            return None
        found = self.store.cached(emb.key, emb.model, emb.dims, list(texts_by_hash))
        missing = [h for h in texts_by_hash if h not in found]
        if missing:
            try:
                vecs = emb.embed([texts_by_hash[h] for h in missing])
            except Exception as exc:  # noqa: BLE001 - keep indexing keyword-only, backfill later
                self.embed_error = f"{emb.label}: {exc}"
                log.warning("embedding failed, indexing without vectors for now: %s", exc)
                return found
            if vecs.shape != (len(missing), emb.dims):
                self.embed_error = (
                    f"{emb.label} returned vectors of shape {vecs.shape}, expected "
                    f"({len(missing)}, {emb.dims})"
                )
                return found
            new = {h: vecs[i] for i, h in enumerate(missing)}
            self.store.put_cache(emb.key, emb.model, emb.dims, new)
            found.update(new)
            self.embed_error = None
            if report is not None:
                report.chunks_embedded += len(missing)
            self.progress.chunks_embedded += len(missing)
        return found

    def backfill_vectors(self, report: SyncReport | None = None) -> int:
        """Embed chunks that were indexed without a vector (provider was down or added later)."""
        if self.embedder is None:
            return 0
        done = 0
        while True:
            rows = self.store.chunks_missing_vectors(EMBED_GROUP_CHUNKS)
            if not rows:
                return done
            vectors = self.vectors_for({h: t for _, h, t in rows}, report)
            if not vectors:
                return done
            pairs = [(cid, vectors[h]) for cid, h, _ in rows if h in vectors]
            if not pairs:
                return done
            self.store.put_vectors(pairs)
            self._apply(FileChange([], pairs))
            done += len(pairs)
            if len(pairs) < len(rows):
                return done

    # hooks -------------------------------------------------------------------------------------

    def _apply(self, change: FileChange) -> None:
        if self.on_change is not None:
            self.on_change(change)

    _last_emit = 0.0

    def _emit(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def _emit_throttled(self) -> None:
        now = time.monotonic()
        if now - self._last_emit >= 0.1:
            self._last_emit = now
            self._emit()
