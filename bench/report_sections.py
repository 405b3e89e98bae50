"""The sections of BENCHMARKS.md besides its target and speed tables: what bounds each missed
target, the quality, ablation and transcript-needle tables, and what is real and what is derived
in the corpora."""

from __future__ import annotations

from typing import Any

from bench.common import Sheet
from bench.quality import METRICS, MODES
from bench.targets import fmt, missed, num


def _blas_gap(m: dict[str, Any]) -> str:
    """Socket + client overhead of the default daemon vs the one-BLAS-thread one."""
    vals = [
        num(m.get(k))
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


def bounds(sheet: Sheet) -> list[str]:
    """One data-backed bullet per missed target (profiles are printed further down)."""
    return [
        *_search_bound(sheet),
        *_status_bound(sheet.metrics),
        *_quality_bounds(sheet),
        *_resource_bounds(sheet.metrics),
    ]


def _search_bound(sheet: Sheet) -> list[str]:
    """The bullet of a missed search at the large index: its parts, measured in the same rounds."""
    m = sheet.metrics
    out = []
    emb = num(m.get("query_embed_p50_ms_100k"))
    scan = num(m.get("numpy_p50_ms_100k"))
    fts = num(m.get("fts_p50_ms_100k"))
    wall = num(m.get("search_p50_ms_100k"))
    server = num(m.get("search_server_p50_ms_100k"))
    if (
        missed("search_p50_ms_100k", m)
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
    return out


def _status_bound(m: dict[str, Any]) -> list[str]:
    """The bullet of a missed status round trip: the transport floor beside it."""
    out = []
    if missed("status_rtt_p50_ms", m):
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
    return out


def _quality_bounds(sheet: Sheet) -> list[str]:
    """The bullets of missed quality targets: each mode's figure beside hybrid's."""
    m = sheet.metrics
    out = []
    for name, metric in (("locomo", "recall@10"), ("scifact-train", "ndcg@10")):
        rows = sheet.tables.get("quality", {}).get(name)
        if rows and missed(f"q_{name.split('-')[0]}", m):
            out.append(
                f"- **{name}**: hybrid {metric} {rows['hybrid'][metric]:.3f} vs keyword "
                f"{rows['keyword'][metric]:.3f} and vector {rows['vector'][metric]:.3f} (rrf "
                f"{rows['rrf'][metric]:.3f}): a retrieval-quality gap, not a speed bound; the "
                "fusion weights and the keyword query are what decide it."
            )
    if missed("quality_tldr_hybrid_hit@1", m):
        rows = sheet.tables.get("quality", {}).get("tldr")
        if rows:
            out.append(
                f"- **tldr hit@1**: hybrid {rows['hybrid']['hit@1']:.3f}, keyword "
                f"{rows['keyword']['hit@1']:.3f}, vector {rows['vector']['hit@1']:.3f}: the "
                "vector channel's weight pulls some exact command-name hits off rank 1."
            )
    return out


def _resource_bounds(m: dict[str, Any]) -> list[str]:
    """The bullets of missed memory, import, resync, indexing and scan targets."""
    out = []
    if missed("rss_idle_mb", m):
        out.append(
            f"- **daemon RSS**: of {fmt(m.get('rss_idle_mb'), 'MB', 0)} resident, "
            f"{fmt(m.get('rss_idle_anon_mb'), 'MB', 0)} is the process's own (anonymous) memory "
            f"and {fmt(m.get('rss_idle_file_mb'), 'MB', 0)} is file-backed: the model file and "
            "the pages of the index that SQLite has memory-mapped (page cache the kernel can "
            "drop, but VmRSS counts it)."
        )
    if missed("client_import_ms", m):
        out.append(
            f"- **client import**: `python -X importtime` puts `recalld_client` at "
            f"{fmt(m.get('client_import_importtime_ms'), 'ms', 1)}; the rest of the "
            "subprocess difference is interpreter start-up / teardown noise on the loaded cores "
            f"(bare interpreter {fmt(m.get('python_startup_ms'), 'ms', 1)})."
        )
    if missed("noop_resync_10k_s", m):
        out.append(
            "- **no-op resync**: see profile_noop_resync below (sampled during the timed call)."
        )
    if missed("index_vs_embed_ratio", m):
        out.append("- **indexing throughput**: see profile_index_pipeline below.")
    if missed("vector_scan_vs_numpy", m):
        out.append("- **vector scan**: see profile_search_100k_inprocess below.")
    return out


def corpus_md(m: dict[str, Any]) -> list[str]:
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


def ablation_md(sheet: Sheet) -> list[str]:
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


def needles_md(sheet: Sheet) -> list[str]:
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


def quality_md(sheet: Sheet) -> list[str]:
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


def _fusion_note() -> str:
    """The fusion defaults, read from recalld's settings table (not hard-coded here)."""
    from recalld.config import SETTINGS

    d: dict[str, Any] = {x.key: x.default for x in SETTINGS}
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
