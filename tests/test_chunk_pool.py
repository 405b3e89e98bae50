"""Notes chunked by worker processes (issue 40, item 4): the same rows as the writer's own.

A keyword-first sync of many notes has worker processes chunk them while the writer writes
(``recalld.ingest.chunk_pool``). Real notes on disk, a real index, real worker processes.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import recalld.cpus
from conftest import make_engine, write
from recalld.ingest import batch_write, chunk_pool
from recalld.ingest import indexer as indexer_module
from recalld.ingest.chunk_pool import Chunked, ChunkPool, Raw, chunk_notes
from recalld.ingest.note_rows import ChunkSettings
from recalld.ingest.sessions import redaction_tally
from recalld.ingest.vector_backfill import BackgroundChunker
from recalld.tokens import default_tokenizer

VOCAB = Path(__file__).resolve().parents[1] / "daemon" / "recalld" / "data" / "vocab.txt"
NOTES = 240
MTIME_NS = 1_700_000_000 * 10**9
BIG = 3_000  # chars: a note over it goes to the background chunker, as a 256 KB one does


def _notes(memory: Path, seed: int) -> int:
    """Notes of many shapes; returns how many distinct secrets they hold."""
    r = random.Random(seed)
    words = [w for w in VOCAB.read_text().split() if w.isalpha() and len(w) > 2][:8000]
    secrets = 0
    for i in range(NOTES):
        paras = [" ".join(r.choices(words, k=r.randint(5, 120))) for _ in range(r.randint(1, 6))]
        body = f"# note {i}\n\n" + "\n\n".join(paras) + "\n"
        kind = i % 8
        if kind == 1:
            body = f"---\ntitle: Card {i}\ntags: [alpha, beta{i}]\n---\n" + body + "\n#inline-tag\n"
        elif kind == 2:
            body = "---\ntitle: [unclosed\n---\n" + body  # its front matter is not read
        elif kind == 3:
            secrets += 1
            body += f"token ghp_{''.join(r.choices('abcdefghijkmnpqrstuvwxyz0123456789', k=36))}\n"
        elif kind == 4:
            body = "\ufeff" + body + "## A > B\n\n- item one\n- item two\n\n```py\nx = 1\n```\n"
        elif kind == 5 and i % 16 == 5:
            body += " ".join(r.choices(words, k=700)) + "\n"  # over BIG: the background's
        path = memory / f"d{i % 5}" / f"n{i:04d}.md"
        if kind == 6:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body.encode() + b"caf\xe9 \xff\n")  # not UTF-8
        elif kind == 7 and i % 16 == 7:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"\x00\x01binary")
        else:
            write(path, body)
        os.utime(path, ns=(MTIME_NS + i, MTIME_NS + i))  # a note's date may come from it
    write(memory / "empty.md", "")
    return secrets


def _rows(index: Path, home: Path) -> tuple[list[Any], list[Any], list[Any]]:
    """Chunks (in id order), tags and file rows, with the home's path made neutral."""
    conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    try:

        def fix(rows: list[Any]) -> list[Any]:
            return [tuple(str(v).replace(str(home), "H") for v in row) for row in rows]

        chunks = conn.execute(
            "SELECT id, path, start_line, end_line, hash, text, context, ident, kind, embed, "
            "date FROM chunks ORDER BY id"
        ).fetchall()
        tags = conn.execute("SELECT chunk_id, tag FROM chunk_tags ORDER BY 1, 2").fetchall()
        files = conn.execute("SELECT path, size, hash, lines FROM files ORDER BY 1").fetchall()
        return fix(chunks), fix(tags), fix(files)
    finally:
        conn.close()


def _sync(home: Path, monkeypatch: pytest.MonkeyPatch, workers: bool) -> tuple[Any, list[Any]]:
    """A keyword-first sync (the daemon's indexer setup) of ``home``'s notes, twice if a big
    note went to the background chunker; the report and the pools it started."""
    pools: list[ChunkPool] = []
    asked: list[int] = []  # the notes each sync was to read
    real = chunk_pool.pool_for

    def pool_for(*args: Any) -> ChunkPool | None:
        asked.append(args[0])
        if not workers:
            return None
        pool = real(*args)
        assert pool is not None
        pool.started.result(timeout=120)  # a worker is up: groups go to it from the first
        pool.overtake_s = 120  # the writer waits for the worker's groups, however busy the host
        pools.append(pool)
        return pool

    monkeypatch.setattr(indexer_module, "pool_for", pool_for)
    checkpoints: list[int] = []  # the WAL's checkpoint interval at each batch written
    real_write = indexer_module.write_batch

    def write_batch(store: Any, *args: Any) -> Any:
        checkpoints.append(store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        return real_write(store, *args)

    monkeypatch.setattr(indexer_module, "write_batch", write_batch)
    eng = make_engine(home, None, **{"memory.paths": [str(home / "memory")]})
    chunked: list[Path] = []
    eng.background, eng.keyword_first = BackgroundChunker(chunked.append), True
    try:
        report = eng.sync()
        deadline = time.monotonic() + 60
        while len(chunked) < report.files_deferred and time.monotonic() < deadline:
            time.sleep(0.05)
        report2 = eng.sync()  # the big notes, chunked in the background meanwhile
        assert report2.files_changed == report.files_deferred > 0
        # Notes to read: every one, then the big ones and the skipped (binary) ones, which
        # have no row; the rest are unchanged by their stat.
        assert asked == [NOTES + 1, report.files_deferred + report.files_skipped]
        # A big sync's batches checkpoint less often (those of the second, small one do not),
        # and the interval is SQLite's default again after it.
        bulk = batch_write.BULK_CHECKPOINT_PAGES
        assert checkpoints[0] == (bulk if workers else 1000) and checkpoints[-1] == 1000
        assert eng.writes.writer.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    finally:
        eng.background.close()
        eng.close()
    return report, pools


def test_notes_chunked_by_workers_give_the_rows_the_writer_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunk_pool, "MIN_FILES", 10)
    monkeypatch.setattr(indexer_module, "BIG_FILE_BYTES", BIG)
    monkeypatch.setattr(recalld.cpus, "usable_cores", lambda: 2)  # a worker on any machine
    got = {}
    for name in ("writer", "workers"):
        home = tmp_path / name
        (home / "memory").mkdir(parents=True)
        secrets = _notes(home / "memory", seed=40)  # the same notes in both homes
        # A secret is tallied once per process: forget the first home's before the second.
        monkeypatch.setattr(redaction_tally, "_seen", {"indexed": set(), "served": set()})
        before = redaction_tally.counts()["indexed"]["total"]
        report, pools = _sync(home, monkeypatch, workers=name == "workers")
        tallied = redaction_tally.counts()["indexed"]["total"] - before
        got[name] = (_rows(home / "index.sqlite", home), report, tallied, pools)
        assert tallied == secrets > 0, "each secret counted once, whichever process hid it"
    (rows_w, rep_w, tally_w, _), (rows_p, rep_p, tally_p, pools) = got["writer"], got["workers"]
    assert rows_p == rows_w
    assert len(rows_p[0]) > NOTES and rows_p[1], "chunks and tags were written"
    for key in ("files_changed", "files_deferred", "files_skipped", "chunks_written"):
        assert getattr(rep_p, key) == getattr(rep_w, key), key
    skipped = [
        sorted(str(s).replace(f"/{name}/", "/H/") for s in got[name][1].skipped)
        for name in ("writer", "workers")
    ]
    assert skipped[0] == skipped[1]
    assert any("names not read" in s["reason"] for s in rep_p.skipped)
    assert any("binary" in s["reason"] for s in rep_p.skipped)
    # Each home's secrets are counted once, whichever process redacted them.
    assert tally_w == tally_p
    pool = pools[0]  # the first sync's (the second reads the big notes again)
    groups = -(-(NOTES + 1) // chunk_pool.GROUP_FILES)
    assert pool.in_writer < groups, "the worker chunked some groups"


def _raws(tmp_path: Path, n: int) -> list[tuple[Path, Raw | None]]:
    _notes(tmp_path, seed=41)
    out: list[tuple[Path, Raw | None]] = []
    for path in sorted(tmp_path.rglob("*.md"))[:n]:
        out.append((path, Raw(path, path.read_bytes(), path.stat(), "d")))
        out.append((path.with_suffix(".gone"), None))  # a file with nothing to chunk
    return out


SETTINGS = ChunkSettings(256, 200, 0.25, 1200, True, True)


def _writers(raws: Any, count: Any) -> list[Any]:
    """What the writer itself makes of the notes read (``chunk_notes`` in this process)."""
    items = [(str(r.path), r.data, r.st.st_mtime_ns) for _, r in raws if r is not None]
    return chunk_notes(items, count, SETTINGS, BIG)


def test_a_killed_worker_leaves_its_groups_to_the_writer(tmp_path: Path) -> None:
    raws = _raws(tmp_path, 80)
    count = default_tokenizer().count
    pool = ChunkPool(1, SETTINGS, count, BIG)
    try:
        assert pool.started.result(timeout=120)
        for pid in list(pool.executor._processes):  # the pool's own worker, by its id
            os.kill(pid, signal.SIGKILL)
        got = list(pool.in_order(iter(raws)))
    finally:
        pool.close()
    assert [(p, r) for p, r, _ in got] == raws
    expected = _writers(raws, count)
    outcomes = [o for _, r, o in got if r is not None]
    assert outcomes == expected
    assert all(isinstance(o, Chunked) or o is None for o in outcomes)
    assert all(o is None for _, r, o in got if r is None)
    assert pool.in_writer > 0


def test_a_worker_gives_the_outcomes_of_the_writer_in_order(tmp_path: Path) -> None:
    raws = _raws(tmp_path, 120)
    count = default_tokenizer().count
    pool = ChunkPool(1, SETTINGS, count, BIG)
    pool.overtake_s = 120  # the writer waits for the worker's groups, however busy the host
    try:
        pool.started.result(timeout=120)
        got = list(pool.in_order(iter(raws)))
    finally:
        pool.close()
    assert [o for _, r, o in got if r is not None] == _writers(raws, count)
    assert [p for p, _, _ in got] == [p for p, _ in raws]
    assert pool.in_writer < -(-len(raws) // chunk_pool.GROUP_FILES)


def test_workers_only_for_a_big_sync_with_a_core_to_spare() -> None:
    assert chunk_pool.workers_for(10_000, 1) == 0
    assert chunk_pool.workers_for(10_000, 2) == 1
    assert chunk_pool.workers_for(10_000, 64) == chunk_pool.MAX_WORKERS
    assert chunk_pool.workers_for(chunk_pool.MIN_FILES - 1, 8) == 0


def _with_worker_stopped(raws: Any, count: Any) -> tuple[ChunkPool, list[Any]]:
    """A one-worker pool's outcomes of ``raws`` with its worker stopped throughout."""
    pool = ChunkPool(1, SETTINGS, count, BIG)
    try:
        assert pool.started.result(timeout=120)
        (pid,) = list(pool.executor._processes)  # the pool's own worker, by its id
        os.kill(pid, signal.SIGSTOP)  # as a host too busy to run it
        try:
            got = list(pool.in_order(iter(raws)))
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        pool.close()
    return pool, got


def test_a_worker_without_a_core_is_overtaken_by_the_writer(tmp_path: Path) -> None:
    raws = _raws(tmp_path, 120)
    count = default_tokenizer().count
    pool, got = _with_worker_stopped(raws, count)
    assert [o for _, r, o in got if r is not None] == _writers(raws, count)
    assert pool.overtaken > 0
    assert pool.in_writer == -(-len(raws) // chunk_pool.GROUP_FILES)  # every group, here


def test_workers_yield_to_searches_as_background_embedding_does() -> None:
    pool = ChunkPool(1, SETTINGS, default_tokenizer().count, BIG, nice=5)
    try:
        assert pool.started.result(timeout=120)
        worker = pool.executor.submit(os.nice, 0).result(timeout=60)  # the worker's niceness
    finally:
        pool.close()
    assert worker == min(os.nice(0) + 5, 19)


_ORPHAN_PROBE = """
import sys, time
from recalld.ingest.chunk_pool import ChunkPool
from recalld.ingest.note_rows import ChunkSettings
from recalld.tokens import default_tokenizer
pool = ChunkPool(1, ChunkSettings(**{settings!r}), default_tokenizer().count, {big})
assert pool.started.result(timeout=120)
print(*pool.executor._processes, flush=True)
time.sleep(600)
"""


def test_a_worker_exits_when_the_daemon_is_killed(tmp_path: Path) -> None:
    """kill -9 of the process that owns the pool: its worker used to wait forever (it holds
    both ends of its call queue's pipe, so no end of file ever came)."""
    import dataclasses
    import subprocess
    import sys

    code = _ORPHAN_PROBE.format(settings=dataclasses.asdict(SETTINGS), big=BIG)
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        workers = [int(p) for p in owner.stdout.readline().split()]
        assert len(workers) == 1 and _alive(workers[0])
    finally:
        owner.kill()
        owner.wait(10)
    deadline = time.monotonic() + 20
    while _alive(workers[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphan = _alive(workers[0])
    if orphan:  # not left behind by a failing run
        os.kill(workers[0], signal.SIGKILL)
    assert not orphan, "the worker outlived the daemon that was killed"


def _alive(pid: int) -> bool:
    """Running (a zombie left for init to reap counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_without_a_core_gets_fewer_groups_to_wait_on(tmp_path: Path) -> None:
    raws = _raws(tmp_path, 120) * 6  # ~45 groups
    groups = -(-len(raws) // chunk_pool.GROUP_FILES)
    count = default_tokenizer().count
    pool, got = _with_worker_stopped(raws, count)
    assert [o for _, r, o in got if r is not None] == _writers(raws, count)
    # Each group handed to the stopped worker costs the writer OVERTAKE_S: after the first
    # ones (handed before any was overtaken) it hands one at a time, not QUEUED.
    assert pool.in_flight == 1
    assert pool.overtaken <= chunk_pool.QUEUED + groups // 4
