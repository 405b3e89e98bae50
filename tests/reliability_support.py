"""Helpers of the crash and fault scenarios: a daemon with extra environment or privileges, and a
strict check of an index file against the memory folders on disk."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from daemon_process import DaemonProcess
from recalld.index.store import Store
from recalld.ingest.filters import PathFilter
from recalld.ingest.indexer import content_hash

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2


class Daemon(DaemonProcess):
    """A ``recalld serve`` subprocess (extra environment, ``preexec_fn``) that can full-sync."""

    def start(self, timeout: float = 60.0) -> Daemon:
        super().start(timeout)
        return self

    def full_sync(self, timeout: float = 300.0) -> dict[str, Any]:
        """A full sync through the socket, queued after anything pending, waited for."""
        with self.client(timeout=timeout) as c:
            return dict(c.call("sync", {"wait": True, "timeout_s": timeout}, timeout=timeout))


def drop_file_permission_override() -> None:
    """``preexec_fn``: the child (still uid 0) loses CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH.

    Dropping them from the bounding set before ``exec`` means root's new process does not get
    them back, so file modes apply to it like to any user: ``chmod 000`` gives EACCES.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def disk_files(roots: Iterable[Path]) -> dict[str, bytes]:
    """Every indexable file under the roots with its bytes (the daemon's own filter)."""
    filt = PathFilter()
    out: dict[str, bytes] = {}
    for root in roots:
        for path, _ in filt.walk(root):
            out[str(path)] = path.read_bytes()
    return out


def check_consistent(index: Path, context: str, *, vectors: bool = True) -> dict[str, int]:
    """Integrity, chunks = FTS rows = vector rows (+ keyword-only chunks), no orphans.

    ``vectors`` False: right after a kill, chunks may still wait for their vectors (keyword
    first; the next start fills them), so only vectors <= chunks is checked.
    """
    store = Store(index, readonly=True)
    try:
        assert store.integrity_ok(), f"integrity_check failed; {context}"
        counts = store.counts()
        embedded = counts["vectors"] + counts["keyword_only_chunks"]  # no vector by policy
        assert counts["chunks"] == counts["fts_rows"], f"chunks/fts differ: {counts}; {context}"
        if vectors:
            assert counts["chunks"] == embedded, f"chunks/vectors differ: {counts}; {context}"
        else:
            assert embedded <= counts["chunks"], f"more vectors than chunks: {counts}; {context}"

        def one(sql: str) -> int:
            return int(store.conn.execute(sql).fetchone()[0])

        if vectors:
            assert store.chunks_missing_vectors(5) == [], f"chunks without a vector; {context}"
        orphans = one("SELECT count(*) FROM chunks_vec WHERE rowid NOT IN (SELECT id FROM chunks)")
        assert orphans == 0, f"{orphans} vectors without a chunk; {context}"
        homeless = one("SELECT count(*) FROM chunks WHERE path NOT IN (SELECT path FROM files)")
        assert homeless == 0, f"{homeless} chunks of no indexed file; {context}"
        return counts
    finally:
        store.close()


def check_matches_disk(index: Path, roots: Iterable[Path], context: str) -> int:
    """Every file on disk is indexed at its current content hash, nothing else is, and every
    chunk's text is in its file. Returns the number of files."""
    on_disk = disk_files(roots)
    store = Store(index, readonly=True)
    try:
        indexed = store.files("memory")
        missing = sorted(set(on_disk) - set(indexed))
        extra = sorted(set(indexed) - set(on_disk))
        assert not missing and not extra, (
            f"index != disk: missing {missing[:5]} ({len(missing)}), extra {extra[:5]} "
            f"({len(extra)}); {context}"
        )
        stale = [p for p, data in on_disk.items() if indexed[p].hash != content_hash(data)]
        assert not stale, f"{len(stale)} files indexed at an old content: {stale[:5]}; {context}"
        for path, data in on_disk.items():
            text = data.decode("utf-8")
            for chunk in store.file_chunks(path):
                assert chunk.text.strip() in text, f"chunk of {path} not in the file; {context}"
        return len(on_disk)
    finally:
        store.close()


def fts_integrity(index: Path) -> None:
    """FTS5's own check of the index against its external content table (needs a writer)."""
    store = Store(index)
    try:
        store.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES('integrity-check', 1)")
    finally:
        store.close()
