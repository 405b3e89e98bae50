"""The shared store (issue 36) side by side with the local index, on one embedded PostgreSQL.

- **Channel cost**: a daemon on a local index of ``local`` chunks searches with the shared
  store on (``shared`` chunks of a teammate's collection in PostgreSQL) and off, in alternating
  rounds of the same queries (the ``[shared]`` table is switched by a live config edit); the
  ratio of the hybrid p50s is the target.
- **Vector recall**: the HNSW answer of PostgreSQL (as the channel asks it) against the exact
  top 10 of the same vectors (numpy), for random unit queries.
- **Push throughput**: the pusher's chunks/s (with their vectors) from a local index into the
  store, against keyword-first indexing of the same files into a fresh index (chunks/s), both
  measured here.

Vectors are seeded unit vectors around topic centres (no embedding: a cold, shared machine
embeds a few chunks per second); texts are the bench pool's real files. The store is
bulk-loaded by COPY with the HNSW index built after, as an administrator would restore a dump.

    .venv/bin/python -m bench.shared_store [--local 100000] [--shared 1000000] [--queries 200]
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import OUT, Sheet, log, median, percentile

DIMS = 384
PASSWORDS = {"benchlocal": "bench-local-pw", "benchteam": "bench-team-pw"}


def _store(base: Path) -> tuple[str, str]:
    """The embedded server (started or found) with the two bench members; (url, admin url)."""
    import psycopg

    from recalld.shared import embedded
    from recalld.shared.schema import add_member

    info = embedded.up(base)
    admin = embedded.Embedded(base).admin_url()
    with psycopg.connect(admin, autocommit=True) as conn:
        for name, pw in PASSWORDS.items():
            add_member(conn, name, pw, ["bench"], reset_password=True)  # maybe found
    return str(info["url"]), admin


def _fresh_store_dir(base: Path) -> Path:
    """``base`` emptied (its server stopped first): each run loads into a new store.

    A store kept from the last run held its million rows as dead tuples (deleted in the loading
    transaction): the 1M load then took 3,304 s with recall@10 0.868, against 700 s and 0.963
    into a new store (session 22; the HNSW build most likely indexed the deleted rows too)."""
    from recalld.shared import embedded

    embedded.down(base)
    shutil.rmtree(base, ignore_errors=True)
    return base


def _remote(url: str, member: str, collection: str) -> Any:
    from recalld.config import Config
    from recalld.shared.remote import Remote
    from recalld.shared.settings import load

    os.environ[f"RCD_BENCH_PW_{member.upper()}"] = PASSWORDS[member]
    settings = load(
        Config(
            {
                "shared.url": url,
                "shared.member": member,
                "shared.collection": collection,
                "shared.team": "bench",
                "shared.password_env": f"RCD_BENCH_PW_{member.upper()}",
            }
        )
    )
    assert settings is not None  # the [shared] keys above are all set
    return Remote(settings)


def clustered(
    n: int, seed: int, topics: int, spread: float = 0.9, centres_seed: int = 36
) -> np.ndarray:
    """Unit vectors around ``topics`` random topic centres, as embeddings of real notes cluster
    (uniform random vectors in 384 dimensions are all nearly equidistant: no index, nor a
    reader, can tell their neighbours apart). Queries use the store's centres: a question about
    a topic the store holds."""
    centres = np.random.default_rng(centres_seed).standard_normal((topics, DIMS))
    centres = (centres / np.linalg.norm(centres, axis=1, keepdims=True)).astype(np.float32)
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((n, DIMS)).astype(np.float32) * (spread / np.sqrt(DIMS))
    vecs = centres[rng.integers(0, topics, n)] + noise
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    out: np.ndarray = vecs
    return out


def topics(n: int) -> int:
    """Topics of a store of ``n`` chunks (about 200 chunks a topic)."""
    return max(n // 200, 1)


def _scalar(row: tuple[Any, ...] | None) -> int:
    """The one value of an aggregate's row (which the server always returns)."""
    assert row is not None
    return int(row[0])


def bulk_load(url: str, admin: str, target: int, seed: int = 36) -> tuple[np.ndarray, int, float]:
    """``target`` chunks of the pool's texts with random vectors into ``team@bench``; returns
    the vectors (row i = chunk id base + i + 1), base, and the seconds it took (COPY, then the
    HNSW build)."""
    import psycopg

    from bench import corpora
    from bench.common import FULL
    from recalld.embedding.local import LocalEmbedder
    from recalld.shared import graph, postings
    from recalld.shared.terms import terms_text

    team = _remote(url, "benchteam", "team@bench")
    emb = LocalEmbedder()
    team.claim(emb.key, emb.label, emb.model, emb.dims)
    team.ensure_collection()
    team.close()
    texts = [c.text for d in corpora.load_pool(FULL.pool_limits) for c in d.chunks]
    vecs = clustered(target, seed, topics(target))
    started = time.perf_counter()
    with psycopg.connect(admin) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        conn.execute("DELETE FROM recalld.files WHERE collection = 'team@bench'")
        base = _scalar(conn.execute("SELECT coalesce(max(id), 0) FROM recalld.chunks").fetchone())
        conn.execute("DROP INDEX IF EXISTS recalld.vectors_hnsw")
        conn.execute("DROP INDEX IF EXISTS recalld.postings_by_impact")  # built after, as HNSW
        conn.execute("CREATE TEMP TABLE staged (id bigint, path text, n int, text text, t text)")
        per_file = 20
        files_copy = "COPY recalld.files (collection, path, hash, lines) FROM STDIN"
        with conn.cursor().copy(files_copy) as cp:
            for f in range(-(-target // per_file)):
                cp.write_row(("team@bench", f"bench/f{f}.md", f"h{f}", per_file * 3))
        with conn.cursor().copy("COPY staged FROM STDIN") as cp:
            for i in range(target):
                text = texts[i % len(texts)]
                row = (base + i + 1, f"bench/f{i // per_file}.md", i % per_file, text)
                cp.write_row((*row, terms_text(text)))
        conn.execute(
            "INSERT INTO recalld.chunks (id, collection, path, start_line, end_line, kind, hash, "
            "text, terms) SELECT id, 'team@bench', path, 3 * n + 1, 3 * n + 2, 'note', "
            "md5(text), text, to_tsvector('simple', t) FROM staged"
        )
        conn.execute("SELECT setval('recalld.chunks_id_seq', %s)", (base + target + 1,))
        with conn.cursor().copy(
            "COPY recalld.vectors (chunk_id, collection, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as cp:
            cp.set_types(["int8", "text", "vector"])
            for i in range(target):
                cp.write_row((base + i + 1, "team@bench", vecs[i]))
        conn.execute("SET maintenance_work_mem = '2GB'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        conn.execute(graph.CREATE.format(concurrently="", name="vectors_hnsw"))  # as claim's
        conn.execute(postings.INDEX)
        conn.execute("ANALYZE recalld.chunks")
        conn.execute("ANALYZE recalld.vectors")
    with psycopg.connect(admin, autocommit=True) as conn:  # visibility map: index-only scans
        conn.execute("VACUUM ANALYZE recalld.postings")
    return vecs, base, time.perf_counter() - started


def vector_recall(url: str, vecs: np.ndarray, base: int, queries: int) -> tuple[float, float]:
    """Recall@10 of the store's HNSW answer (as the channel asks it) vs exact, and its p50 ms."""
    from recalld.shared.remote import EF_SEARCH

    qs = clustered(queries, 7, topics(len(vecs)))
    reader = _remote(url, "benchlocal", "local@bench")
    found, times = 0, []
    with reader.connection() as conn:
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        conn.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
        for q in qs:
            exact = set((np.argpartition(-(vecs @ q), 10)[:10] + base + 1).tolist())
            t = time.perf_counter()
            rows = conn.execute(
                "SELECT chunk_id FROM recalld.vectors WHERE collection = ANY(%s) "
                "ORDER BY embedding <=> %s LIMIT 10",
                (["team@bench"], q),
            ).fetchall()
            times.append((time.perf_counter() - t) * 1000)
            found += len(exact & {int(r[0]) for r in rows})
    reader.close()
    return found / (10 * queries), percentile(times, 0.5)


def channel_cost(url: str, local_home: Path, queries: list[str], rounds: int) -> dict[str, float]:
    """Hybrid p50 of one daemon with the shared store on and off, in alternating rounds."""
    from bench.daemonproc import Daemon

    config = local_home / "config.toml"
    plain = config.read_text(encoding="utf-8").split("[shared]")[0]
    shared = plain + (
        f'\n[shared]\nurl = "{url}"\nmember = "benchlocal"\ncollection = "local@bench"\n'
        'team = "bench"\nread = ["team@bench"]\ntimeout_ms = 2000\n'
    )
    config.write_text(plain, encoding="utf-8")
    times: dict[str, list[float]] = {"on": [], "off": []}
    hits = 0
    d = Daemon(local_home, {"RECALLD_SHARED_PASSWORD": PASSWORDS["benchlocal"]}).start()
    try:
        d.wait_idle()
        with d.client() as c:
            for q in queries[:10]:
                c.search(q)  # warm: the model, the pages, the held postings
            for r in range(2 * rounds):
                mode = "on" if r % 2 == 0 else "off"
                config.write_text(shared if mode == "on" else plain, encoding="utf-8")
                _wait_shared(c, mode == "on")
                for q in queries:
                    t = time.perf_counter()
                    res = c.search(q)
                    times[mode].append((time.perf_counter() - t) * 1000)
                    found = res.get("shared")
                    hits += mode == "on" and isinstance(found, dict) and bool(found.get("hits"))
    finally:
        config.write_text(plain, encoding="utf-8")
        d.stop()
    on, off = percentile(times["on"], 0.5), percentile(times["off"], 0.5)
    return {"on_p50": on, "off_p50": off, "on_p95": percentile(times["on"], 0.95),
            "with_shared_hits": hits / max(len(times["on"]), 1)}  # fmt: skip


def _wait_shared(c: Any, on: bool, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if bool((c.status().get("shared") or {}).get("on")) == on:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the shared store did not turn {'on' if on else 'off'}")


#: Rounds of push_vs_index, alternated: one push of 4,001 chunks lasts ~1.2 s, so one round's
#: ratio moved 0.45-0.78 with whatever else the two cores ran; each figure is the median.
PUSH_ROUNDS = 3


def push_vs_index(url: str, admin: str, work: Path, files: int) -> dict[str, Any]:
    """The pusher's chunks/s with vectors, and keyword-first indexing's chunks/s, same files:
    PUSH_ROUNDS alternated rounds (index, push, merge), each pushed into a collection of its
    own; the medians, and each round's push/index ratio."""
    from bench.filtered_search import build_home

    src = work / "push-src"
    info = build_home(src, files * 8)  # an index with vectors, its files on disk
    chunks = float(info["chunks"])
    rounds = [_push_round(url, admin, work, src, r) for r in range(PUSH_ROUNDS)]
    index = median([chunks / r["index_s"] for r in rounds])
    push = median([chunks / r["push_s"] for r in rounds])
    merge = median([r["merged"] / r["merge_s"] if r["merged"] else 0.0 for r in rounds])
    return {"push_chunks_per_s": push, "index_chunks_per_s": index, "merge_chunks_per_s": merge,
            "pushed_files": rounds[-1]["pushed"], "chunks": chunks,
            "ratios": [r["index_s"] / r["push_s"] for r in rounds]}  # fmt: skip


def _push_round(url: str, admin: str, work: Path, src: Path, n: int) -> dict[str, Any]:
    """One round: the files indexed keyword-first into a fresh index, then the push of the
    source index (with vectors) into collection ``push<n>@bench``, then its merge."""
    from contextlib import contextmanager

    import psycopg

    from recalld.config import Config
    from recalld.embedding.registry import ProviderChoice
    from recalld.engine import Engine
    from recalld.index.store import Store
    from recalld.shared.push import Pusher, Scope

    memory = src / "memory"
    fresh = work / "push-fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    config = Config({"memory.paths": [str(memory)], "sessions.paths": []}, base_dir=fresh)
    t = time.perf_counter()
    engine = Engine(config, choice=ProviderChoice(None, "keyword first: the rows, no vectors"))
    engine.sync()
    engine.close()
    index_s = time.perf_counter() - t
    collection = f"push{n}@bench"
    remote = _remote(url, "benchlocal", collection)

    @contextmanager
    def reader() -> Any:
        with Store(src / "index.sqlite", readonly=True) as store:
            yield store

    with psycopg.connect(admin) as conn:  # a rerun of the part pushes everything again
        conn.execute("DELETE FROM recalld.files WHERE collection = %s", (collection,))
    state = work / "push-state.json"
    state.unlink(missing_ok=True)
    pusher = Pusher(remote.settings, remote, reader, Scope(("**",), [memory]), state)
    t = time.perf_counter()
    pushed = pusher.push_once()
    push_s = time.perf_counter() - t
    # then the background's part: the pushed vectors into the HNSW graph (searched exactly
    # until then); the pace of a push too big for the fresh table's cap
    t = time.perf_counter()
    merged = pusher.merge_fresh()
    merge_s = time.perf_counter() - t
    remote.close()
    return {"index_s": index_s, "push_s": push_s, "merged": merged, "merge_s": merge_s,
            "pushed": float(pushed)}  # fmt: skip


def run(sheet: Sheet, local: int, shared: int, queries_n: int) -> None:
    """Every measure of this part into ``sheet`` (keys name the sizes); the store's server is
    stopped after (its 1M rows stay in bench/out for a rerun of the part to start it again)."""
    from recalld.shared import embedded

    try:
        _measure(sheet, local, shared, queries_n)
    finally:
        embedded.down(OUT / "shared" / "pg")


def _measure(sheet: Sheet, local: int, shared: int, queries_n: int) -> None:
    from bench import corpora
    from bench.filtered_search import build_home

    work = OUT / "shared"
    work.mkdir(parents=True, exist_ok=True)
    url, admin = _store(_fresh_store_dir(work / "pg"))
    vecs, base, load_s = bulk_load(url, admin, shared)
    ltag = f"{round(local / 1000)}k"
    sheet.put("shared_chunks", shared)
    sheet.put("shared_local_chunks", local)
    sheet.put("shared_load_s", load_s, 1)
    recall, p50 = vector_recall(url, vecs, base, 200)
    sheet.put("shared_vector_recall", recall, 4)
    sheet.put("shared_vector_p50_ms", p50)
    log(f"shared: {shared} chunks loaded in {load_s:.0f} s; recall@10 {recall:.4f}")
    local_home = work / f"local-{ltag}"
    if not (local_home / "home.json").exists():
        (local_home / "home.json").parent.mkdir(parents=True, exist_ok=True)
        built = build_home(local_home, local)
        (local_home / "home.json").write_text(json.dumps(built))
    cost = channel_cost(url, local_home, corpora.real_queries(queries_n, "shared"), 2)
    sheet.put("shared_over_local_p50", cost["on_p50"] / cost["off_p50"])
    sheet.put("shared_on_p50_ms", cost["on_p50"])
    sheet.put("shared_off_p50_ms", cost["off_p50"])
    sheet.put("shared_answers_with_shared_hits", cost["with_shared_hits"])
    push = push_vs_index(url, admin, work, 500)
    sheet.put(
        "shared_push_over_index_throughput", push["push_chunks_per_s"] / push["index_chunks_per_s"]
    )
    sheet.put("shared_push_chunks_per_s", push["push_chunks_per_s"], 1)
    sheet.put("shared_index_chunks_per_s", push["index_chunks_per_s"], 1)
    sheet.put("shared_merge_chunks_per_s", push["merge_chunks_per_s"], 1)
    sheet.note(
        "shared",
        f"shared store: {shared:,} chunks of a teammate's collection in PostgreSQL 18 + pgvector "
        f"(clustered unit vectors, real texts; COPY and HNSW build {load_s:.0f} s); a daemon on a "
        f"local {local:,}-chunk index searched {queries_n} real queries with the store on and "
        "off in alternating rounds (live config edits); push and keyword-first indexing of the "
        f"same {push['chunks']:.0f} chunks in {PUSH_ROUNDS} alternated rounds, medians (each "
        f"round's push/index: {', '.join(f'{r:.3f}' for r in push['ratios'])}); a push's vectors "
        "are searched exactly in the fresh table until merged into the HNSW graph "
        "(shared_merge_chunks_per_s: that merge's pace after the push, one connection).",
    )


def main(argv: list[str] | None = None) -> int:
    """Run the part alone and print its figures."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--local", type=int, default=100_000)
    p.add_argument("--shared", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=200)
    args = p.parse_args(argv)
    sheet = Sheet()
    run(sheet, args.local, args.shared, args.queries)
    print(json.dumps(sheet.metrics, indent=1))
    print("\n".join(sheet.notes.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
