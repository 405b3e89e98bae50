"""A full rebuild of the index: a new database beside the live one, filled, then swapped in.

The live index answers searches until the swap. The stages, in order (the engine runs them,
:meth:`recalld.engine.Engine.reindex`, and fills the new database itself between the first two):

1. :func:`start`: a fresh database at :func:`temp_path` (``<index>.rebuild-<pid>``) with the
   live index's embedding cache, so that unchanged text is not embedded again.
2. :func:`seal`: its WAL checkpointed, the rollback journal back, closed: one complete file.
3. :func:`close_live`: under the engine's exclusive swap lock, the live writer checkpointed and
   closed, and the live WAL and shared memory removed *before* the rename.
4. :func:`replace`: the new file renamed over the live one and the folder synced.

A failure at any stage leaves the old index live; :func:`discard` removes what is left of the
new one. The phases call :func:`~recalld.index.index_files.test_phase` (a no-op outside tests).
"""

from __future__ import annotations

import os
from pathlib import Path

from recalld.index import index_files, tombstones
from recalld.index.store import Store


def temp_path(index_path: Path) -> Path:
    """Where the new database is built: beside the live file, one per process.

    :func:`~recalld.index.index_files.remove_stale_rebuilds` finds a dead process's by this name.
    """
    return index_path.with_name(f"{index_path.name}.rebuild-{os.getpid()}")


def discard(tmp: Path) -> None:
    """Remove the new database and its side files (a leftover of this process, or a failure)."""
    index_files.remove_db(tmp)


def start(index_path: Path, tmp: Path) -> Store:
    """Stage 1: a fresh database at ``tmp`` holding the live index's embedding cache.

    Refused when the disk is nearly full. The caller owns (and closes) the returned store.
    """
    index_files.check_free_space(index_path)
    new = Store(tmp)
    try:
        if index_path.exists():
            new.copy_cache_from(index_path)
            tombstones.copy_from(new.conn, index_path)  # what was forgotten stays forgotten
    except BaseException:
        new.close()
        raise
    return new


def seal(new: Store) -> None:
    """Stage 2: the filled database as one file (WAL checkpointed, rollback journal), closed."""
    new.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    new.conn.execute("PRAGMA journal_mode = DELETE")
    new.close()


def close_live(live: Store, index_path: Path) -> None:
    """Stage 3 (under the exclusive swap lock): the live writer closed, its WAL and shm removed.

    The live file's WAL and shared memory go *before* the rename: a crash between the two leaves
    the old index complete (its WAL was checkpointed), and the new file can never be opened with
    a stale WAL of the old one.
    """
    live.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    live.close()
    for suffix in ("-wal", "-shm"):
        Path(str(index_path) + suffix).unlink(missing_ok=True)
    index_files.test_phase("swap-closed")


def replace(tmp: Path, index_path: Path) -> None:
    """Stage 4: the new file renamed over the live one, atomically, and the folder synced.

    Raises ``OSError`` when the rename fails: the old file is then still in place.
    """
    os.replace(tmp, index_path)
    index_files.fsync_dir(index_path.parent)
