"""The large index (``Sizes.large_chunks``, 100k in a full run): hybrid search through the socket
with its references run on the same query in the same rounds (numpy float32 brute force, the
daemon's VectorIndex in-process, sqlite-vec, the query embedding alone, FTS5, ripgrep), the same
daemon with one BLAS thread beside it, vector recall against exact search, and profiles."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from bench import corpora, filtered_search, homes, prefilter
from bench.common import VENV_BIN, Sampler, Sheet, percentile
from bench.daemonproc import Daemon
from bench.speed_ctx import F32, SPEED, Ctx, ms, search_loop
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.index.store import Store, vector_blob
from recalld.index.vector_index import VectorIndex
from recalld.retrieval.fts_query import build_match


class _Measured(NamedTuple):
    """What the two daemons' rounds measured, put on the sheet once the daemons are gone."""

    rounds: dict[str, list[float]]
    keyword: list[float]
    vector: list[float]
    recall: float
    prefilter: float


def large_index(ctx: Ctx) -> None:
    """The 100k index: socket search vs numpy, sqlite-vec and ripgrep; vector recall vs exact."""
    home = SPEED / "idx-large"
    info = homes.large_home(
        home, ctx.pool, ctx.real, ctx.sizes.large_chunks, ctx.embedder, ctx.cache, ctx.rebuild
    )
    s = ctx.sheet
    _put_home(s, info)
    queries = corpora.real_queries(ctx.sizes.queries, "large")
    qvecs = ctx.embedder.embed(queries, query=True)
    with Store(home / "index.sqlite", readonly=True) as store:
        ids_arr, matrix = _matrix(store, ctx.embedder.dims)
        vindex = VectorIndex.load(store, ctx.embedder.dims)
        for pragma in ("cache_size", "mmap_size"):  # as recalld's own Store opens a reader
            row = store.conn.execute(f"PRAGMA {pragma}").fetchone()
            s.put(f"reader_{pragma}", int(row[0]) if row else 0)
        got = _measure_daemons(ctx, home, store, queries, qvecs, matrix, vindex, ids_arr)
    matrix_mb = matrix.nbytes / 1e6
    del matrix, vindex
    _search_profile(ctx, home, queries)
    _put_measured(s, got, len(qvecs), matrix_mb)
    _note_large(s, info, queries)


def _put_home(s: Sheet, info: dict[str, Any]) -> None:
    """What the large home holds and how long building and indexing it took."""
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


def _matrix(store: Store, dims: int) -> tuple[npt.NDArray[np.int64], F32]:
    """(chunk ids, float32 matrix) of every vector in the index, row i being chunk ids[i]."""
    ids_l: list[int] = []
    blobs: list[F32] = []
    for ids, blob in store.iter_vectors():
        ids_l.extend(ids)
        blobs.append(np.frombuffer(blob, dtype="<f4").reshape(len(ids), dims))
    ids_arr = np.asarray(ids_l, dtype=np.int64)
    matrix = np.ascontiguousarray(np.vstack(blobs), dtype=np.float32)
    del blobs
    return ids_arr, matrix


def _measure_daemons(
    ctx: Ctx,
    home: Path,
    store: Store,
    queries: list[str],
    qvecs: F32,
    matrix: F32,
    vindex: VectorIndex,
    ids_arr: npt.NDArray[np.int64],
) -> _Measured:
    """The default daemon and the one-BLAS-thread one, side by side with the references."""
    s = ctx.sheet
    want = 6 * 4  # max_results x candidate_multiplier: what the vector channel fetches
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
            s.put("large_first_search_ms", ms(t), 1)
            search_loop(c, queries[1:11])
            search_loop(c1, queries[:11])
            rounds = _side_by_side(ctx, c, c1, store, queries, qvecs, matrix, vindex, memory, want)
            kw, _ = search_loop(c, queries, mode="keyword")
            vec, _ = search_loop(c, queries, mode="vector")
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
    return _Measured(rounds, kw, vec, recall, kept)


def _put_measured(s: Sheet, got: _Measured, n_queries: int, matrix_mb: float) -> None:
    """The medians of the rounds, the keyword and vector modes, recall and the scan's rate."""
    rounds = got.rounds
    for name, values in rounds.items():
        s.put(f"{name}_p50_ms_100k", percentile(values, 0.5), 3)
        if name == "search":
            s.put("search_p95_ms_100k", percentile(values, 0.95), 2)
    s.put("keyword_search_p50_ms_100k", percentile(got.keyword, 0.5), 2)
    s.put("vector_search_p50_ms_100k", percentile(got.vector, 0.5), 2)
    s.put("vector_recall_vs_exact_100k", got.recall, 4)
    prefilter.put(s, "100k", got.prefilter, n_queries)
    s.put("numpy_scan_gb_per_s", matrix_mb / percentile(rounds["numpy"], 0.5), 2)
    s.put(
        "vector_scan_vs_numpy",
        percentile(rounds["vector_scan"], 0.5) / percentile(rounds["numpy"], 0.5),
        3,
    )


def _note_large(s: Sheet, info: dict[str, Any], queries: Sequence[str]) -> None:
    """How the large index's searches, the one-BLAS-thread daemon and recall were measured."""
    s.note(
        "search_blas1_p50_ms_100k",
        "the same daemon code and index started with OPENBLAS_NUM_THREADS=1 (a second daemon, "
        "queried in the same rounds right after the default one)",
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
    config = homes.home_config(home)
    engine = Engine(config, writable=False, choice=ProviderChoice(ctx.embedder, "bench"))
    try:
        engine.searcher.search({"query": queries[0]})  # loads the matrix
        times = []
        with Sampler() as sampler:
            for q in queries[:100]:
                t = time.perf_counter()
                engine.searcher.search({"query": q})
                times.append(ms(t))
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


_ROUND_KEYS = (
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
_KNN = "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?"


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
    out: dict[str, list[float]] = {k: [] for k in _ROUND_KEYS}
    for i, q in enumerate(queries):
        qv = qvecs[i]
        for which in ("search", "search_blas1") if i % 2 else ("search_blas1", "search"):
            t = time.perf_counter()
            res = (c if which == "search" else c1).search(q)
            out[which].append(ms(t))
            out[f"{which}_server"].append(float(res["took_ms"]))
        _vector_references(out, store, qv, matrix, vindex, want)
        _text_references(ctx, out, store, q, memory, want)
    return out


def _vector_references(
    out: dict[str, list[float]], store: Store, qv: F32, matrix: F32, vindex: VectorIndex, want: int
) -> None:
    """Time numpy brute force, the daemon's VectorIndex in-process and sqlite-vec on one query."""
    t = time.perf_counter()
    scores = matrix @ qv
    top = np.argpartition(-scores, want - 1)[:want]
    top = top[np.argsort(-scores[top])]
    out["numpy"].append(ms(t))
    t = time.perf_counter()
    vindex.search(qv, want)
    out["vector_scan"].append(ms(t))
    t = time.perf_counter()
    store.conn.execute(_KNN, (vector_blob(qv), want)).fetchall()
    out["sqlite_vec"].append(ms(t))


def _text_references(
    ctx: Ctx, out: dict[str, list[float]], store: Store, q: str, memory: Path, want: int
) -> None:
    """Time the query embedding alone, FTS5 alone and ripgrep's two terms on one query."""
    t = time.perf_counter()
    ctx.embedder.embed([q], query=True)
    out["query_embed"].append(ms(t))
    match = build_match(q)
    t = time.perf_counter()
    if match:
        store.keyword_search(match, want, None, None)
    out["fts"].append(ms(t))
    terms = corpora.two_terms(q)
    cmd = [str(VENV_BIN / "rg"), "-i", "-c", "--no-ignore", "--no-messages", "-F"]
    for term in terms:
        cmd += ["-e", term]
    t = time.perf_counter()
    subprocess.run([*cmd, str(memory)], stdout=subprocess.DEVNULL, check=False)
    out["ripgrep"].append(ms(t))


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
    return float(statistics.mean(shares))
