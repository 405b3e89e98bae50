"""Speed measurements, each next to its physical reference measured in the same run: the client's
import, the small index (search, idle RSS, status round trip, save to searchable), the no-op
resync and transcript appends; ``run_all`` runs every speed part in order (indexing in
``bench/indexing_speed.py``, the large index in ``bench/large_index.py``)."""

from __future__ import annotations

import math
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import corpora, homes
from bench.common import VENV_BIN, Sampler, Sheet, log, median, percentile
from bench.daemonproc import Daemon
from bench.indexing_speed import index_throughput, rss_indexing
from bench.large_index import large_index
from bench.speed_ctx import SPEED, Ctx, ms, profile_top, search_loop
from recalld.config import Config
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.index.store import Store

# client import ------------------------------------------------------------------------------------


def client_import(ctx: Ctx) -> None:
    """``python -c 'import recalld_client'`` minus a bare interpreter, interleaved, median."""
    py = str(VENV_BIN / "python")
    bare: list[float] = []
    full: list[float] = []
    for _ in range(ctx.sizes.import_runs + 2):
        for code, sink in (("pass", bare), ("import recalld_client", full)):
            t = time.perf_counter()
            subprocess.run([py, "-c", code], check=True)
            sink.append(ms(t))
    bare, full = bare[2:], full[2:]  # warm-up: page cache, pyc
    diff = median(full) - median(bare)
    ctx.sheet.put("client_import_ms", diff, 1)
    ctx.sheet.put("python_startup_ms", median(bare), 1)
    heavy = subprocess.run(
        [
            py,
            "-c",
            "import sys, recalld_client; print(','.join(m for m in ('numpy', "
            "'onnxruntime', 'apsw', 'watchdog', 'httpx') if m in sys.modules))",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ctx.sheet.put("client_heavy_imports", heavy or "none")
    cumulative = []
    for _ in range(ctx.sizes.import_runs):
        err = subprocess.run(
            [py, "-X", "importtime", "-c", "import recalld_client"],
            check=True,
            capture_output=True,
            text=True,
        ).stderr
        for line in err.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] == "recalld_client":
                cumulative.append(int(parts[1]) / 1000)
    ctx.sheet.put("client_import_importtime_ms", median(cumulative), 1)
    ctx.sheet.note(
        "client_import_ms",
        f"median of {ctx.sizes.import_runs} subprocess runs of "
        "`python -c 'import recalld_client'` minus the median of `python -c pass`, "
        "interleaved; cross-check: the cumulative time of `recalld_client` under "
        "`python -X importtime` (median), which is free of interpreter start-up noise",
    )


# search through the socket ------------------------------------------------------------------------


def small_index(ctx: Ctx) -> None:
    """The 10k index: search latency, idle RSS, status round trip, save-to-searchable."""
    home = SPEED / "idx-small"
    docs = corpora.take_chunks(corpora.interleave(ctx.pool, "small"), ctx.sizes.small_chunks)
    info = homes.build_pipeline_home(home, docs, ctx.embedder, ctx.cache, watch=True)
    s = ctx.sheet
    s.put("small_index_chunks", info["chunks"])
    s.put("small_index_files", info["files"])
    s.put("index_chunks_per_s_cached", info["chunks"] / info["seconds"], 1)
    s.note(
        "index_chunks_per_s_cached",
        (
            "Engine.sync() of the 10k index from scratch with every vector already in its "
            "embedding "
            "cache: the pipeline alone (read, chunk, hash, write SQLite + FTS5 + vec0)"
        ),
    )
    queries = corpora.real_queries(ctx.sizes.queries, "small")
    with Daemon(home) as d:
        d.wait_idle()
        with d.client() as c:
            _small_search(s, d, c, queries, info["chunks"])
            _status_rtt(s, c, ctx.sizes.status_calls)
        save_to_searchable(ctx, d, home)
        if float(ctx.sheet.metrics.get("status_rtt_p50_ms", 0)) > 1.0:
            _profile_status(ctx, home)


def _small_search(s: Sheet, d: Daemon, c: Any, queries: Sequence[str], chunks: int) -> None:
    """Hybrid and keyword search through the socket, then the daemon's RSS once idle."""
    search_loop(c, queries[:10])  # warm-up (loads the vector matrix)
    wall, took = search_loop(c, queries)
    kw_wall, _ = search_loop(c, queries, mode="keyword")
    s.put("search_p50_ms_10k", percentile(wall, 0.5), 2)
    s.put("search_p95_ms_10k", percentile(wall, 0.95), 2)
    s.put("search_server_p50_ms_10k", percentile(took, 0.5), 2)
    s.put("keyword_search_p50_ms_10k", percentile(kw_wall, 0.5), 2)
    time.sleep(1.0)
    parts = d.rss_parts()
    s.put("rss_idle_mb", parts["VmRSS"], 1)
    s.put("rss_idle_anon_mb", parts.get("RssAnon"), 1)
    s.put("rss_idle_file_mb", parts.get("RssFile"), 1)
    s.note(
        "rss_idle_mb",
        (
            f"VmRSS of the daemon serving the {chunks}-chunk index, model loaded, "
            f"after {len(queries) * 2 + 10} searches, idle for 1 s"
        ),
    )


def _status_rtt(s: Sheet, c: Any, n: int) -> None:
    """``n`` status calls and half as many hellos (the transport floor) on one connection."""
    st_ms = [0.0] * n
    for i in range(n + 50):
        t = time.perf_counter()
        c.status()
        if i >= 50:
            st_ms[i - 50] = ms(t)
    hello_ms = []
    for i in range(n // 2 + 20):
        t = time.perf_counter()
        c.hello()
        if i >= 20:
            hello_ms.append(ms(t))
    s.put("status_rtt_p50_ms", percentile(st_ms, 0.5), 3)
    s.put("status_rtt_p95_ms", percentile(st_ms, 0.95), 3)
    s.put("hello_rtt_p50_ms", percentile(hello_ms, 0.5), 3)
    s.note(
        "status_rtt_p50_ms",
        (
            f"{n} `status` calls on one connection to the daemon of the 10k index (after "
            "50 "
            f"warm-up calls); `hello` ({n // 2} calls) is the transport floor"
        ),
    )


def _profile_status(ctx: Ctx, home: Path) -> None:
    """Where a status call spends its time (in-process, read-only engine on the same index)."""
    config = homes.home_config(home, watch=False)
    engine = Engine(config, writable=False, choice=ProviderChoice(ctx.embedder, "bench"))
    try:
        engine.status()
        ctx.sheet.tables["profile_status"] = profile_top(
            lambda: [engine.status() for _ in range(200)], 12
        )
        with engine.reader() as store:
            parts = {}
            for table in ("files", "chunks", "chunks_fts", "chunks_vec", "embedding_cache"):
                t = time.perf_counter()
                for _ in range(20):
                    store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                parts[table] = round(ms(t) / 20, 3)
        ctx.sheet.tables["status_count_ms"] = parts
    finally:
        engine.close()


def save_to_searchable(ctx: Ctx, d: Daemon, home: Path) -> None:
    """Write a new file with a unique token; poll a keyword search until it is found."""
    live = home / "memory" / "bench-live"
    live.mkdir(parents=True, exist_ok=True)
    sample = next(doc for doc in ctx.pool if doc.set == "locomo")
    body = "\n".join(sample.text.splitlines()[:12])
    times: list[float] = []
    with d.client() as c:
        for i in range(ctx.sizes.save_trials):
            d.wait_idle(poll=0.05)
            token = f"zq{uuid.uuid4().hex[:12]}"
            path = live / f"note-{i}-{token}.md"
            path.write_text(f"{body}\n\nReminder: the locker code is {token}.\n", encoding="utf-8")
            t0 = time.perf_counter()
            found = math.nan
            while time.perf_counter() - t0 < 30:
                res = c.search(token, mode="keyword", max_results=3, min_score=0.0)
                if any(r["path"] == str(path) for r in res["results"]):
                    found = time.perf_counter() - t0
                    break
                time.sleep(0.01)
            times.append(found)
            time.sleep(0.3)
    s = ctx.sheet
    s.put("save_to_searchable_s", median(times), 3)
    s.put("save_to_searchable_max_s", max(times), 3)
    s.put("debounce_s", 1.5)
    s.note(
        "save_to_searchable_s",
        (
            f"median of {len(times)} trials: write a new Markdown file holding a unique token into "
            "a "
            "watched folder of the running 10k daemon (default debounce 1.5 s), then poll a "
            "keyword "
            "search every 10 ms until the file is a hit; the chunk is embedded inside that time"
        ),
    )


# no-op resync -------------------------------------------------------------------------------------


def noop_resync(ctx: Ctx) -> None:
    """Engine.sync() on an already indexed folder of 10k unchanged real files."""
    home = SPEED / "noop"
    docs = corpora.interleave([d for d in ctx.pool if d.chunks], "noop")[: ctx.sizes.noop_files]
    info = homes.noop_home(home, docs, ctx.embedder, ctx.cache, ctx.rebuild)
    config = homes.home_config(home, watch=False)
    engine = homes.engine_for(config, ctx.embedder)
    try:
        t = time.perf_counter()
        first = engine.sync()
        first_s = time.perf_counter() - t
        runs = 5 if first_s < 10 else 1  # a slow tree gets one more (sampled) run, not five
        times = []
        sampler = Sampler()
        with sampler:
            for _ in range(runs):
                t = time.perf_counter()
                report = engine.sync()
                times.append(time.perf_counter() - t)
        assert report.files_changed == 0 and first.files_changed == 0, report
        s = ctx.sheet
        s.put("noop_resync_10k_s", median(times), 3)
        s.put("noop_resync_first_s", first_s, 3)
        s.put("noop_files", report.files_seen)
        s.put("noop_chunks", info["chunks"])
        s.note(
            "noop_resync_10k_s",
            f"median of {runs} in-process Engine.sync() calls over {report.files_seen} unchanged "
            f"real files ({info['chunks']} chunks, local provider, vectors present) after a "
            f"first call on the freshly opened engine ({first_s:.3f} s)",
        )
        if median(times) > 1.0:
            ctx.sheet.tables["profile_noop_resync"] = sampler.report()
    finally:
        engine.close()


# transcripts --------------------------------------------------------------------------------------


def transcript_append(ctx: Ctx) -> None:
    """Append one message to an indexed 10 KB / 10 MB transcript; time the incremental sync."""
    s = ctx.sheet
    if not hasattr(Engine, "sync_sessions"):
        for size in ("10kb", "10mb"):
            s.put(f"transcript_append_ms_{size}", "n/a (sync_sessions missing)")
        s.note("transcript_append_ms_10kb", "Engine.sync_sessions() does not exist in this tree")
        return
    home = SPEED / "sessions"
    files, config = _transcript_home(ctx, home)
    engine = homes.engine_for(config, ctx.embedder)
    try:
        t = time.perf_counter()
        first = engine.sync_sessions(None)
        s.put("transcript_initial_index_s", time.perf_counter() - t, 2)
        s.tables["transcript_initial_report"] = first
        ctx.cache.harvest(home / "index.sqlite")
        for size, path in files.items():
            _time_appends(ctx, engine, size, path)
        s.note(
            "transcript_append_ms_10kb",
            (
                "real Claude Code JSONL (spotter fixtures: short.jsonl, and the main sessions "
                "joined "
                "to 10 MB), indexed; then one user message appended and "
                "Engine.sync_sessions([path]) "
                f"timed in-process, median of {ctx.sizes.append_trials} appends (the new chunk is "
                "embedded inside the time)"
            ),
        )
    except Exception as exc:  # noqa: BLE001 - the API is being written; report, don't abort
        for size in ("10kb", "10mb"):
            s.metrics.setdefault(f"transcript_append_ms_{size}", f"n/a ({type(exc).__name__})")
        s.errors["transcript_append"] = f"{type(exc).__name__}: {exc}"
    finally:
        engine.close()


def _transcript_home(ctx: Ctx, home: Path) -> tuple[dict[str, Path], Config]:
    """A fresh home whose sessions are a 10 KB and a 10 MB transcript: (the files, its config)."""
    homes.wipe(home)
    tdir = home / "transcripts"
    tdir.mkdir(parents=True)
    files = {"10kb": tdir / "small.jsonl", "10mb": tdir / "large.jsonl"}
    files["10kb"].write_bytes(corpora.transcript_bytes(10 * 1024))
    files["10mb"].write_bytes(corpora.transcript_bytes(10 * 1024 * 1024))
    config = homes.home_config(home, sessions=[str(tdir / "*.jsonl")], watch=False)
    with Store(home / "index.sqlite") as store:
        store.copy_cache_from(ctx.cache.path)
    return files, config


def _time_appends(ctx: Ctx, engine: Engine, size: str, path: Path) -> None:
    """Unchanged syncs of one transcript, then appends each followed by a timed sync."""
    s = ctx.sheet
    template = path.read_bytes()[-200_000:]
    noop = []
    for _ in range(3):
        t = time.perf_counter()
        engine.sync_sessions([path])
        noop.append(ms(t))
    times = []
    for n in range(ctx.sizes.append_trials):
        token = f"zq{uuid.uuid4().hex[:10]}"
        with path.open("ab") as fh:
            fh.write(corpora.user_message_line(template, token, n))
        t = time.perf_counter()
        engine.sync_sessions([path])
        times.append(ms(t))
        hits = engine.searcher.search({"query": token, "mode": "keyword", "min_score": 0.0})
        if not any(r["path"] == str(path) for r in hits["results"]):
            s.errors[f"transcript_{size}"] = f"appended message {n} not found by search"
    s.put(f"transcript_append_ms_{size}", median(times), 2)
    s.put(f"transcript_unchanged_sync_ms_{size}", median(noop), 2)
    s.put(f"transcript_bytes_{size}", path.stat().st_size)


def run_all(
    ctx: Ctx,
    only: set[str] | None,
    timings: dict[str, float],
    steps: Sequence[tuple[str, Callable[[Ctx], None]]] | None = None,
) -> None:
    """Every speed measurement (or ``steps``), in an order that keeps heavy memory users apart."""
    from bench.common import stage

    steps = (
        steps
        if steps is not None
        else [
            ("client_import", client_import),
            ("throughput", index_throughput),
            ("rss_indexing", rss_indexing),
            ("small", small_index),
            ("large", large_index),
            ("noop", noop_resync),
            ("transcripts", transcript_append),
        ]
    )
    for name, fn in steps:
        if only and name not in only:
            continue
        with stage(name, timings):
            try:
                fn(ctx)
            except Exception as exc:  # noqa: BLE001 - one failed part must not lose the others
                log(f"{name} FAILED: {type(exc).__name__}: {exc}")
                ctx.sheet.errors[name] = f"{type(exc).__name__}: {exc}"
                import traceback

                traceback.print_exc(file=sys.stderr)
