"""BENCHMARKS.md and BENCHMARKS.json from one run's sheet."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Sheet
from bench.quality import METRICS, MODES, PRIMARY

REQUIRED = (
    "search_p50_ms_10k",
    "search_p50_ms_100k",
    "search_p95_ms_100k",
    "numpy_p50_ms_100k",
    "vector_recall_vs_exact_100k",
    "index_chunks_per_s",
    "embed_chunks_per_s",
    "noop_resync_10k_s",
    "save_to_searchable_s",
    "transcript_append_ms_10kb",
    "transcript_append_ms_10mb",
    "rss_idle_mb",
    "rss_indexing_mb",
    "client_import_ms",
    "status_rtt_p50_ms",
    "commit",
    "date",
)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(float(value)) else None


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    """A metric for a table cell ("–" when it was not measured)."""
    if value is None:
        return "–"
    n = _num(value)
    if n is None:
        return str(value)
    text = f"{n:,.{digits}f}"
    return f"{text} {unit}".strip()


@dataclass(frozen=True)
class Target:
    """One target of the issue."""

    what: str
    key: str
    limit: float
    at_most: bool  # True: value <= limit passes
    unit: str
    derive: Callable[[dict[str, Any]], Any] | None = None

    def value(self, m: dict[str, Any]) -> Any:
        return self.derive(m) if self.derive else m.get(self.key)

    def verdict(self, m: dict[str, Any]) -> tuple[str, str]:
        """("pass"|"MISS"|"n/a", by how much)."""
        v = _num(self.value(m))
        if v is None:
            return "n/a", "not measured"
        ok = v <= self.limit if self.at_most else v >= self.limit
        gap = v - self.limit
        rel = v / self.limit if self.limit else math.inf
        if self.at_most:
            how = (
                f"{abs(gap):.3g} {self.unit} under ({rel:.2f}x the limit)"
                if ok
                else f"{gap:.3g} {self.unit} over ({rel:.2f}x the limit)"
            )
        else:
            how = (
                f"{gap:.3g} {self.unit} above ({rel:.2f}x the target)"
                if ok
                else f"{abs(gap):.3g} {self.unit} short ({rel:.2f}x the target)"
            )
        return ("pass" if ok else "MISS"), how.replace("  ", " ")


def _quality_margin(name: str) -> Callable[[dict[str, Any]], Any]:
    """Hybrid minus the better single channel on the set's primary metric."""
    metric = PRIMARY[name]

    def margin(m: dict[str, Any]) -> Any:
        h = m.get(f"quality_{name}_hybrid_{metric}")
        k = m.get(f"quality_{name}_keyword_{metric}")
        v = m.get(f"quality_{name}_vector_{metric}")
        hn, kn, vn = _num(h), _num(k), _num(v)
        if hn is None or kn is None or vn is None:
            return None
        return hn - max(kn, vn)

    return margin


TARGETS = (
    Target(
        "hybrid search p50 at 100k chunks, socket, query embedding included",
        "search_p50_ms_100k",
        25.0,
        True,
        "ms",
    ),
    Target(
        "vector channel recall@10 vs exact search at 100k",
        "vector_recall_vs_exact_100k",
        0.99,
        False,
        "",
    ),
    Target(
        "vector scan within 2x of numpy float32 brute force (ratio)",
        "vector_scan_vs_numpy",
        2.0,
        True,
        "x",
    ),
    Target(
        "indexing throughput / raw embedder throughput", "index_vs_embed_ratio", 0.85, False, ""
    ),
    Target(
        "hybrid p50 with --since keeping 1 % of 100k chunks / unfiltered p50 (same rounds)",
        "filtered_vs_unfiltered_p50_100k",
        1.0,
        True,
        "x",
    ),
    Target(
        "shared store: hybrid p50 with the shared channel / local-only p50 (same daemon, rounds)",
        "shared_over_local_p50",
        2.0,
        True,
        "x",
    ),
    Target(
        "shared store: vector recall@10 vs exact (HNSW)", "shared_vector_recall", 0.95, False, ""
    ),
    Target(
        "shared store: push chunks/s (with vectors) / keyword-first indexing chunks/s",
        "shared_push_over_index_throughput",
        0.5,
        False,
        "",
    ),
    Target("no-op resync of 10k unchanged files", "noop_resync_10k_s", 1.0, True, "s"),
    Target("save-to-searchable <= debounce (1.5 s) + 1 s", "save_to_searchable_s", 2.5, True, "s"),
    Target("daemon RSS idle, local model loaded", "rss_idle_mb", 350.0, True, "MB"),
    Target("client import time", "client_import_ms", 50.0, True, "ms"),
    Target(
        "`recalld search` through a daemon / bare `python -c pass` (wall, side by side)",
        "cli_search_vs_bare_python",
        2.0,
        True,
        "x",
    ),
    Target(
        "`recalld hook session-start` at 100k chunks / bare `python -c pass` (issue 35)",
        "hook_session_start_vs_bare_python",
        2.5,
        True,
        "x",
    ),
    Target(
        "`recalld hook sync` / bare `python -c pass` (issue 35)",
        "hook_sync_vs_bare_python",
        2.0,
        True,
        "x",
    ),
    Target("status round trip p50", "status_rtt_p50_ms", 1.0, True, "ms"),
    Target(
        "locomo: hybrid recall@10 minus best single channel",
        "q_locomo",
        0.0,
        False,
        "",
        _quality_margin("locomo"),
    ),
    Target(
        "scifact-train: hybrid nDCG@10 minus best single channel",
        "q_scifact",
        0.0,
        False,
        "",
        _quality_margin("scifact-train"),
    ),
    Target("tldr: hybrid hit@1", "quality_tldr_hybrid_hit@1", 0.90, False, ""),
    # issue 16: the conversation-heavy mix and keyword first (bench/chat_mix.py, first_sync.py)
    Target(
        "chat mix: hybrid p50 / (query embed + numpy)", "search_chat_vs_embed_numpy", 1.5, True, "x"
    ),
    Target("chat mix: keyword p50 / numpy p50", "keyword_chat_vs_numpy", 1.0, True, "x"),
    Target("fresh 10k files keyword-searchable", "keyword_searchable_s_10k_files", 30.0, True, "s"),
    Target(
        "fresh 10k files keyword-searchable / read + plain FTS5 insert",
        "keyword_searchable_over_fts_floor_10k_files",
        4.0,
        True,
        "x",
    ),
    Target("first sync vectors / raw embedder", "first_sync_vs_embed_ratio", 0.9, False, ""),
    # issue 40: searches while the daemon works, over the same daemon idle (bench/busy_search.py)
    Target(
        "hybrid p50 during a first sync / idle", "search_during_sync_over_idle_p50", 1.5, True, "x"
    ),
    Target(
        "hybrid p95 during a first sync / idle", "search_during_sync_over_idle_p95", 2.0, True, "x"
    ),
    Target(
        "hybrid p50 while a transcript grows / idle",
        "search_during_transcript_over_idle_p50",
        1.5,
        True,
        "x",
    ),
    Target(
        "hybrid p95 while a transcript grows / idle",
        "search_during_transcript_over_idle_p95",
        2.0,
        True,
        "x",
    ),
    # issue 40: the 1M tail over the median of the same searches (bench/scale.py)
    Target("hybrid p95 / p50 at 1M", "search_p95_over_p50_1m", 2.0, True, "x"),
    Target("keyword p95 / p50 at 1M", "keyword_p95_over_p50_1m", 3.0, True, "x"),
    # Scale (bench/scale.py, issue 16): ratios are to references measured in the same run.
    Target(
        "hybrid p50 at 1M / numpy p50 at 1M",
        "search_p50_1m_vs_numpy",
        1.0,
        True,
        "x",
        lambda m: _ratio(m, "search_p50_ms_1m", "numpy_p50_ms_1m"),
    ),
    Target(
        "hybrid p95 at 1M / numpy p50 at 1M",
        "search_p95_1m_vs_numpy",
        2.0,
        True,
        "x",
        lambda m: _ratio(m, "search_p95_ms_1m", "numpy_p50_ms_1m"),
    ),
    Target("cold start to first answered search, 100k", "cold_start_s_100k", 2.0, True, "s"),
    Target("cold start to first answered search, 1M", "cold_start_s_1m", 10.0, True, "s"),
    # issue 40: the saved matrix outlives a quick stop (bench/restart.py)
    Target(
        "cold start after a quick restart / plain start beside it (medians of 3), 100k",
        "cold_start_after_quick_restart_over_cold_start_100k",
        1.2,
        True,
        "x",
    ),
    Target(
        "cold start after a quick restart / plain start beside it (medians of 3), 1M",
        "cold_start_after_quick_restart_over_cold_start_1m",
        1.2,
        True,
        "x",
    ),
    Target("peak RSS / idle RSS, 100k", "rss_peak_over_idle_100k", 1.25, True, "x"),
    Target("peak RSS / idle RSS, 1M", "rss_peak_over_idle_1m", 1.25, True, "x"),
    Target("anonymous RSS idle at 1M", "rss_idle_anon_mb_1m", 1200.0, True, "MB"),
    Target("vector recall@10 vs exact at 1M", "vector_recall_vs_exact_1m", 0.99, False, ""),
    Target(
        "throughput 4 clients / 1 client, 100k", "throughput_4_vs_1_clients_100k", 1.6, False, "x"
    ),
    # issue 34: writing and forgetting (bench/write_forget.py)
    Target(
        "remember to keyword-searchable p50, 100k, through the daemon",
        "write_to_keyword_searchable_ms_p50",
        50.0,
        True,
        "ms",
    ),
    Target(
        "remember to vector-searchable p50, 100k",
        "write_to_vector_searchable_ms_p50",
        1000.0,
        True,
        "ms",
    ),
    Target("forget a 10k-chunk session, 100k", "forget_session_10k_s", 2.0, True, "s"),
    Target("bytes of its tokens left under the home", "forget_session_tokens_left", 0, True, ""),
)


def _ratio(m: dict[str, Any], a: str, b: str) -> float | None:
    x, y = _num(m.get(a)), _num(m.get(b))
    return x / y if x is not None and y else None


def _speed_rows(m: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    def ratio(a: str, b: str) -> str:
        x, y = _num(m.get(a)), _num(m.get(b))
        return f"{x / y:.2f}x" if x is not None and y else "–"

    small = fmt(m.get("small_index_chunks"), "", 0)
    large = fmt(m.get("large_index_chunks"), "", 0)
    return [
        (
            f"hybrid search p50 / p95, socket, {small} chunks",
            f"{fmt(m.get('search_p50_ms_10k'), 'ms')} / {fmt(m.get('search_p95_ms_10k'), 'ms')}",
            f"server-side p50 {fmt(m.get('search_server_p50_ms_10k'), 'ms')}",
            "",
        ),
        (
            f"hybrid search p50 / p95, socket, {large} chunks",
            f"{fmt(m.get('search_p50_ms_100k'), 'ms')} / {fmt(m.get('search_p95_ms_100k'), 'ms')}",
            f"server-side p50 {fmt(m.get('search_server_p50_ms_100k'), 'ms')}; same daemon "
            f"with OPENBLAS_NUM_THREADS=1 {fmt(m.get('search_blas1_p50_ms_100k'), 'ms')} "
            f"(server-side {fmt(m.get('search_blas1_server_p50_ms_100k'), 'ms')}); "
            f"query embedding "
            f"alone {fmt(m.get('query_embed_p50_ms_100k'), 'ms')}",
            "",
        ),
        (
            "vector scan p50 (daemon's VectorIndex.search, top 24)",
            fmt(m.get("vector_scan_p50_ms_100k"), "ms", 3),
            f"numpy float32 brute force {fmt(m.get('numpy_p50_ms_100k'), 'ms', 3)} "
            f"({fmt(m.get('numpy_scan_gb_per_s'), 'GB/s')}, 1 BLAS thread)",
            ratio("vector_scan_p50_ms_100k", "numpy_p50_ms_100k"),
        ),
        (
            "sqlite-vec vec0 brute-force KNN p50 (k = 24)",
            fmt(m.get("sqlite_vec_p50_ms_100k"), "ms"),
            f"numpy {fmt(m.get('numpy_p50_ms_100k'), 'ms', 3)}",
            ratio("sqlite_vec_p50_ms_100k", "numpy_p50_ms_100k"),
        ),
        (
            "vector recall@10 vs exact",
            fmt(m.get("vector_recall_vs_exact_100k"), "", 4),
            "exact numpy top 10 = 1.0",
            "",
        ),
        (
            "int8 prefilter recall (exact top 10 among its candidates; "
            f"{m.get('prefilter_cpu', '-')})",
            fmt(m.get("prefilter_recall_100k"), "", 4),
            f"at 1M {fmt(m.get('prefilter_recall_1m'), '', 4)}",
            "",
        ),
        (
            "keyword-only search p50, socket",
            fmt(m.get("keyword_search_p50_ms_100k"), "ms"),
            f"FTS5 query alone {fmt(m.get('fts_p50_ms_100k'), 'ms')}; ripgrep two terms "
            f"{fmt(m.get('ripgrep_p50_ms_100k'), 'ms')}",
            ratio("keyword_search_p50_ms_100k", "ripgrep_p50_ms_100k"),
        ),
        ("vector-only search p50, socket", fmt(m.get("vector_search_p50_ms_100k"), "ms"), "", ""),
        (
            "hybrid p50 with --since keeping "
            f"{fmt(_num(m.get('filtered_share_100k')) and 100 * m['filtered_share_100k'], '%', 2)}"
            " of the chunks, socket",
            fmt(m.get("filtered_search_p50_ms_100k"), "ms"),
            f"unfiltered in the same rounds {fmt(m.get('unfiltered_search_p50_ms_100k'), 'ms')}; "
            f"{fmt(m.get('filtered_results_mean_100k'), '', 2)} results on average, "
            f"{m.get('filtered_hits_outside_100k')} dated before since",
            ratio("filtered_search_p50_ms_100k", "unfiltered_search_p50_ms_100k"),
        ),
        (
            "hybrid searches per second, 1 / 4 / 16 clients, 100k scale home (median round)",
            f"{fmt(m.get('throughput_1_clients_100k'), '', 1)} / "
            f"{fmt(m.get('throughput_4_clients_100k'), '', 1)} / "
            f"{fmt(m.get('throughput_16_clients_100k'), '/s', 1)}",
            "4 vs 1 client in each round: "
            + ", ".join(f"{x:.2f}" for x in m.get("throughput_4_vs_1_clients_100k_rounds") or [])
            + f"; the search helper answered {m.get('search_helper_searches_100k')} searches "
            f"(ready {fmt(m.get('search_helper_load_s_100k'), 's', 1)} after it was started; "
            "RSS rows count it)",
            ratio("throughput_4_clients_100k", "throughput_1_clients_100k"),
        ),
        (
            "indexing throughput (fresh, every chunk embedded)",
            fmt(m.get("index_chunks_per_s"), "chunks/s"),
            f"raw embedder {fmt(m.get('embed_chunks_per_s'), 'chunks/s')} (median of the "
            f"per-part ratios {fmt(m.get('index_vs_embed_ratio_median'), '', 2)})",
            ratio("index_chunks_per_s", "embed_chunks_per_s"),
        ),
        (
            "indexing throughput, all vectors cached (pipeline alone): small / large index",
            f"{fmt(m.get('index_chunks_per_s_cached'), '', 0)} / "
            f"{fmt(m.get('large_sync_chunks_per_s'), 'chunks/s', 0)}",
            "large: reused from an earlier run" if m.get("large_reused") else "",
            "",
        ),
        (
            f"no-op resync, {fmt(m.get('noop_files'), '', 0)} unchanged files",
            fmt(m.get("noop_resync_10k_s"), "s", 3),
            f"first call on a new engine {fmt(m.get('noop_resync_first_s'), 's', 3)}",
            "",
        ),
        (
            "save to searchable (median / max)",
            f"{fmt(m.get('save_to_searchable_s'), 's', 2)} / "
            f"{fmt(m.get('save_to_searchable_max_s'), 's', 2)}",
            "debounce 1.5 s",
            "",
        ),
        (
            "transcript append, 10 KB file",
            fmt(m.get("transcript_append_ms_10kb"), "ms"),
            f"unchanged sync {fmt(m.get('transcript_unchanged_sync_ms_10kb'), 'ms')}",
            "",
        ),
        (
            "transcript append, 10 MB file",
            fmt(m.get("transcript_append_ms_10mb"), "ms"),
            f"unchanged sync {fmt(m.get('transcript_unchanged_sync_ms_10mb'), 'ms')}",
            "",
        ),
        (
            f"daemon RSS idle ({small} chunks / {large} chunks)",
            f"{fmt(m.get('rss_idle_mb'), 'MB', 0)} / {fmt(m.get('rss_idle_mb_100k'), 'MB', 0)}",
            f"anonymous {fmt(m.get('rss_idle_anon_mb'), 'MB', 0)} / "
            f"{fmt(m.get('rss_idle_anon_mb_100k'), 'MB', 0)}; file-backed (model, mmap'd "
            f"index) {fmt(m.get('rss_idle_file_mb'), 'MB', 0)} / "
            f"{fmt(m.get('rss_idle_file_mb_100k'), 'MB', 0)}",
            "",
        ),
        (
            "daemon RSS peak while indexing (VmHWM)",
            fmt(m.get("rss_indexing_mb"), "MB", 0),
            f"daemon's own rate {fmt(m.get('daemon_index_chunks_per_s'), 'chunks/s')}",
            "",
        ),
        (
            "client import",
            fmt(m.get("client_import_ms"), "ms", 1),
            f"-X importtime {fmt(m.get('client_import_importtime_ms'), 'ms', 1)}; bare "
            f"interpreter {fmt(m.get('python_startup_ms'), 'ms', 1)}; heavy modules "
            f"imported: {m.get('client_heavy_imports', '–')}",
            "",
        ),
        (
            "`recalld search <query>` through a running daemon, wall p50",
            fmt(m.get("cli_search_ms"), "ms", 1),
            f"bare `python -c pass` {fmt(m.get('bare_python_ms'), 'ms', 1)}; CPU time "
            f"{fmt(m.get('cli_search_cpu_ms'), 'ms', 1)} vs "
            f"{fmt(m.get('bare_python_cpu_ms'), 'ms', 1)}; heavy modules "
            f"imported: {m.get('cli_search_heavy_imports', '–')}",
            ratio("cli_search_ms", "bare_python_ms"),
        ),
        (
            "status round trip p50 / p95",
            f"{fmt(m.get('status_rtt_p50_ms'), 'ms', 3)} / "
            f"{fmt(m.get('status_rtt_p95_ms'), 'ms', 3)}",
            f"hello p50 {fmt(m.get('hello_rtt_p50_ms'), 'ms', 3)}",
            ratio("status_rtt_p50_ms", "hello_rtt_p50_ms"),
        ),
    ]


def markdown(sheet: Sheet, meta: dict[str, Any]) -> str:
    """The whole BENCHMARKS.md."""
    m = sheet.metrics
    mach = meta["machine"]
    out = [
        "# recalld benchmarks",
        "",
        "Written by `make bench` (`bench/run.py`); do not edit by hand. Every figure below was "
        "measured in the same run, next to its reference, on this machine:",
        "",
        f"- machine: {mach['cpu']}, {mach['cores']} cores, {mach['ram_gb']} GB RAM, "
        f"{mach['os']}, Python {mach['python']}",
        f"- load average at start / end: {mach['loadavg']} / {meta.get('loadavg_end')} (the cores "
        "are shared with other work, so absolute times wobble; ratios are measured side by side)",
        f"- date: {m['date']}; commit: `{m['commit']}` (the working tree as of the start was "
        f"copied and measured: source hash `{m.get('source_hash')}`); run: {meta['run']} "
        f"({meta['wall_s']:.0f} s wall)",
        *_updates_md(meta),
        "",
        "## Targets",
        "",
        "| target | measured | limit | verdict | by how much |",
        "|---|---|---|---|---|",
    ]
    for t in TARGETS:
        verdict, how = t.verdict(m)
        limit = f"{'<=' if t.at_most else '>='} {t.limit:g} {t.unit}".strip()
        out.append(f"| {t.what} | {fmt(t.value(m), t.unit, 3)} | {limit} | {verdict} | {how} |")
    bounds = _bounds(sheet)
    if bounds:
        out += ["", "### What bounds the misses (measured in this run)", "", *bounds]
    out += [
        "",
        "## Speed",
        "",
        "| measurement | recalld | reference, same run | ratio |",
        "|---|---|---|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _speed_rows(m)]
    out += ["", "## Quality", ""]
    out += _quality_md(sheet)
    out += _ablation_md(sheet)
    out += _needles_md(sheet)
    out += ["", "## Method", ""]
    out += [f"- **{k}**: {v}" for k, v in sheet.notes.items()]
    out += ["", *_corpus_md(m)]
    for name, text in sheet.tables.items():
        if name.startswith("profile_") or (name.endswith("_ms") and isinstance(text, dict)):
            out += ["", f"### {name}", "", "```", str(text).rstrip(), "```"]
    if sheet.errors:
        out += ["", "## Errors in this run", ""]
        out += [f"- {k}: {v}" for k, v in sheet.errors.items()]
    out += ["", "Stage times (s): " + ", ".join(f"{k} {v}" for k, v in meta["stages"].items()), ""]
    return "\n".join(out)


def _updates_md(meta: dict[str, Any]) -> list[str]:
    """Header lines for parts re-measured after the full run (``bench/run.py --update``)."""
    return [
        f"- re-measured after it, replacing its figures of those parts: {', '.join(u['parts'])} "
        f"on {u['date']} at commit `{u['commit']}` (source hash `{u['source_hash']}`; load "
        f"average at start / end {u['loadavg'][0]} / {u['loadavg'][1]})"
        for u in meta.get("updates") or []
    ]


def _blas_gap(m: dict[str, Any]) -> str:
    """Socket + client overhead of the default daemon vs the one-BLAS-thread one."""
    vals = [
        _num(m.get(k))
        for k in (
            "search_p50_ms_100k",
            "search_server_p50_ms_100k",
            "search_blas1_p50_ms_100k",
            "search_blas1_server_p50_ms_100k",
        )
    ]
    if any(v is None for v in vals):
        return ""
    a, b, c, d = (float(v or 0) for v in vals)
    return (
        (
            f" Outside run_search the default daemon spent {a - b:.1f} ms, the one-thread one "
            f"{c - d:.1f} ms (OpenBLAS workers keep spinning after a call and hold the two cores "
            "that the reply then waits for)."
        )
        if (a - b) - (c - d) > 2
        else ""
    )


def _spy_top(sheet: Sheet, n: int = 4) -> str:
    """The top leaf frames of the daemon's py-spy profile, as a sentence (or nothing)."""
    text = sheet.tables.get("profile_daemon_search_100k")
    if not text:
        return ""
    lines = [ln.strip() for ln in str(text).splitlines()[1 : n + 1]]
    out = " py-spy on the daemon, top leaf frames of a search: " + "; ".join(lines) + "."
    if "pread64" in str(text):
        cache, mmap = sheet.metrics.get("reader_cache_size"), sheet.metrics.get("reader_mmap_size")
        out += (
            " `pread64` in the handler thread is SQLite reading FTS5 and chunk pages from the "
            f"OS on each query (the read connections ran with cache_size {cache} and mmap_size "
            f"{mmap}; the index file is {fmt(sheet.metrics.get('large_index_mb'), 'MB', 0)})."
        )
    return out


def _missed(key: str, m: dict[str, Any]) -> bool:
    return any(t.key == key and t.verdict(m)[0] == "MISS" for t in TARGETS)


def _bounds(sheet: Sheet) -> list[str]:
    """One data-backed bullet per missed target (profiles are printed further down)."""
    m = sheet.metrics
    out = []
    emb = _num(m.get("query_embed_p50_ms_100k"))
    scan = _num(m.get("numpy_p50_ms_100k"))
    fts = _num(m.get("fts_p50_ms_100k"))
    wall = _num(m.get("search_p50_ms_100k"))
    server = _num(m.get("search_server_p50_ms_100k"))
    if (
        _missed("search_p50_ms_100k", m)
        and emb is not None
        and scan is not None
        and fts is not None
        and wall is not None
        and server is not None
    ):
        floor = max(emb + scan, fts)
        out.append(
            f"- **search at {fmt(m.get('large_index_chunks'), '', 0)} chunks**: the parts "
            f"measured in the same rounds are query embedding {emb:.1f} ms, the float32 scan "
            f"of the matrix {scan:.1f} ms (numpy, one BLAS thread; "
            f"{fmt(m.get('numpy_scan_gb_per_s'), 'GB/s')} of memory traffic) and FTS5 "
            f"{fts:.1f} ms; the vector channel (embed, then scan) runs beside the keyword "
            f"channel, so the floor of this design is about {floor:.1f} ms before fusion and "
            f"row fetches. The daemon took {server:.1f} ms server-side and {wall:.1f} ms "
            f"through the socket ({wall - server:.1f} ms transport and client). The same "
            "daemon with OPENBLAS_NUM_THREADS=1 answered in "
            f"{fmt(m.get('search_blas1_p50_ms_100k'), 'ms')} in the same rounds: on two "
            "shared cores OpenBLAS's worker hand-off (`exec_blas`) can cost more than the scan. "
            "The scan itself is memory-bound: an int8 or float16 matrix would cut its "
            "4-byte-per-dimension traffic by 4x or 2x." + _blas_gap(m) + _spy_top(sheet)
        )
    if _missed("status_rtt_p50_ms", m):
        hello = m.get("hello_rtt_p50_ms")
        own = (
            f"{float(m['status_rtt_p50_ms']) - float(hello):.3f} ms"
            if isinstance(hello, int | float)
            else "n/a"
        )
        out.append(
            f"- **status round trip**: `hello` takes {fmt(hello, 'ms', 3)} on the same "
            f"connection (the transport floor of this host in this run), so {own} is status's "
            "own work: a hand-off to a worker thread and Python building the answer (row "
            "counts and index facts are kept until the next commit); see profile_status."
        )
    for name, metric in (("locomo", "recall@10"), ("scifact-train", "ndcg@10")):
        rows = sheet.tables.get("quality", {}).get(name)
        if rows and _missed(f"q_{name.split('-')[0]}", m):
            out.append(
                f"- **{name}**: hybrid {metric} {rows['hybrid'][metric]:.3f} vs keyword "
                f"{rows['keyword'][metric]:.3f} and vector {rows['vector'][metric]:.3f} (rrf "
                f"{rows['rrf'][metric]:.3f}): a retrieval-quality gap, not a speed bound; the "
                "fusion weights and the keyword query are what decide it."
            )
    if _missed("quality_tldr_hybrid_hit@1", m):
        rows = sheet.tables.get("quality", {}).get("tldr")
        if rows:
            out.append(
                f"- **tldr hit@1**: hybrid {rows['hybrid']['hit@1']:.3f}, keyword "
                f"{rows['keyword']['hit@1']:.3f}, vector {rows['vector']['hit@1']:.3f}: the "
                "vector channel's weight pulls some exact command-name hits off rank 1."
            )
    if _missed("rss_idle_mb", m):
        out.append(
            f"- **daemon RSS**: of {fmt(m.get('rss_idle_mb'), 'MB', 0)} resident, "
            f"{fmt(m.get('rss_idle_anon_mb'), 'MB', 0)} is the process's own (anonymous) memory "
            f"and {fmt(m.get('rss_idle_file_mb'), 'MB', 0)} is file-backed: the model file and "
            "the pages of the index that SQLite has memory-mapped (page cache the kernel can "
            "drop, but VmRSS counts it)."
        )
    if _missed("client_import_ms", m):
        out.append(
            f"- **client import**: `python -X importtime` puts `recalld_client` at "
            f"{fmt(m.get('client_import_importtime_ms'), 'ms', 1)}; the rest of the "
            "subprocess difference is interpreter start-up / teardown noise on the loaded cores "
            f"(bare interpreter {fmt(m.get('python_startup_ms'), 'ms', 1)})."
        )
    if _missed("noop_resync_10k_s", m):
        out.append(
            "- **no-op resync**: see profile_noop_resync below (sampled during the timed call)."
        )
    if _missed("index_vs_embed_ratio", m):
        out.append("- **indexing throughput**: see profile_index_pipeline below.")
    if _missed("vector_scan_vs_numpy", m):
        out.append("- **vector scan**: see profile_search_100k_inprocess below.")
    return out


def _corpus_md(m: dict[str, Any]) -> list[str]:
    return [
        "### What is real and what is derived",
        "",
        "- All text comes from `../shared/bench` (tldr pages, SciFact abstracts, LoCoMo "
        "conversations, spotter Claude Code transcripts); nothing is word salad.",
        f"- The {fmt(m.get('small_index_chunks'), '', 0)}-chunk index, the no-op folder and the "
        "indexing-throughput corpora are real files indexed by recalld's own `Engine.sync()`; "
        "every vector in them is a real embedding by the local MiniLM int8 model (computed once "
        "and kept in `bench/out/cache/embeddings.sqlite`, so reruns do not embed again; the "
        "throughput and RSS-while-indexing runs start from an empty cache and embed everything).",
        f"- The {fmt(m.get('large_index_chunks'), '', 0)}-chunk index is "
        f"{fmt(m.get('large_index_files'), '', 0)} Markdown files, each "
        f"{m.get('large_files_per_bundle', '–')} real files of the pool joined by a blank line "
        "(few, large files: the start-up reconcile of this tree is quadratic in the file count, "
        "see the no-op resync): first every real file of the three sets once, unchanged, then "
        f"{fmt(m.get('large_varied_files'), '', 0)} files of varied copies (names, months, "
        "weekdays, numbers and tldr placeholders changed), all chunked by recalld's chunker. "
        f"{fmt(m.get('large_real_text_chunks'), '', 0)} chunks have a text identical to a real "
        "chunk and carry its real vector (as the embedding cache would give it); "
        f"{fmt(m.get('large_derived_vector_chunks'), '', 0)} "
        f"({fmt(m.get('large_derived_in_unvaried_files'), '', 0)} of them where two unchanged "
        "files meet) have **derived vectors**: the line-overlap-weighted mean of the real vectors "
        "of the chunks they were made from plus Gaussian noise (sigma "
        f"{fmt(m.get('large_noise_sigma'), '', 3)}), scaled so that the cosine to that mean equals "
        f"the median cosine ({fmt(m.get('large_noise_calibration_cos'), '', 3)}) measured in "
        "this run between real embeddings of varied chunks and that mean. Embedding them for "
        "real would take hours at this machine's rate, far over the bench's time budget; what "
        "is measured at this size (scan latency, recall against exact search) depends on the "
        "matrix size, not on the exact vectors.",
        "- The large index is built without the embedder: its files are written, every vector "
        "(real or derived) is put in the home's embedding cache by text hash with "
        "`Store.put_cache`, and recalld's own `Engine.sync()` then indexes the folder (chunks, "
        "FTS5 rows, vec0 rows) exactly as for a user, finding every vector in the cache. It is "
        "reused by later runs while recalld's chunker, indexer, store, schema and the bench's "
        f"build code are unchanged (reused this run: {m.get('large_reused', '–')}).",
    ]


def _ablation_md(sheet: Sheet) -> list[str]:
    results = sheet.tables.get("ablation")
    if not results:
        return []
    from bench.ablation import markdown

    out = [
        "",
        "## Ablation: retrieval steps beyond the anchor",
        "",
        "`bench/ablation.py`: `run_eval` in hybrid mode, k = 10, min score 0, on each set. "
        "`anchor` = OpenClaw's fusion (raw scores, 0.7 vector / 0.3 keyword, no title weight); "
        "`baseline` = min-max 0.2 / 0.8 with the title column and every step below off; `+step` "
        "= the baseline with that one step on; `all (defaults)` = the shipped config. A step is "
        "on by default only where it helped and hurt no set by more than 0.005 "
        "(docs/DECISIONS.md). `partial-ids` = partial-identifier queries built from the real "
        "transcripts (`bench/partial_ids.py`).",
    ]
    if sheet.tables.get("ablation_reused"):
        out += ["", "Not rerun in this run: the last results from bench/out/ablation.json."]
    out += [markdown(results).rstrip()]
    from bench.ablation import decisions_markdown

    return [
        *out,
        "",
        "## Leave one set out: the default of each lever",
        "",
        "Issue 17's rule (`bench/loo.py`): a setting is the default only if, for each set, it is "
        "the best or within 0.005 of the best when that set is left out of the choice. A set's "
        "score is the mean of recall@10, recall@4kc, hit@1, MRR@10 and nDCG@10; `-lever` = the "
        "defaults with that lever off, `+lever` = with it on. Chunking levers (front matter, "
        "windows, message overlap) change only the notes they apply to, so elsewhere they tie.",
        decisions_markdown(results).rstrip(),
    ]


def _needles_md(sheet: Sheet) -> list[str]:
    result = sheet.tables.get("transcript_needles")
    if not result:
        return []
    from bench.transcript_needles import markdown as needles_table

    out = [
        "",
        "## Transcript needles",
        "",
        f"`bench/transcript_needles.py` (issue 13): {result['queries']} exact identifiers cut from "
        "the decoded text of every JSONL line of `../shared/bench/transcripts` (messages, tool "
        "inputs, tool outputs; thinking left out), each found in one session only (subagent files "
        "count with their session; case-blind); sampled with a fixed seed, balanced over shape "
        "and location, at most 2 first seen on one line. Relevant rows: every line of that "
        "session holding the identifier. `run_eval`, k = 10, min score 0, default config; "
        "keyword = no embedder. Target: hit@1 >= 0.90 and hit@10 >= 0.98 overall.",
    ]
    if result.get("reused"):
        out += ["", "Not rerun in this run: the last results from bench/out/transcript-needles."]
    return [*out, "", *needles_table(result)]


def _quality_md(sheet: Sheet) -> list[str]:
    rows = sheet.tables.get("quality")
    if not rows:
        return ["Not run (`--skip-quality`, and no earlier full quality run in bench/out)."]
    meta = sheet.tables.get("quality_meta", {})
    out = []
    if meta.get("reused"):
        out += [
            f"Not rerun in this run (`--skip-quality`): the last full results, from "
            f"{meta.get('date')} at commit `{meta.get('commit')}`.",
            "",
        ]
    limit = meta.get("limit")
    out += [
        "`run_eval` (what `recalld eval` runs) in-process on each set, k = 10, min score 0, "
        f"default config ({_fusion_note()}; `rrf` = search.fusion rrf). No reranker is "
        "configured, so there is no rerank row. LoCoMo's overall excludes the adversarial tag "
        "(shown apart)." + (f" Only the first {limit} queries of each set." if limit else ""),
        "",
        "| set | mode | queries | " + " | ".join(METRICS) + " | p50 ms |",
        "|---|---|---|" + "---|" * len(METRICS) + "---|",
    ]
    for name, modes in rows.items():
        best = {met: max(r[met] for r in modes.values()) for met in METRICS}
        for mode in MODES:
            r = modes.get(mode)
            if r is None:
                continue
            cells = [
                f"**{r[met]:.3f}**" if r[met] == best[met] else f"{r[met]:.3f}" for met in METRICS
            ]
            out.append(
                f"| {name} | {mode} | {r['queries']} | " + " | ".join(cells) + f" | {r['p50_ms']} |"
            )
        adv = {mode: r["adversarial"] for mode, r in modes.items() if "adversarial" in r}
        for mode, a in adv.items():
            out.append(
                f"| {name} (adversarial) | {mode} | | "
                + " | ".join(f"{a[met]:.3f}" for met in METRICS)
                + " | |"
            )
    return out


def write(sheet: Sheet, meta: dict[str, Any], md_path: Path, json_path: Path) -> None:
    """Write both files."""
    m = sheet.metrics
    data: dict[str, Any] = {k: m.get(k) for k in REQUIRED}
    data.update({k: v for k, v in m.items() if k not in data})
    data["machine"] = meta["machine"]
    data["run"] = meta["run"]
    data["wall_s"] = round(meta["wall_s"], 1)
    data["targets"] = {
        t.key: {
            "what": t.what,
            "value": t.value(m),
            "limit": t.limit,
            "at_most": t.at_most,
            "verdict": t.verdict(m)[0],
        }
        for t in TARGETS
    }
    if "quality" in sheet.tables:
        data["quality"] = sheet.tables["quality"]
        data["quality_meta"] = sheet.tables.get("quality_meta")
    if "ablation" in sheet.tables:
        data["ablation"] = sheet.tables["ablation"]
    if "transcript_needles" in sheet.tables:
        data["transcript_needles"] = sheet.tables["transcript_needles"]
    data["notes"] = sheet.notes
    if sheet.errors:
        data["errors"] = sheet.errors
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(markdown(sheet, meta), encoding="utf-8")


def _fusion_note() -> str:
    """The fusion defaults, read from recalld's settings table (not hard-coded here)."""
    from recalld.config import SETTINGS

    d = {x.key: x.default for x in SETTINGS}
    shape = (
        f"; query shape on: vector weight {d['search.question_vector_weight']} for questions, "
        f"{d['search.statement_vector_weight']} for statements, "
        f"{d['search.identifier_vector_weight']} for identifiers"
        + (
            f", {d['search.long_query_vector_weight']} for long prose queries "
            f"({d['search.long_query_words']}+ words, no identifier)"
            if d["search.long_query_vector_weight"]  # 0: off, their kind's weight
            else ""
        )
        if d["search.query_shape"]
        else ""
    )
    return (
        f"weighted fusion {d['search.vector_weight']} vector / {d['search.text_weight']} keyword, "
        f"{d['search.score_norm']} per channel, title weight {d['search.context_weight']}{shape}"
        + (
            f"; a short note's chunks {d['search.note_units']} of the way to its best"
            if d["search.note_units"]
            else ""
        )
        + (
            f"; questions that name nothing {d['search.unnamed_question_vector_weight']}"
            if d["search.unnamed_question_vector_weight"]
            else ""
        )
        + (
            f"; a channel whose best hit stands clear has its weight raised up to "
            f"{1 + d['search.gap_confidence']:g}x (score-gap confidence)"
            if d["search.gap_confidence"]
            else ""
        )
    )
