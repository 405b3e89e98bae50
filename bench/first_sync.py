"""A new user's first sync: a fresh folder of 10k real notes, a daemon started on it.

Measured from the daemon's start: when every file is searchable by keyword (``status`` counts
every file and a keyword search finds a word of the last file written), and when every vector
is in (``vectors_pending`` 0). The reference is the raw embedder on the same chunk texts
(grouped 256 per call as the indexer groups them), half timed right before the daemon and half
right after: ``first_sync_vs_embed_ratio`` = (chunks / seconds to all vectors) / raw chunks/s.

``first_sync`` is the ``first_sync`` part of ``make bench``; alone:
``.venv/bin/python bench/first_sync.py --files 1000``.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import corpora, homes
from bench.common import OUT, log

FILES = 10_000
EMBED_GROUP = 256


def _last_word(doc: corpora.Doc) -> str:
    """A word of the file that few others have (its longest)."""
    words = [w.strip(".,;:!?()[]*#\"'") for w in doc.text.split()]
    return max((w for w in words if w.isalpha()), key=len, default="")


def _raw(embedder: Any, texts: list[str]) -> tuple[int, float]:
    """LocalEmbedder.embed() of ``texts``, EMBED_GROUP per call: (chunks, seconds)."""
    t = time.perf_counter()
    for i in range(0, len(texts), EMBED_GROUP):
        embedder.embed(texts[i : i + EMBED_GROUP])
    return len(texts), time.perf_counter() - t


def fts_floor(folder: Path, db: Path) -> float:
    """Seconds to read every file under ``folder`` and insert them into a plain FTS5 table
    (default tokenizer, one transaction): what keyword-first indexing cannot go below."""
    db.unlink(missing_ok=True)
    t = time.perf_counter()
    conn = sqlite3.connect(db)
    try:
        conn.execute("CREATE VIRTUAL TABLE docs USING fts5(path, body)")
        with conn:
            conn.executemany(
                "INSERT INTO docs(path, body) VALUES (?, ?)",
                ((str(f), f.read_text(encoding="utf-8")) for f in folder.rglob("*.md")),
            )
    finally:
        conn.close()
    took = time.perf_counter() - t
    db.unlink(missing_ok=True)
    return took


def run(embedder: Any, pool: list[corpora.Doc], files: int, home: Path) -> dict[str, float]:
    """Index ``files`` real files with a fresh daemon; return the timings."""
    from bench.daemonproc import Daemon
    from recalld.index.store import Store

    docs = corpora.interleave([d for d in pool if d.chunks], "first-sync")[:files]
    homes.wipe(home)
    homes.home_config(home)
    homes.write_docs(home / "memory", docs)
    probe = _last_word(docs[-1])
    out: dict[str, float] = {"files": len(docs)}
    # The raw reference embeds the same chunk texts (the pool is chunked by recalld's chunker),
    # half right before the daemon runs and half right after: drifting load cancels out.
    texts = list(dict.fromkeys(c.text for d in docs for c in d.chunks))
    raw_n, raw_s = _raw(embedder, texts[: len(texts) // 2])
    floor_db = home.parent / f"{home.name}-fts-floor.sqlite"
    floor_s = fts_floor(home / "memory", floor_db)  # once before the daemon, once after
    t0 = time.perf_counter()
    d = Daemon(home).start()
    try:
        with d.client(timeout=600) as c:
            while True:
                st = c.status()
                done = (st["counts"].get("memory_files") or 0) >= len(docs)
                if done and c.search(probe, mode="keyword", max_results=50)["results"]:
                    break
                time.sleep(0.1)
            out["keyword_searchable_s"] = time.perf_counter() - t0
            # A note still held as one keyword row (recalld.ingest.first_pass) counts as a
            # vector due: 0 pending means every note is chunked and every vector is in.
            while (st := c.status())["vectors"]["vectors_pending"] > 0:
                time.sleep(0.2)
            out["vectors_complete_s"] = time.perf_counter() - t0
            out["chunks"] = float(st["counts"]["chunks"])
    finally:
        d.stop()
    n2, s2 = _raw(embedder, texts[len(texts) // 2 :])
    out["fts_floor_s"] = (floor_s + fts_floor(home / "memory", floor_db)) / 2
    with Store(home / "index.sqlite", readonly=True) as store:
        row = store.conn.execute("SELECT count(*) FROM chunks WHERE embed = 1").fetchone()
    out["raw_embed_chunks_per_s"] = (raw_n + n2) / (raw_s + s2)
    out["first_sync_chunks_per_s"] = int(row[0] if row else 0) / out["vectors_complete_s"]
    out["first_sync_vs_embed_ratio"] = (
        out["first_sync_chunks_per_s"] / out["raw_embed_chunks_per_s"]
    )
    return out


def first_sync(ctx: Any) -> None:
    """The ``first_sync`` part: 10k fresh files (fewer with --quick)."""
    from bench.speed_ctx import SPEED

    files = FILES if ctx.sizes.name == "full" else 500
    got = run(ctx.embedder, list(ctx.pool), files, SPEED / "first-sync")
    s = ctx.sheet
    s.put("keyword_searchable_s_10k_files", got["keyword_searchable_s"], 1)
    s.put("fts_floor_s_10k_files", got["fts_floor_s"], 2)
    s.put(
        "keyword_searchable_over_fts_floor_10k_files",
        got["keyword_searchable_s"] / got["fts_floor_s"],
        2,
    )
    s.put("vectors_complete_s_10k_files", got["vectors_complete_s"], 1)
    s.put("first_sync_chunks", got["chunks"])
    s.put("first_sync_vs_embed_ratio", got["first_sync_vs_embed_ratio"], 3)
    s.note(
        "keyword_searchable_s_10k_files",
        f"{int(got['files'])} real notes (tldr/scifact/locomo) written to a fresh home, then a "
        "daemon started: seconds until status counts every file and a keyword search finds a "
        "word of the last one; vectors_complete_s until vectors_pending is 0; the ratio is "
        "its chunks/s against LocalEmbedder.embed() of the same texts, 256 per call, half "
        "timed before the daemon, half after",
    )
    s.note(
        "fts_floor_s_10k_files",
        "the same files read and inserted into a plain FTS5 table (default tokenizer, one "
        "transaction, a fresh database), once right before the daemon and once right after, "
        "the mean: keyword_searchable_over_fts_floor_10k_files is the daemon's time over it",
    )


def main(argv: list[str] | None = None) -> int:
    """Run alone: one fresh folder, the timings printed."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--files", type=int, default=1000)
    args = p.parse_args(argv)
    from recalld.embedding.local import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.warm()
    pool = corpora.load_pool({"tldr": 3000, "scifact-train": 2000, "locomo": None})
    got = run(embedder, pool, args.files, OUT / "first-sync")
    for key, value in got.items():
        log(f"{key}: {value:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
