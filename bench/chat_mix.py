"""A conversation-heavy 100k index (56 % of the chunks chat turns), beside today's mix.

Agent memory is mostly conversation: the same few names in every turn, "what", "did", "said".
On such an index FTS5 reads and scores long doclists, and the keyword channel, not the vector
scan, sets the hybrid latency (issue 16). The index is built like the large one
(:func:`bench.homes.large_home`: real files once, then varied copies, vectors from the
embedding cache) from a pool in which the locomo conversations are cycled until their chunks
are :data:`CHAT_SHARE` of the whole; queries are locomo's questions.

``chat_index`` is the ``chat`` part of ``make bench``. Run alone, this module builds a
keyword-only copy of the same mix (no vectors needed) and times the keyword channel in-process
under the settings of ``recalld.retrieval.common_terms`` (``--chunks``, ``--queries``)::

    .venv/bin/python bench/chat_mix.py --chunks 100000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench import corpora, homes, replicas
from bench.common import OUT, SHARED_BENCH, log, percentile

CHAT_SHARE = 0.56  # chunks that are chat turns (locomo conversations)


def chat_pool(pool: Sequence[corpora.Doc], share: float = CHAT_SHARE) -> list[corpora.Doc]:
    """The pool with the locomo files cycled (as numbered copies) until their chunks are about
    ``share`` of all chunks; the bundles vary each copy's names, dates and numbers."""
    chat = [d for d in pool if d.set == "locomo" and d.chunks]
    other = [d for d in pool if d.set != "locomo" and d.chunks]
    n_chat = sum(len(d.chunks) for d in chat)
    n_other = sum(len(d.chunks) for d in other)
    if not chat or not n_chat:
        raise ValueError("the pool has no locomo conversations")
    copies = max(1, round(share / (1 - share) * n_other / n_chat))
    # The copies are not a set of corpora.SETS: make_bundles joins each real file once,
    # unchanged, and the copies only as varied replicas (other names, dates, numbers).
    cycled = [
        replace(d, set="locomo-copy", rel=f"{d.rel}#{k}") for k in range(1, copies) for d in chat
    ]
    return [*other, *chat, *cycled]


def chat_queries(count: int, seed: str = "chat") -> list[str]:
    """locomo's questions (the queries agents ask of conversation memory)."""
    path = SHARED_BENCH / "locomo" / "queries.jsonl"
    texts = [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]
    random.Random(seed).shuffle(texts)
    return texts[:count]


def chat_index(ctx: Any) -> None:
    """The conversation-heavy 100k index: hybrid and keyword p50 via the socket, with numpy
    brute force and the query embedding timed on the same query in the same round."""
    from bench.daemonproc import Daemon
    from bench.speed_ctx import SPEED, ms
    from recalld.index.store import Store

    home = SPEED / "idx-chat"
    pool = chat_pool(ctx.pool)
    info = homes.large_home(
        home, pool, ctx.real, ctx.sizes.large_chunks, ctx.embedder, ctx.cache, ctx.rebuild
    )
    s = ctx.sheet
    s.put("chat_index_chunks", info["chunks"])
    queries = chat_queries(ctx.sizes.queries)
    qvecs = ctx.embedder.embed(queries, query=True)
    with Store(home / "index.sqlite", readonly=True) as store:
        blobs = [np.frombuffer(b, dtype="<f4") for _, b in store.iter_vectors()]
    matrix = np.ascontiguousarray(np.concatenate(blobs).reshape(-1, ctx.embedder.dims))
    rounds: dict[str, list[float]] = {k: [] for k in ("search", "keyword", "numpy", "embed")}
    d = Daemon(home).start()
    try:
        d.wait_idle()
        with d.client() as c:
            for q in queries[:10]:  # warm
                c.search(q)
            for i, q in enumerate(queries):
                t = time.perf_counter()
                c.search(q)
                rounds["search"].append(ms(t))
                t = time.perf_counter()
                c.search(q, mode="keyword")
                rounds["keyword"].append(ms(t))
                t = time.perf_counter()
                scores = matrix @ qvecs[i]
                np.argpartition(-scores, 23)[:24]
                rounds["numpy"].append(ms(t))
                t = time.perf_counter()
                ctx.embedder.embed([q], query=True)
                rounds["embed"].append(ms(t))
        parts = d.rss_parts()
        s.put("rss_idle_anon_mb_100k_chat", parts.get("RssAnon"), 1)
        s.put("rss_idle_file_mb_100k_chat", parts.get("RssFile"), 1)
    finally:
        d.stop()
    p50 = {k: percentile(v, 0.5) for k, v in rounds.items()}
    s.put("search_p50_ms_100k_chat", p50["search"], 2)
    s.put("keyword_search_p50_ms_100k_chat", p50["keyword"], 2)
    s.put("numpy_p50_ms_100k_chat", p50["numpy"], 3)
    s.put("query_embed_p50_ms_100k_chat", p50["embed"], 3)
    s.put("search_chat_vs_embed_numpy", p50["search"] / (p50["embed"] + p50["numpy"]), 3)
    s.put("keyword_chat_vs_numpy", p50["keyword"] / p50["numpy"], 3)
    s.note(
        "search_p50_ms_100k_chat",
        f"{len(queries)} locomo questions on a {info['chunks']}-chunk index whose chunks are "
        f"{CHAT_SHARE:.0%} locomo chat turns (cycled, names/dates/numbers varied) and the rest "
        "tldr/scifact; per round: hybrid search via the socket, keyword-only via the socket, "
        "numpy float32 brute force over the same vectors, and the query embedding alone",
    )


# standalone: the keyword channel alone -----------------------------------------------------------


def keyword_home(home: Path, chunks: int) -> int:
    """A keyword-only index of the chat mix, written straight through recalld's Store."""
    from recalld.config import Config
    from recalld.index.store import FileRow, Store
    from recalld.ingest.identity_check import identity_for

    index = home / "index.sqlite"
    marker = home / f"built-{chunks}"
    if marker.exists():
        return int(marker.read_text())
    homes.wipe(home)
    home.mkdir(parents=True, exist_ok=True)
    pool = chat_pool(corpora.load_pool({"tldr": 3000, "scifact-train": 2000, "locomo": None}))
    bundles = replicas.make_bundles(pool, chunks)
    written = 0
    with Store(index) as store:
        store.set_identity(identity_for(Config({}, base_dir=home), None))
        for rep in bundles:
            path = str(home / "memory" / rep.rel)
            lines = rep.text.count("\n")
            store.replace_file(
                FileRow(path, "memory", len(rep.text), 0, "", lines), rep.chunks, None
            )
            written += len(rep.chunks)
    marker.write_text(str(written))
    return written


def time_keyword(home: Path, queries: Sequence[str], settings: dict[str, Any]) -> list[float]:
    """Keyword-only engine.searcher.search (in-process, the daemon's code path) per query, in ms."""
    from recalld.config import Config
    from recalld.embedding.registry import ProviderChoice
    from recalld.engine import Engine

    config = Config({"sessions.paths": [], "embedding.provider": "none", **settings}, base_dir=home)
    engine = Engine(config, writable=False, choice=ProviderChoice(None, "bench: keyword only"))
    try:
        for q in queries[:20]:
            engine.searcher.search({"query": q, "mode": "keyword"})
        out = []
        for q in queries:
            t = time.perf_counter()
            engine.searcher.search({"query": q, "mode": "keyword"})
            out.append((time.perf_counter() - t) * 1000)
        return out
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    """Time the keyword channel of the chat mix under each setting, numpy as the reference."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--max-term-df", default="0,0.1,0.2,0.3")
    args = p.parse_args(argv)
    home = OUT / "chat-keyword"
    t = time.perf_counter()
    n = keyword_home(home, args.chunks)
    log(f"chat keyword index: {n} chunks ({time.perf_counter() - t:.0f} s)")
    queries = chat_queries(args.queries)
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((n, 384)).astype(np.float32)
    numpy_ms = []
    for _ in range(len(queries)):
        q = rng.standard_normal(384).astype(np.float32)
        t = time.perf_counter()
        np.argpartition(-(matrix @ q), 23)[:24]
        numpy_ms.append((time.perf_counter() - t) * 1000)
    del matrix
    print(f"numpy brute force {n} x 384: p50 {percentile(numpy_ms, 0.5):.2f} ms")
    for mmap in (0, 1024):
        for df in (float(x) for x in args.max_term_df.split(",")):
            settings = {"index.reader_mmap_mb": mmap, "search.max_term_df": df}
            ms = time_keyword(home, queries, settings)
            print(
                f"keyword mmap {mmap:>4} MB, max_term_df {df:.2f}: p50 "
                f"{percentile(ms, 0.5):6.2f} ms, p95 {percentile(ms, 0.95):6.2f} ms, "
                f"mean {statistics.mean(ms):6.2f} ms",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
