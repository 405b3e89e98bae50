"""The targets of the issues (:data:`TARGETS`: one limit on one measured key each, its verdict
and by how much), the keys BENCHMARKS.json always carries (:data:`REQUIRED`) and the format of a
table cell."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.quality import PRIMARY

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


def num(value: Any) -> float | None:
    """A finite number as a float, else None (bools, text, NaN and infinities)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(float(value)) else None


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    """A metric for a table cell ("–" when it was not measured)."""
    if value is None:
        return "–"
    n = num(value)
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
        v = num(self.value(m))
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
        hn, kn, vn = num(h), num(k), num(v)
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
    x, y = num(m.get(a)), num(m.get(b))
    return x / y if x is not None and y else None


def missed(key: str, m: dict[str, Any]) -> bool:
    """Whether the target on ``key`` was missed in this run."""
    return any(t.key == key and t.verdict(m)[0] == "MISS" for t in TARGETS)
