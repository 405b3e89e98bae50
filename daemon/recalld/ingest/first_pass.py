"""A big first sync's quick pass: every new note keyword-searchable as one row, then chunked.

Chunking is most of a first sync's CPU (~3 s for the bench's 10k notes on this 2-core host,
both cores busy to the end), while FTS5 takes the same files whole in a fraction of that (the
bench's floor: read them, one plain FTS5 insert each). So when the daemon's full sync finds
many notes the index has never held (:func:`first_pass_files` or more), it first writes each of
them as one keyword-only row: the whole note, decoded and redacted as every note is, under a
*provisional* file row (``FileRow.provisional``: no content hash, a modification time no file
has). The folder answers keyword searches about a second later, each hit citing the whole note;
the same sync then reads every note again, chunks it and replaces its row in one transaction, as
for any changed file. A stop or a crash in between leaves provisional rows that the next sync
replaces the same way (their stat never matches). What waits for the real chunks: vectors (the
row takes none), the shared store (a provisional file is not pushed), a note's date, tags and
identifier tokens (the search filters and the ``ident`` column).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from recalld.index.provisional_rows import insert_provisional
from recalld.index.rows import PROVISIONAL, FileRow, NewChunk
from recalld.index.store import FileChange, Store
from recalld.ingest import chunk_pool
from recalld.ingest.chunk_pool import Raw
from recalld.ingest.note_rows import line_count, name_title, note_text, text_hash
from recalld.ingest.sync_report import Prepared

#: Notes per transaction: about a tenth of a second of writing here, so a search waits little.
BATCH_FILES = 500
#: The provisional chunk's hash is its text's under this prefix: never a real chunk's, so the
#: chunked rows that replace it never keep it as "unchanged" (recalld.index.unchanged_chunks).
_HASH_PREFIX = "first pass\n"


def first_pass_files() -> int:
    """New notes that make a sync worth a first pass: as many as make it start chunking
    workers (chunk_pool.MIN_FILES, read each time so both move together): under that, the
    chunked rows come within about a second anyway and writing each note twice does not pay."""
    return chunk_pool.MIN_FILES


def new_notes(files: Iterable[Path], known: Mapping[str, FileRow]) -> list[Path]:
    """The files the index holds no row of, in the sync's order."""
    return [f for f in files if str(f) not in known]


def provisional(raw: Raw) -> Prepared | None:
    """A note's provisional file row and its one keyword row (None for a blank note: the
    chunked pass writes what a blank note has)."""
    text = note_text(raw.data).text  # secrets never reach the index, here either
    if not text.strip():
        return None
    lines = line_count(text)
    source, digest, mtime_ns = PROVISIONAL
    row = FileRow(str(raw.path), source, raw.st.st_size, mtime_ns, digest, lines)
    title = name_title(raw.path)
    chunk = NewChunk(
        1, lines, text, text_hash(_HASH_PREFIX + text), title, embed=False, ident=""
    )  # keyword only, by policy: never due a vector, replaced by the note's chunks
    return Prepared(row, [chunk])


def write(
    store: Store,
    notes: Iterable[Raw | None],
    stopping: Callable[[], bool],
    on_change: Callable[[FileChange], None],
) -> dict[str, FileRow]:
    """Write each read note's provisional rows, :data:`BATCH_FILES` a transaction; stop
    between notes when ``stopping`` says so. Returns the file rows written, by path.

    ``notes`` are read and redacted on a thread of its own while this one writes the batch
    before: each batch is one call into SQLite, which lets go of the GIL, so the two overlap
    on two cores (recalld.index.provisional_rows)."""
    written: dict[str, FileRow] = {}
    with _Prepare(notes, stopping) as batches:
        for batch in batches:
            rows = {p.row.path: p.row for p in batch}
            change, paths = insert_provisional(store, [(p.row, p.chunks[0]) for p in batch])
            on_change(change)
            written.update((path, rows[path]) for path in paths)
    return written


class _Prepare:
    """The notes' prepared rows in batches of :data:`BATCH_FILES`, made on a thread ahead of
    their writing (at most :data:`_AHEAD` batches ahead). Leaving the ``with`` block early (an
    error while writing) stops the thread; an error on the thread is raised where the batches
    are read."""

    _AHEAD = 2

    def __init__(self, notes: Iterable[Raw | None], stopping: Callable[[], bool]) -> None:
        self._notes, self._stopping = notes, stopping
        self._out: queue.Queue[list[Prepared] | BaseException | None] = queue.Queue(self._AHEAD)
        self._quit = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recalld-first-pass", daemon=True)

    def __enter__(self) -> Iterator[list[Prepared]]:
        self._thread.start()
        return self._batches()

    def __exit__(self, *exc: object) -> None:
        self._quit.set()
        while self._thread.is_alive():  # it may wait on a full queue
            with contextlib.suppress(queue.Empty):
                self._out.get(timeout=0.05)
        self._thread.join()

    def _batches(self) -> Iterator[list[Prepared]]:
        while (item := self._out.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item

    def _put(self, item: list[Prepared] | BaseException | None) -> None:
        while not self._quit.is_set():
            with contextlib.suppress(queue.Full):
                self._out.put(item, timeout=0.05)
                return

    def _run(self) -> None:
        batch: list[Prepared] = []
        try:
            for raw in self._notes:
                if self._quit.is_set() or self._stopping():
                    break
                prepared = provisional(raw) if raw is not None else None
                if prepared is not None:
                    batch.append(prepared)
                if len(batch) >= BATCH_FILES:
                    self._put(batch)
                    batch = []
            if batch:
                self._put(batch)
            self._put(None)
        except BaseException as exc:  # noqa: BLE001 - raised again on the writing thread
            self._put(exc)
