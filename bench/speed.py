"""Speed measurements, each next to its physical reference measured in the same run."""

from __future__ import annotations

import cProfile
import io
import math
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import corpora, filtered_search, prefilter
from bench.cache import EMBED_GROUP, VectorCache
from bench.common import OUT, VENV_BIN, Sampler, Sheet, Sizes, log, median, percentile
from bench.corpora import Doc
from bench.daemonproc import Daemon
from recalld.embedding.local import LocalEmbedder
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.index.store import Store, vector_blob
from recalld.index.vector_index import VectorIndex
from recalld.retrieval.fts_query import build_match

F32 = npt.NDArray[np.float32]
SPEED = OUT / "speed"


@dataclass
class Ctx:
    """What every measurement needs."""

    sizes: Sizes
    sheet: Sheet
    embedder: LocalEmbedder
    cache: VectorCache
    pool: list[Doc]
    real: dict[str, F32]
    rebuild: bool


def _ms(t: float) -> float:
    return (time.perf_counter() - t) * 1000


def profile_top(fn: Callable[[], object], lines: int = 18) -> str:
    """cProfile of one call: the top functions by cumulative time, as text."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.strip_dirs().sort_stats("cumulative").print_stats(lines)
    text = buf.getvalue()
    start = text.find("   ncalls")
    return text[start:] if start >= 0 else text


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
            sink.append(_ms(t))
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


# indexing throughput ------------------------------------------------------------------------------


def _raw_embed(
    embedder: LocalEmbedder, home: Path, docs_by_path: dict[str, Doc]
) -> tuple[int, float]:
    """Embed the chunks of a corpus the way the indexer groups them (>= 256 per call, by file)."""
    root = (home / "memory").resolve()
    groups: list[dict[str, str]] = [{}]
    pending = 0
    for path in sorted(root.rglob("*.md")):
        doc = docs_by_path[path.relative_to(root).as_posix()]
        groups[-1].update({c.hash: c.text for c in doc.chunks})
        pending += len(doc.chunks)
        if pending >= EMBED_GROUP:
            groups.append({})
            pending = 0
    t = time.perf_counter()
    n = 0
    for group in groups:
        if group:
            embedder.embed(list(group.values()))
            n += len(group)
    return n, time.perf_counter() - t


def _pipeline(embedder: LocalEmbedder, home: Path) -> tuple[int, int, float]:
    config = corpora.home_config(home, watch=False)
    engine = corpora.engine_for(config, embedder)
    try:
        t = time.perf_counter()
        report = engine.sync()
        return report.chunks_written, report.chunks_embedded, time.perf_counter() - t
    finally:
        engine.close()


def index_throughput(ctx: Ctx) -> None:
    """Full sync of fresh corpora (no cache) vs raw embed() of the same chunks, interleaved."""
    mixed = corpora.interleave(ctx.pool, "fresh")
    warm = corpora.take_chunks(mixed[-200:], 64)  # other files: warms the model's shapes
    docs = corpora.take_chunks(mixed, ctx.sizes.throughput_chunks)
    parts_n = 8 if ctx.sizes.throughput_chunks >= 400 else 4  # raw/sync, sync/raw, ...
    per_part = sum(len(d.chunks) for d in docs) / parts_n
    parts: list[list[Doc]] = [[] for _ in range(parts_n)]
    acc = 0
    for d in docs:
        parts[min(int(acc // per_part), parts_n - 1)].append(d)
        acc += len(d.chunks)
    homes = [SPEED / f"fresh-{i}" for i in range(parts_n)]
    for home, part in zip(homes, parts, strict=True):
        corpora.wipe(home)
        corpora.home_config(home, watch=False)
        corpora.write_docs(home / "memory", part)
    ctx.embedder.embed([c.text for d in warm for c in d.chunks])
    raw_n = pipe_n = embedded = 0
    raw_s = pipe_s = 0.0
    ratios = []
    for i, (home, part) in enumerate(zip(homes, parts, strict=True)):
        by_path = {f"{d.set}/{d.rel}": d for d in part}
        if i % 2 == 0:
            raw = _raw_embed(ctx.embedder, home, by_path)
            pipe = _pipeline(ctx.embedder, home)
        else:
            pipe = _pipeline(ctx.embedder, home)
            raw = _raw_embed(ctx.embedder, home, by_path)
        raw_n, raw_s = raw_n + raw[0], raw_s + raw[1]
        pipe_n, pipe_s, embedded = pipe_n + pipe[0], pipe_s + pipe[2], embedded + pipe[1]
        ratios.append((pipe[0] / pipe[2]) / (raw[0] / raw[1]))
    s = ctx.sheet
    s.put("index_chunks_per_s", pipe_n / pipe_s, 2)
    s.put("embed_chunks_per_s", raw_n / raw_s, 2)
    s.put("index_vs_embed_ratio", (pipe_n / pipe_s) / (raw_n / raw_s), 3)
    s.put("index_vs_embed_ratio_parts", [round(r, 3) for r in ratios])
    s.put("index_vs_embed_ratio_median", median(ratios), 3)
    s.put("throughput_chunks", pipe_n)
    count = ctx.embedder._get_tokenizer().count
    s.put(
        "throughput_tokens_per_chunk",
        statistics.mean(count(c.text) for d in docs for c in d.chunks),
        1,
    )
    s.note(
        "index_chunks_per_s",
        f"full in-process Engine.sync() of {len(docs)} fresh real files ({pipe_n} chunks, "
        f"{embedded} embedded, empty cache) vs LocalEmbedder.embed() of the same chunk texts in "
        "the indexer's own groups (>= 256 chunks per call, files in path order), one warm model "
        f"shared (warmed on 64 other chunks); the corpus is cut in {parts_n} parts measured raw "
        "then sync, sync then raw, and so on, so that drifting load on the shared cores "
        f"cancels; per-part ratios {', '.join(f'{r:.2f}' for r in ratios)}",
    )
    for home in homes:
        corpora.wipe(home)
    if (pipe_n / pipe_s) / (raw_n / raw_s) < 0.85:
        _profile_pipeline(ctx, docs)


def _profile_pipeline(ctx: Ctx, used: Sequence[Doc]) -> None:
    """cProfile of one more fresh sync (other files) next to a raw embed of its chunks."""
    seen = {(d.set, d.rel) for d in used}
    rest = [d for d in corpora.interleave(ctx.pool, "profile") if (d.set, d.rel) not in seen]
    docs = corpora.take_chunks(rest, 160)
    home = SPEED / "fresh-profile"
    corpora.wipe(home)
    corpora.home_config(home, watch=False)
    corpora.write_docs(home / "memory", docs)
    raw = _raw_embed(ctx.embedder, home, {f"{d.set}/{d.rel}": d for d in docs})
    box: list[tuple[int, int, float]] = []
    text = profile_top(lambda: box.append(_pipeline(ctx.embedder, home)), 25)
    n, _, secs = box[0]
    ctx.sheet.tables["profile_index_pipeline"] = (
        f"fresh sync of {n} chunks: {secs:.2f} s under cProfile; raw embed of the same chunks "
        f"{raw[1]:.2f} s\n{text}"
    )
    corpora.wipe(home)


# RSS while indexing -------------------------------------------------------------------------------


def rss_indexing(ctx: Ctx) -> None:
    """A daemon indexing a fresh corpus (every chunk embedded): peak RSS (VmHWM)."""
    home = SPEED / "rss"
    corpora.wipe(home)
    docs = corpora.take_chunks(corpora.interleave(ctx.pool, "rss"), ctx.sizes.rss_chunks)
    corpora.home_config(home, watch=True)
    corpora.write_docs(home / "memory", docs)
    d = Daemon(home).start()
    try:
        samples: list[float] = []
        with d.client() as c:
            while True:
                samples.append(d.rss()[0])
                st = c.status()
                if st["state"] == "idle" and st["daemon"]["pending"] == 0 and st["last_sync"]:
                    break
                time.sleep(0.05)
            report = st.get("last_report") or {}
        rss, hwm = d.rss()
        s = ctx.sheet
        s.put("rss_indexing_mb", hwm, 1)
        s.put("rss_indexing_sampled_max_mb", max(samples), 1)
        s.put("rss_after_indexing_mb", rss, 1)
        if report.get("seconds"):
            s.put("daemon_index_chunks_per_s", report["chunks_written"] / report["seconds"], 2)
        s.note(
            "rss_indexing_mb",
            (
                f"VmHWM of a daemon that indexed {sum(len(x.chunks) for x in docs)} fresh chunks "
                f"({len(docs)} real files, empty cache) from start to idle"
            ),
        )
    finally:
        d.stop()
        corpora.wipe(home)


# search through the socket ------------------------------------------------------------------------


def _search_loop(c: Any, queries: Sequence[str], **params: Any) -> tuple[list[float], list[float]]:
    """Client wall times and server took_ms of one search per query."""
    wall, took = [], []
    for q in queries:
        t = time.perf_counter()
        res = c.search(q, **params)
        wall.append(_ms(t))
        took.append(float(res["took_ms"]))
    return wall, took


def small_index(ctx: Ctx) -> None:
    """The 10k index: search latency, idle RSS, status round trip, save-to-searchable."""
    home = SPEED / "idx-small"
    docs = corpora.take_chunks(corpora.interleave(ctx.pool, "small"), ctx.sizes.small_chunks)
    info = corpora.build_pipeline_home(home, docs, ctx.embedder, ctx.cache, watch=True)
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
            _search_loop(c, queries[:10])  # warm-up (loads the vector matrix)
            wall, took = _search_loop(c, queries)
            kw_wall, _ = _search_loop(c, queries, mode="keyword")
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
                    f"VmRSS of the daemon serving the {info['chunks']}-chunk index, model loaded, "
                    f"after {len(queries) * 2 + 10} searches, idle for 1 s"
                ),
            )
            n = ctx.sizes.status_calls
            st_ms = [0.0] * n
            for i in range(n + 50):
                t = time.perf_counter()
                c.status()
                if i >= 50:
                    st_ms[i - 50] = _ms(t)
            hello_ms = []
            for i in range(n // 2 + 20):
                t = time.perf_counter()
                c.hello()
                if i >= 20:
                    hello_ms.append(_ms(t))
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
        save_to_searchable(ctx, d, home)
        if float(ctx.sheet.metrics.get("status_rtt_p50_ms", 0)) > 1.0:
            _profile_status(ctx, home)


def _profile_status(ctx: Ctx, home: Path) -> None:
    """Where a status call spends its time (in-process, read-only engine on the same index)."""
    config = corpora.home_config(home, watch=False)
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
                parts[table] = round(_ms(t) / 20, 3)
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


def large_index(ctx: Ctx) -> None:
    """The 100k index: socket search vs numpy, sqlite-vec and ripgrep; vector recall vs exact."""
    home = SPEED / "idx-large"
    info = corpora.large_home(
        home, ctx.pool, ctx.real, ctx.sizes.large_chunks, ctx.embedder, ctx.cache, ctx.rebuild
    )
    s = ctx.sheet
    s.put("large_index_chunks", info["chunks"])
    s.put("large_index_files", info["files"])
    s.put("large_varied_files", info["varied_files"])
    s.put("large_real_text_chunks", info["real_text_chunks"])
    s.put("large_derived_vector_chunks", info["derived_vector_chunks"])
    s.put("large_derived_in_unvaried_files", info["derived_in_unvaried_files"])
    s.put("large_files_per_bundle", info["per_file"])
    s.put("large_noise_sigma", info["noise"]["sigma"], 4)
    s.put("large_noise_calibration_cos", info["noise"]["median_cos"], 4)
    s.put("large_build_s", info["build_s"], 1)
    s.put("large_sync_s", info["sync_s"], 1)
    s.put("large_sync_chunks_per_s", info["indexed_chunks"] / max(info["sync_s"], 1e-9), 0)
    s.put("large_reused", info["reused"])
    queries = corpora.real_queries(ctx.sizes.queries, "large")
    qvecs = ctx.embedder.embed(queries, query=True)
    want = 6 * 4  # max_results x candidate_multiplier: what the vector channel fetches
    with Store(home / "index.sqlite", readonly=True) as store:
        ids_l: list[int] = []
        blobs: list[F32] = []
        for ids, blob in store.iter_vectors():
            ids_l.extend(ids)
            blobs.append(np.frombuffer(blob, dtype="<f4").reshape(len(ids), ctx.embedder.dims))
        ids_arr = np.asarray(ids_l, dtype=np.int64)
        matrix = np.ascontiguousarray(np.vstack(blobs), dtype=np.float32)
        del blobs
        vindex = VectorIndex.load(store, ctx.embedder.dims)
        for pragma in ("cache_size", "mmap_size"):  # as recalld's own Store opens a reader
            row = store.conn.execute(f"PRAGMA {pragma}").fetchone()
            s.put(f"reader_{pragma}", int(row[0]) if row else 0)
        memory = home / "memory"
        t = time.perf_counter()
        d = Daemon(home).start()
        d1 = Daemon(home / "blas1", {"OPENBLAS_NUM_THREADS": "1"})
        try:
            d.wait_idle()
            s.put("large_daemon_ready_s", time.perf_counter() - t, 2)
            s.put("large_index_mb", (home / "index.sqlite").stat().st_size / 1e6, 0)
            _blas1_home(home)
            d1.start().wait_idle()
            with d.client() as c, d1.client() as c1:
                t = time.perf_counter()
                c.search(queries[0])
                s.put("large_first_search_ms", _ms(t), 1)
                _search_loop(c, queries[1:11])
                _search_loop(c1, queries[:11])
                rounds = _side_by_side(
                    ctx, c, c1, store, queries, qvecs, matrix, vindex, memory, want
                )
                kw, _ = _search_loop(c, queries, mode="keyword")
                vec, _ = _search_loop(c, queries, mode="vector")
                filtered_search.measure(s, c, home / "index.sqlite", queries, "100k")
                recall = _recall(vindex, qvecs, matrix, ids_arr)
                kept = prefilter.measure(vindex, qvecs, matrix, ids_arr)
                _pyspy(ctx, d, c, queries)
            time.sleep(1.0)
            parts = d.rss_parts()
            s.put("rss_idle_mb_100k", parts["VmRSS"], 1)
            s.put("rss_idle_anon_mb_100k", parts.get("RssAnon"), 1)
            s.put("rss_idle_file_mb_100k", parts.get("RssFile"), 1)
        finally:
            d.stop()
            d1.stop()
    matrix_mb = matrix.nbytes / 1e6
    del matrix, vindex
    _search_profile(ctx, home, queries)
    for name, values in rounds.items():
        s.put(f"{name}_p50_ms_100k", percentile(values, 0.5), 3)
        if name == "search":
            s.put("search_p95_ms_100k", percentile(values, 0.95), 2)
    s.put("keyword_search_p50_ms_100k", percentile(kw, 0.5), 2)
    s.put("vector_search_p50_ms_100k", percentile(vec, 0.5), 2)
    s.put("vector_recall_vs_exact_100k", recall, 4)
    prefilter.put(s, "100k", kept, len(qvecs))
    s.put("numpy_scan_gb_per_s", matrix_mb / percentile(rounds["numpy"], 0.5), 2)
    s.note(
        "search_blas1_p50_ms_100k",
        "the same daemon code and index started with OPENBLAS_NUM_THREADS=1 (a second daemon, "
        "queried in the same rounds right after the default one)",
    )
    s.put(
        "vector_scan_vs_numpy",
        percentile(rounds["vector_scan"], 0.5) / percentile(rounds["numpy"], 0.5),
        3,
    )
    s.note(
        "search_p50_ms_100k",
        (
            f"{len(queries)} real queries (locomo, scifact, tldr mixed) via "
            "recalld_client.search() "
            "(hybrid, 6 results, floor 0.35, query embedding included) to a daemon subprocess on "
            "the "
            f"{info['chunks']}-chunk index; in each round the references run right after it on the "
            "same query: numpy float32 brute force (matrix @ q + argpartition, top 24) over the "
            "same "
            "vectors, the daemon's VectorIndex.search in-process, sqlite-vec's vec0 KNN (k = 24) "
            "on "
            "the same index, the query embedding alone, FTS5 alone, and ripgrep"
        ),
    )
    s.note(
        "vector_recall_vs_exact_100k",
        (
            "the daemon's VectorIndex (loaded from the same index, PCA prefilter + exact "
            "rescoring) top 10, in-process, against the exact top 10 by numpy float32 dot "
            "product; a hit counts when its exact score is within 1e-5 of the 10th (ties). "
            "In-process because the socket's answer is the whole pipeline: near-duplicate "
            "collapse merges chunks cut inside one long line (same citation) and boosts "
            "reorder the candidates"
        ),
    )


def _search_profile(ctx: Ctx, home: Path, queries: Sequence[str]) -> None:
    """Searches in-process on the large index under the sampler: where a search goes."""
    config = corpora.home_config(home)
    engine = Engine(config, writable=False, choice=ProviderChoice(ctx.embedder, "bench"))
    try:
        engine.searcher.search({"query": queries[0]})  # loads the matrix
        times = []
        with Sampler() as sampler:
            for q in queries[:100]:
                t = time.perf_counter()
                engine.searcher.search({"query": q})
                times.append(_ms(t))
        ctx.sheet.put("inprocess_search_p50_ms_100k", percentile(times, 0.5), 2)
        ctx.sheet.tables["profile_search_100k_inprocess"] = (
            f"Engine.search() in the bench process (1 BLAS thread), {len(times)} hybrid queries, "
            f"p50 {percentile(times, 0.5):.1f} ms\n{sampler.report()}"
        )
    finally:
        engine.close()


def _pyspy(ctx: Ctx, d: Daemon, c: Any, queries: Sequence[str]) -> None:
    """With py-spy available (BENCH_PYSPY or PATH): 10 s of the daemon's native stacks."""
    exe = os.environ.get("BENCH_PYSPY") or shutil.which("py-spy")
    if not exe:
        return
    out = SPEED / "pyspy-search.txt"
    cmd = [
        exe,
        "record",
        "--pid",
        str(d.pid),
        "--duration",
        "10",
        "--rate",
        "250",
        "--format",
        "raw",
        "--threads",
        "--native",
        "-o",
        str(out),
    ]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    i = 0
    while spy.poll() is None:
        c.search(queries[i % len(queries)])
        i += 1
    leaves: Counter[str] = Counter()
    total = 0
    for line in out.read_text(errors="replace").splitlines() if out.exists() else []:
        stack, _, count = line.rpartition(" ")
        if "run_search" not in stack and "vector_channel" not in stack:
            continue
        frames = stack.split(";")
        thread = frames[0].split(":", 1)[-1].strip().split("_")[0]
        leaf = re.sub(r" \(/[^)]*/", " (", frames[-1])
        native = re.match(r"0x[0-9a-f]+ \((.+?)[./]", leaf)
        if native:  # an unsymbolised native frame: name its library only
            leaf = f"<native> ({native.group(1)})"
        leaves[f"[{thread}] {leaf[:110]}"] += int(count)
        total += int(count)
    if total:
        lines = [
            f"py-spy --native on the default daemon, {i} hybrid searches, {total} samples "
            "inside run_search / the vector channel; leaf frames:"
        ]
        lines += [f"  {n / total:6.1%}  {k}" for k, n in leaves.most_common(14)]
        ctx.sheet.tables["profile_daemon_search_100k"] = "\n".join(lines)


def _blas1_home(home: Path) -> None:
    """A second RECALLD_HOME sharing the large index's config (its own socket)."""
    other = home / "blas1"
    other.mkdir(exist_ok=True)
    config = (home / "config.toml").read_text(encoding="utf-8")
    (other / "config.toml").write_text(config.replace("watch = true", "watch = false"), "utf-8")
    link = other / "index.sqlite"
    if not link.exists():
        link.symlink_to(home / "index.sqlite")


def _side_by_side(
    ctx: Ctx,
    c: Any,
    c1: Any,
    store: Store,
    queries: Sequence[str],
    qvecs: F32,
    matrix: F32,
    vindex: VectorIndex,
    memory: Path,
    want: int,
) -> dict[str, list[float]]:
    """One round per query: the daemon's search, then each reference on the same query."""
    rg = str(VENV_BIN / "rg")
    out: dict[str, list[float]] = {
        k: []
        for k in (
            "search",
            "search_server",
            "search_blas1",
            "search_blas1_server",
            "numpy",
            "vector_scan",
            "sqlite_vec",
            "query_embed",
            "fts",
            "ripgrep",
        )
    }
    knn = "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?"
    for i, q in enumerate(queries):
        qv = qvecs[i]
        for which in ("search", "search_blas1") if i % 2 else ("search_blas1", "search"):
            t = time.perf_counter()
            res = (c if which == "search" else c1).search(q)
            out[which].append(_ms(t))
            out[f"{which}_server"].append(float(res["took_ms"]))
        t = time.perf_counter()
        scores = matrix @ qv
        top = np.argpartition(-scores, want - 1)[:want]
        top = top[np.argsort(-scores[top])]
        out["numpy"].append(_ms(t))
        t = time.perf_counter()
        vindex.search(qv, want)
        out["vector_scan"].append(_ms(t))
        t = time.perf_counter()
        store.conn.execute(knn, (vector_blob(qv), want)).fetchall()
        out["sqlite_vec"].append(_ms(t))
        t = time.perf_counter()
        ctx.embedder.embed([q], query=True)
        out["query_embed"].append(_ms(t))
        match = build_match(q)
        t = time.perf_counter()
        if match:
            store.keyword_search(match, want, None, None)
        out["fts"].append(_ms(t))
        terms = corpora.two_terms(q)
        cmd = [rg, "-i", "-c", "--no-ignore", "--no-messages", "-F"]
        for term in terms:
            cmd += ["-e", term]
        t = time.perf_counter()
        subprocess.run([*cmd, str(memory)], stdout=subprocess.DEVNULL, check=False)
        out["ripgrep"].append(_ms(t))
    return out


def _recall(vindex: VectorIndex, qvecs: F32, matrix: F32, ids: npt.NDArray[np.int64]) -> float:
    """Mean share of the vector channel's top 10 that is in the exact top 10 (ties allowed).

    The channel is the daemon's own VectorIndex (PCA prefilter + exact rescoring), loaded from
    the same index: measured in-process, because the socket's answer is the whole pipeline
    (near-duplicate collapse and boosts run after the channel and change what a top 10 holds).
    """
    shares = []
    for i in range(len(qvecs)):
        scores = matrix @ qvecs[i]
        top = np.argpartition(-scores, 9)[:10]
        tenth = float(np.min(scores[top]))
        score_of = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        got = vindex.search(qvecs[i], 10)
        shares.append(sum(score_of[cid] >= tenth - 1e-5 for cid, _ in got) / 10)
    return statistics.mean(shares)


# no-op resync -------------------------------------------------------------------------------------


def noop_resync(ctx: Ctx) -> None:
    """Engine.sync() on an already indexed folder of 10k unchanged real files."""
    home = SPEED / "noop"
    docs = corpora.interleave([d for d in ctx.pool if d.chunks], "noop")[: ctx.sizes.noop_files]
    info = corpora.noop_home(home, docs, ctx.embedder, ctx.cache, ctx.rebuild)
    config = corpora.home_config(home, watch=False)
    engine = corpora.engine_for(config, ctx.embedder)
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
    corpora.wipe(home)
    tdir = home / "transcripts"
    tdir.mkdir(parents=True)
    files = {"10kb": tdir / "small.jsonl", "10mb": tdir / "large.jsonl"}
    files["10kb"].write_bytes(corpora.transcript_bytes(10 * 1024))
    files["10mb"].write_bytes(corpora.transcript_bytes(10 * 1024 * 1024))
    config = corpora.home_config(home, sessions=[str(tdir / "*.jsonl")], watch=False)
    with Store(home / "index.sqlite") as store:
        store.copy_cache_from(ctx.cache.path)
    engine = corpora.engine_for(config, ctx.embedder)
    try:
        t = time.perf_counter()
        first = engine.sync_sessions(None)
        s.put("transcript_initial_index_s", time.perf_counter() - t, 2)
        s.tables["transcript_initial_report"] = first
        ctx.cache.harvest(home / "index.sqlite")
        for size, path in files.items():
            template = path.read_bytes()[-200_000:]
            noop = []
            for _ in range(3):
                t = time.perf_counter()
                engine.sync_sessions([path])
                noop.append(_ms(t))
            times = []
            for n in range(ctx.sizes.append_trials):
                token = f"zq{uuid.uuid4().hex[:10]}"
                with path.open("ab") as fh:
                    fh.write(corpora.user_message_line(template, token, n))
                t = time.perf_counter()
                engine.sync_sessions([path])
                times.append(_ms(t))
                hits = engine.searcher.search({"query": token, "mode": "keyword", "min_score": 0.0})
                if not any(r["path"] == str(path) for r in hits["results"]):
                    s.errors[f"transcript_{size}"] = f"appended message {n} not found by search"
            s.put(f"transcript_append_ms_{size}", median(times), 2)
            s.put(f"transcript_unchanged_sync_ms_{size}", median(noop), 2)
            s.put(f"transcript_bytes_{size}", path.stat().st_size)
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
