"""Indexing speed: a full sync of fresh real files against the raw embedder on the same chunks,
and a daemon's peak RSS while it indexes a fresh corpus."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from bench import corpora, homes
from bench.cache import EMBED_GROUP
from bench.common import median
from bench.corpora import Doc
from bench.daemonproc import Daemon
from bench.speed_ctx import SPEED, Ctx, profile_top
from recalld.embedding.local import LocalEmbedder

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
    config = homes.home_config(home, watch=False)
    engine = homes.engine_for(config, embedder)
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
    part_homes = [SPEED / f"fresh-{i}" for i in range(parts_n)]
    for home, part in zip(part_homes, parts, strict=True):
        homes.wipe(home)
        homes.home_config(home, watch=False)
        homes.write_docs(home / "memory", part)
    ctx.embedder.embed([c.text for d in warm for c in d.chunks])
    raw_n = pipe_n = embedded = 0
    raw_s = pipe_s = 0.0
    ratios = []
    for i, (home, part) in enumerate(zip(part_homes, parts, strict=True)):
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
    for home in part_homes:
        homes.wipe(home)
    if (pipe_n / pipe_s) / (raw_n / raw_s) < 0.85:
        _profile_pipeline(ctx, docs)


def _profile_pipeline(ctx: Ctx, used: Sequence[Doc]) -> None:
    """cProfile of one more fresh sync (other files) next to a raw embed of its chunks."""
    seen = {(d.set, d.rel) for d in used}
    rest = [d for d in corpora.interleave(ctx.pool, "profile") if (d.set, d.rel) not in seen]
    docs = corpora.take_chunks(rest, 160)
    home = SPEED / "fresh-profile"
    homes.wipe(home)
    homes.home_config(home, watch=False)
    homes.write_docs(home / "memory", docs)
    raw = _raw_embed(ctx.embedder, home, {f"{d.set}/{d.rel}": d for d in docs})
    box: list[tuple[int, int, float]] = []
    text = profile_top(lambda: box.append(_pipeline(ctx.embedder, home)), 25)
    n, _, secs = box[0]
    ctx.sheet.tables["profile_index_pipeline"] = (
        f"fresh sync of {n} chunks: {secs:.2f} s under cProfile; raw embed of the same chunks "
        f"{raw[1]:.2f} s\n{text}"
    )
    homes.wipe(home)


# RSS while indexing -------------------------------------------------------------------------------


def rss_indexing(ctx: Ctx) -> None:
    """A daemon indexing a fresh corpus (every chunk embedded): peak RSS (VmHWM)."""
    home = SPEED / "rss"
    homes.wipe(home)
    docs = corpora.take_chunks(corpora.interleave(ctx.pool, "rss"), ctx.sizes.rss_chunks)
    homes.home_config(home, watch=True)
    homes.write_docs(home / "memory", docs)
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
        homes.wipe(home)
