"""BENCHMARKS.md and BENCHMARKS.json from one run's sheet: the page's header, its target and
speed tables and the order of its sections (written by ``bench/report_sections.py``), and the
JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.common import Sheet
from bench.report_sections import ablation_md, bounds, corpus_md, needles_md, quality_md
from bench.targets import REQUIRED, TARGETS, fmt, num

Row = tuple[str, str, str, str]  # measurement, recalld, reference, ratio


def _ratio(m: dict[str, Any], a: str, b: str) -> str:
    """Metric ``a`` over metric ``b`` as ``1.23x``, or a dash when either is missing."""
    x, y = num(m.get(a)), num(m.get(b))
    return f"{x / y:.2f}x" if x is not None and y else "–"


def _speed_rows(m: dict[str, Any]) -> list[Row]:
    """The rows of the speed table, in the page's order."""
    small = fmt(m.get("small_index_chunks"), "", 0)
    large = fmt(m.get("large_index_chunks"), "", 0)
    return [
        *_search_rows(m, small, large),
        *_query_mode_rows(m),
        *_indexing_rows(m),
        *_process_rows(m, small, large),
    ]


def _search_rows(m: dict[str, Any], small: str, large: str) -> list[Row]:
    """Hybrid search at both sizes and the vector channel's parts beside their references."""
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
            _ratio(m, "vector_scan_p50_ms_100k", "numpy_p50_ms_100k"),
        ),
        (
            "sqlite-vec vec0 brute-force KNN p50 (k = 24)",
            fmt(m.get("sqlite_vec_p50_ms_100k"), "ms"),
            f"numpy {fmt(m.get('numpy_p50_ms_100k'), 'ms', 3)}",
            _ratio(m, "sqlite_vec_p50_ms_100k", "numpy_p50_ms_100k"),
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
    ]


def _query_mode_rows(m: dict[str, Any]) -> list[Row]:
    """Keyword-only, vector-only and filtered search, and searches per second under load."""
    return [
        (
            "keyword-only search p50, socket",
            fmt(m.get("keyword_search_p50_ms_100k"), "ms"),
            f"FTS5 query alone {fmt(m.get('fts_p50_ms_100k'), 'ms')}; ripgrep two terms "
            f"{fmt(m.get('ripgrep_p50_ms_100k'), 'ms')}",
            _ratio(m, "keyword_search_p50_ms_100k", "ripgrep_p50_ms_100k"),
        ),
        ("vector-only search p50, socket", fmt(m.get("vector_search_p50_ms_100k"), "ms"), "", ""),
        (
            "hybrid p50 with --since keeping "
            f"{fmt(num(m.get('filtered_share_100k')) and 100 * m['filtered_share_100k'], '%', 2)}"
            " of the chunks, socket",
            fmt(m.get("filtered_search_p50_ms_100k"), "ms"),
            f"unfiltered in the same rounds {fmt(m.get('unfiltered_search_p50_ms_100k'), 'ms')}; "
            f"{fmt(m.get('filtered_results_mean_100k'), '', 2)} results on average, "
            f"{m.get('filtered_hits_outside_100k')} dated before since",
            _ratio(m, "filtered_search_p50_ms_100k", "unfiltered_search_p50_ms_100k"),
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
            _ratio(m, "throughput_4_clients_100k", "throughput_1_clients_100k"),
        ),
    ]


def _indexing_rows(m: dict[str, Any]) -> list[Row]:
    """Indexing throughput, the no-op resync, save to searchable and transcript appends."""
    return [
        (
            "indexing throughput (fresh, every chunk embedded)",
            fmt(m.get("index_chunks_per_s"), "chunks/s"),
            f"raw embedder {fmt(m.get('embed_chunks_per_s'), 'chunks/s')} (median of the "
            f"per-part ratios {fmt(m.get('index_vs_embed_ratio_median'), '', 2)})",
            _ratio(m, "index_chunks_per_s", "embed_chunks_per_s"),
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
    ]


def _process_rows(m: dict[str, Any], small: str, large: str) -> list[Row]:
    """The daemon's memory, the client's import, the CLI's start-up and the status round trip."""
    return [
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
            _ratio(m, "cli_search_ms", "bare_python_ms"),
        ),
        (
            "status round trip p50 / p95",
            f"{fmt(m.get('status_rtt_p50_ms'), 'ms', 3)} / "
            f"{fmt(m.get('status_rtt_p95_ms'), 'ms', 3)}",
            f"hello p50 {fmt(m.get('hello_rtt_p50_ms'), 'ms', 3)}",
            _ratio(m, "status_rtt_p50_ms", "hello_rtt_p50_ms"),
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
    misses = bounds(sheet)
    if misses:
        out += ["", "### What bounds the misses (measured in this run)", "", *misses]
    out += [
        "",
        "## Speed",
        "",
        "| measurement | recalld | reference, same run | ratio |",
        "|---|---|---|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _speed_rows(m)]
    out += ["", "## Quality", ""]
    out += quality_md(sheet)
    out += ablation_md(sheet)
    out += needles_md(sheet)
    out += ["", "## Method", ""]
    out += [f"- **{k}**: {v}" for k, v in sheet.notes.items()]
    out += ["", *corpus_md(m)]
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
