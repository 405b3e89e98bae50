"""``make bench``: recalld's speed and quality benchmarks, side by side with their references.

    .venv/bin/python bench/run.py                    # full run -> BENCHMARKS.md / BENCHMARKS.json
    .venv/bin/python bench/run.py --quick            # small sizes -> bench/out/BENCHMARKS.quick.*
    .venv/bin/python bench/run.py --skip-quality     # speed only (quality: last full results)
    .venv/bin/python bench/run.py --only large,noop  # some parts -> bench/out/BENCHMARKS.partial.*
    .venv/bin/python bench/run.py --only scale --update  # those parts -> BENCHMARKS.*, over the
                                                     # last full run (the header says so)

Parts: client_import, cli_start (bench/cli_start.py), throughput, rss_indexing, small, large,
noop, transcripts, quality, ablation, needles (bench/transcript_needles.py), chat
(bench/chat_mix.py), first_sync (bench/first_sync.py), scale (bench/scale.py: 100k and 1M
chunks), write_forget (bench/write_forget.py: remember to searchable, forget a session), shared
(bench/shared_store.py: the PostgreSQL store), busy (bench/busy_search.py: searches during a first
sync and a growing transcript, over the same daemon idle).
Corpora, homes and the embedding cache live under bench/out/ (gitignored).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _snapshot() -> tuple[Path, str]:
    """Copy recalld and recalld_client as they are now; this run imports only the copy.

    Other work goes on in the same tree: a chunker edited halfway through a run would make the
    daemons it starts disagree with the indexes it built. The daemons get the copy through
    PYTHONPATH (ahead of the editable installs). Returns the copy and a hash of its sources.
    """
    import atexit
    import compileall
    import hashlib
    import os
    import shutil
    import tempfile

    root = Path(__file__).resolve().parents[1]
    # A folder of this run's own: a second run (even one that only prints a usage error) must
    # not replace the code under the daemons of a run still going.
    snap = Path(tempfile.mkdtemp(prefix="recalld-bench-snapshot-"))
    atexit.register(shutil.rmtree, snap, ignore_errors=True)
    digest = hashlib.sha256()
    for src, name in ((root / "daemon", "recalld"), (root / "client", "recalld_client")):
        shutil.copytree(
            src / name,
            snap / src.name / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        for path in sorted((snap / src.name / name).rglob("*.py")):
            digest.update(path.read_bytes())
    # Byte-compiled, as pip leaves an installed package: with PYTHONDONTWRITEBYTECODE set (this
    # host sets it) nothing else writes the .pyc files, and every `recalld search` of cli_start
    # would compile the client and the CLI from source (~19 ms of CPU per call).
    compileall.compile_dir(snap, quiet=1, workers=1)
    paths = [str(snap / "daemon"), str(snap / "client")]
    sys.path[1:1] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [*paths, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return snap, digest.hexdigest()[:12]


SNAPSHOT, SOURCE_HASH = _snapshot()

from bench import (  # noqa: E402
    ablation,
    busy_search,
    chat_mix,
    cli_start,
    common,
    corpora,
    first_sync,
    quality,
    report,
    scale,
    sheet_restore,
    speed,
    speed_ctx,
    transcript_needles,
    write_forget,
)
from bench.cache import VectorCache  # noqa: E402
from bench.common import FULL, OUT, QUICK, ROOT, Sheet, Sizes, log, stage  # noqa: E402

FULL_SHEET = OUT / "full-sheet.json"  # the last full run, for --update

PARTS = (
    "client_import",
    "cli_start",
    "throughput",
    "rss_indexing",
    "small",
    "large",
    "noop",
    "transcripts",
    "quality",
    "ablation",
    "needles",
    "chat",
    "first_sync",
    "busy",
    "scale",
    "write_forget",
    "shared",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, to check the bench itself")
    p.add_argument("--skip-quality", action="store_true", help="no quality evals")
    p.add_argument("--only", default="", help=f"comma-separated parts of {', '.join(PARTS)}")
    p.add_argument("--rebuild", action="store_true", help="rebuild the reusable large/no-op homes")
    p.add_argument(
        "--update",
        action="store_true",
        help="with --only: put the parts measured now into BENCHMARKS.md/json over the last full "
        "run's figures (bench/out/full-sheet.json, else read back from BENCHMARKS.json/md); the "
        "header names the parts and their commit",
    )
    args = p.parse_args(argv)
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - set(PARTS)
    if unknown:
        p.error(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    if args.update and (not only or args.quick):
        p.error("--update takes --only (the parts to re-measure) and a full-size run")
    if args.update and not FULL_SHEET.exists() and not (ROOT / "BENCHMARKS.json").exists():
        p.error(f"--update needs a full run's {FULL_SHEET} or BENCHMARKS.*: run `make bench`")
    args.only_set = only or None
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the reports."""
    args = parse_args(argv)
    from recalld.embedding.local import LocalEmbedder

    started = time.perf_counter()
    sizes = QUICK if args.quick else FULL
    sheet = _new_sheet()
    meta: dict[str, Any] = {"machine": common.machine(), "run": sizes.name, "stages": {}}
    timings: dict[str, float] = {}
    only = args.only_set
    OUT.mkdir(parents=True, exist_ok=True)

    embedder = LocalEmbedder(batch_size=16, threads=0)  # the config defaults
    embedder.warm()
    cache = VectorCache(embedder)
    try:
        pool, real = _pool(sizes, sheet, cache, timings)
        ctx = speed_ctx.Ctx(sizes, sheet, embedder, cache, pool, real, args.rebuild)
        _speed_parts(ctx, only, timings)
        _quality_parts(ctx, only, timings, args.skip_quality)
        sheet.put("embedded_for_corpora", cache.embedded_now)
    finally:
        cache.close()

    meta["stages"] = timings
    meta["wall_s"] = time.perf_counter() - started
    meta["loadavg_end"] = common.machine()["loadavg"]
    return _write(args, sheet, meta)


def _new_sheet() -> Sheet:
    """A sheet with this run's commit, date and source hash; the snapshot must be what runs."""
    sheet = Sheet()
    sheet.put("commit", common.git_commit())
    sheet.put("date", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    sheet.put("source_hash", SOURCE_HASH)
    import recalld

    assert Path(recalld.__file__).resolve().is_relative_to(SNAPSHOT), recalld.__file__
    return sheet


def _pool(
    sizes: Sizes, sheet: Sheet, cache: VectorCache, timings: dict[str, float]
) -> tuple[list[corpora.Doc], dict[str, corpora.F32]]:
    """The real files every part draws on and their vectors (cached ones first)."""
    with stage("pool", timings):
        for name in corpora.SETS:
            cache.harvest(quality.home_of(name) / "index.sqlite")
        pool = corpora.load_pool(sizes.pool_limits)
        real = corpora.pool_vectors(pool, cache, "pool")
        sheet.put("pool_files", len(pool))
        sheet.put("pool_chunks", sum(len(d.chunks) for d in pool))
    return pool, real


def _speed_parts(ctx: speed_ctx.Ctx, only: set[str] | None, timings: dict[str, float]) -> None:
    """The speed parts, in order (``only``: those alone)."""
    sizes, sheet = ctx.sizes, ctx.sheet
    speed.run_all(ctx, only, timings)
    if only is None or "cli_start" in only:
        with stage("cli_start", timings):
            cli_start.run_part(sheet)
    issue16 = (
        ("chat", chat_mix.chat_index),
        ("first_sync", first_sync.first_sync),
        ("busy", busy_search.busy),  # issue 40: searches while the daemon works
    )
    speed.run_all(ctx, only, timings, steps=issue16)  # keyword first, the chat mix
    if only is None or "scale" in only:
        with stage("scale", timings):
            scale.run(ctx)
    if only is None or "write_forget" in only:
        with stage("write_forget", timings):
            write_forget.run(ctx)
    if only is None or "shared" in only:
        with stage("shared", timings):
            from bench import shared_store

            sizes_shared = (100_000, 1_000_000) if sizes.name == "full" else (5_000, 20_000)
            shared_store.run(sheet, *sizes_shared, min(sizes.queries, 200))


def _quality_parts(
    ctx: speed_ctx.Ctx, only: set[str] | None, timings: dict[str, float], skip: bool
) -> None:
    """Quality, ablation and transcript needles: measured, or the last full run's kept."""
    sizes, sheet = ctx.sizes, ctx.sheet
    if not skip and (only is None or "quality" in only):
        with stage("quality", timings):
            quality.run_quality(
                sizes,
                sheet,
                ctx.cache,
                ctx.pool,
                {"date": sheet.metrics["date"], "commit": sheet.metrics["commit"]},
            )
    elif only is None:
        quality.load_last(sheet)
    if not skip and (only is None or "ablation" in only):
        with stage("ablation", timings):
            sheet.tables["ablation"] = ablation.run_all(sizes.quality_limit)
    elif only is None:
        last = ablation.load_last()
        if last:
            sheet.tables["ablation"] = last
            sheet.tables["ablation_reused"] = True
    if not skip and (only is None or "needles" in only):
        with stage("needles", timings):
            sheet.tables["transcript_needles"] = transcript_needles.run()
    elif only is None:
        last = transcript_needles.load_last()
        if last:
            sheet.tables["transcript_needles"] = {**last, "reused": True}


def _write(args: argparse.Namespace, sheet: Sheet, meta: dict[str, Any]) -> int:
    """Write the report where this kind of run goes; 1 if any part failed."""
    only = args.only_set
    if args.update and only:
        sheet, meta = _update_full(sheet, meta, only)
    if args.quick or (only and not args.update):
        stem = "quick" if args.quick else "partial"
        md, js = OUT / f"BENCHMARKS.{stem}.md", OUT / f"BENCHMARKS.{stem}.json"
    else:
        md, js = ROOT / "BENCHMARKS.md", ROOT / "BENCHMARKS.json"
        sheet.dump(FULL_SHEET, meta)  # what a later --update starts from
    report.write(sheet, meta, md, js)
    sheet.dump(OUT / "last-sheet.json", meta)
    log(f"wrote {md} and {js} in {meta['wall_s']:.0f} s")
    return 1 if sheet.errors else 0


def _update_full(
    sheet: Sheet, meta: dict[str, Any], only: set[str]
) -> tuple[Sheet, dict[str, Any]]:
    """The last full run's sheet with this run's parts put over it (``--update``)."""
    if FULL_SHEET.exists():
        full, full_meta = Sheet.load(FULL_SHEET)
    else:  # a new machine: bench/out/ is not in git, the report files are
        full, full_meta = sheet_restore.restore(ROOT / "BENCHMARKS.json", ROOT / "BENCHMARKS.md")
    full.update(sheet, only)
    update = {
        "parts": sorted(only),
        "commit": sheet.metrics["commit"],
        "date": sheet.metrics["date"],
        "source_hash": sheet.metrics["source_hash"],
        "loadavg": [meta["machine"]["loadavg"], meta["loadavg_end"]],
    }
    return full, {
        **full_meta,
        "stages": {**full_meta.get("stages", {}), **meta["stages"]},
        "updates": [*full_meta.get("updates", []), update],
    }


if __name__ == "__main__":
    sys.exit(main())
