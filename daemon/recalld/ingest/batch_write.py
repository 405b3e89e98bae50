"""One batch of prepared files written in one transaction, each file whole or not at all.

FTS5 writes its pending rows out at every savepoint: a savepoint per file made every file of a
first sync a segment of its own (1.2-1.3 s of CPU for 10k FTS5 inserts, 0.73 s without, on this
host). So a batch goes in with none; a file whose write fails (not the index) undoes the batch,
which is written again with a savepoint per file, the bad one rolled back alone and reported.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from recalld.index.index_health import is_index_failure
from recalld.index.store import FileChange, Store
from recalld.ingest.path_rule import shown
from recalld.ingest.sync_report import Prepared, SyncReport, skip_file

log = logging.getLogger("recalld.ingest.indexer")  # the indexer's lines, as before the move

Vectors = dict[str, npt.NDArray[np.float32]] | None

#: WAL pages between checkpoints during a big sync (SQLite's default: 1,000). A first sync of
#: 10k notes checkpointed ~50 times at the default, two fdatasyncs each (0.42-0.55 s of the
#: writer's wall on a busy host); at 8,000 (a WAL of 32 MB at most) ~10 times, 0.21-0.29 s. Its
#: CPU did not move (docs/DECISIONS.md, issue 40 item 4, third pass): the gain is the fsyncs.
BULK_CHECKPOINT_PAGES = 8_000


@contextlib.contextmanager
def fewer_checkpoints(store: Store) -> Iterator[None]:
    """Checkpoint the WAL every :data:`BULK_CHECKPOINT_PAGES` pages meanwhile (a big sync's
    batches), then as before: the next commit after it checkpoints what has piled up."""
    row = store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()
    before = int(row[0]) if row else 1_000
    store.conn.execute(f"PRAGMA wal_autocheckpoint = {max(before, BULK_CHECKPOINT_PAGES)}")
    try:
        yield
    finally:
        store.conn.execute(f"PRAGMA wal_autocheckpoint = {before}")


class _FileFailed(Exception):
    """A file's write failed in a batch without savepoints: the batch is undone."""


def write_batch(
    store: Store, batch: Sequence[Prepared], vectors: Vectors, report: SyncReport
) -> list[tuple[Prepared, FileChange]]:
    """Write ``batch`` in one transaction; the files written with their changes (committed)."""
    try:
        return _write(store, batch, vectors, report, savepoint=False)
    except _FileFailed:
        return _write(store, batch, vectors, report, savepoint=True)


def _write(
    store: Store, batch: Sequence[Prepared], vectors: Vectors, report: SyncReport, *,
    savepoint: bool,
) -> list[tuple[Prepared, FileChange]]:  # fmt: skip
    written: list[tuple[Prepared, FileChange]] = []
    with store.transaction():
        for prepared in batch:
            try:
                change = store.replace_file(
                    prepared.row, prepared.chunks, vectors, savepoint=savepoint
                )
            except Exception as exc:  # one bad file never stops the others
                if is_index_failure(exc):
                    raise  # the index, not the file: the whole sync fails (retried / rebuilt)
                if not savepoint:
                    raise _FileFailed from exc  # undoes the batch's transaction
                log.exception("writing %s to the index failed", shown(prepared.row.path))
                report.files_changed -= 1  # counted when prepared; skipped, it is not in the index
                skip_file(report, prepared.row.path, f"indexing failed: {exc}")
                continue
            written.append((prepared, change))
    return written
