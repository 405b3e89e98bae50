"""A narrow ``since`` filter against the same search unfiltered, on the large part's daemon.

Issue 34's target: hybrid p50 with ``since`` keeping 1 % of the 100k chunks must not be slower
than the unfiltered p50 (both channels filter before ranking: the vector channel scores the
kept rows only, the keyword channel masks its held postings). ``since`` is the content date
that 1 % of the chunks reach (the home's notes are dated by their mtimes: the files written
last). Each query runs unfiltered, then filtered, in the same round, so load on the machine
falls on both alike. Every filtered hit is checked to be dated on or after ``since``.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import Sheet, percentile

SHARE = 0.01


def _count(row: tuple[Any, ...] | None) -> int:
    """The value of a ``count(*)`` row (which SQLite always returns)."""
    assert row is not None
    return int(row[0])


def since_keeping(index: Path, share: float) -> tuple[str, float]:
    """The ISO ``since`` that keeps about ``share`` of the chunks, and the share it keeps."""
    from recalld.index.store import Store

    with Store(index, readonly=True) as store:
        total = _count(store.conn.execute("SELECT count(*) FROM chunks").fetchone())
        offset = max(int(total * share) - 1, 0)
        row = store.conn.execute(
            "SELECT date FROM chunks WHERE date IS NOT NULL ORDER BY date DESC LIMIT 1 OFFSET ?",
            (offset,),
        ).fetchone()
        if row is None:
            raise RuntimeError(f"{index}: no chunk has a date (migration 6 not applied?)")
        cut = float(row[0])
        kept = _count(
            store.conn.execute("SELECT count(*) FROM chunks WHERE date >= ?", (cut,)).fetchone()
        )
    since = datetime.fromtimestamp(cut, UTC).isoformat().replace("+00:00", "Z")
    return since, kept / max(total, 1)


def measure(
    sheet: Sheet,
    client: Any,
    index: Path,
    queries: list[str],
    tag: str,
    min_score: float | None = None,
) -> None:
    """Paired rounds of unfiltered and ``since``-filtered hybrid searches through ``client``."""
    since, kept = since_keeping(index, SHARE)
    cut = datetime.fromisoformat(since.replace("Z", "+00:00")).replace(microsecond=0)
    plain: list[float] = []
    narrow: list[float] = []
    returned: list[int] = []
    outside = 0
    for q in queries:
        t = time.perf_counter()
        client.search(q, min_score=min_score)
        plain.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        res = client.search(q, since=since, min_score=min_score)
        narrow.append((time.perf_counter() - t) * 1000)
        returned.append(len(res["results"]))
        for r in res["results"]:
            when = datetime.fromisoformat(str(r["date"]).replace("Z", "+00:00"))
            outside += when < cut
    p_plain, p_narrow = percentile(plain, 0.5), percentile(narrow, 0.5)
    sheet.put(f"filtered_share_{tag}", kept, 4)
    sheet.put(f"unfiltered_search_p50_ms_{tag}", p_plain, 2)
    sheet.put(f"filtered_search_p50_ms_{tag}", p_narrow, 2)
    sheet.put(f"filtered_vs_unfiltered_p50_{tag}", p_narrow / p_plain, 3)
    sheet.put(f"filtered_results_mean_{tag}", sum(returned) / max(len(returned), 1), 2)
    sheet.put(f"filtered_hits_outside_{tag}", outside)
    sheet.note(
        f"filtered_vs_unfiltered_p50_{tag}",
        f"{len(queries)} real queries, each searched (hybrid, 6 results, floor "
        f"{'0.35' if min_score is None else min_score}) through "
        f"recalld_client unfiltered and then with since={since} (keeps {kept:.2%} of the "
        "chunks: the files written last, dated by mtime) in the same round; "
        f"{outside} filtered hits dated before since",
    )


# --- standalone: a 100k home built straight into the store, for when the large part cannot run


def build_home(home: Path, target: int) -> dict[str, Any]:
    """``target`` chunks of the pool's real files (copies in folders of their own), written
    through ``Store.replace_file`` with the files on disk, so the daemon's start-up sync finds
    every file unchanged. Vectors are seeded random unit vectors (no embedding: a cold machine
    embeds the pool at ~4 chunks/s); each copy's files are dated by mtime across 400 days."""
    import numpy as np

    from bench import corpora, homes
    from bench.common import FULL
    from recalld.embedding.local import LocalEmbedder
    from recalld.index.store import FileRow, NewChunk, Store
    from recalld.ingest.identity_check import identity_for
    from recalld.ingest.indexer import content_hash
    from recalld.ingest.note_facts import date_of_note

    homes.wipe(home)
    config = homes.home_config(home)
    memory = Path(config.memory_roots()[0])
    pool = corpora.load_pool(FULL.pool_limits)
    per_copy = sum(len(d.chunks) for d in pool)
    copies = -(-target // per_copy)
    rng = np.random.default_rng(34)
    now, span = time.time(), 400 * 86400.0
    total = copies * len(pool)
    written = files = 0
    with Store(home / "index.sqlite") as store:
        store.set_identity(identity_for(config, LocalEmbedder()))
        for copy in range(copies):
            with store.transaction():
                for i, doc in enumerate(pool):
                    if written >= target:
                        break
                    path = memory / f"c{copy}" / doc.set / doc.rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(doc.data)
                    n = copy * len(pool) + i
                    when = now - span * (1 - n / total)
                    os.utime(path, (when, when))
                    st = path.stat()
                    date = date_of_note(str(path), doc.text, st.st_mtime_ns)
                    # One vector per chunk: the pool repeats some texts, so key by position.
                    keyed = [
                        NewChunk(c.start_line, c.end_line, c.text, f"{c.hash}:{j}", c.context,
                                 date=date)
                        for j, c in enumerate(doc.chunks)
                    ]  # fmt: skip
                    vecs = rng.standard_normal((len(keyed), 384)).astype(np.float32)
                    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                    row = FileRow(
                        str(path), "memory", st.st_size, st.st_mtime_ns,
                        content_hash(doc.data), doc.lines,
                    )  # fmt: skip
                    by_hash = {c.hash: v for c, v in zip(keyed, vecs, strict=True)}
                    store.replace_file(row, keyed, by_hash)
                    written += len(keyed)
                    files += 1
    return {"chunks": written, "files": files, "copies": copies}


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.filtered_search [--chunks N] [--queries N]``: build, measure, print."""
    import argparse
    import json

    from bench import corpora
    from bench.common import OUT
    from bench.daemonproc import Daemon

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--reuse", action="store_true", help="measure the home built last time")
    args = p.parse_args(argv)
    home = OUT / "speed" / f"filtered-{args.chunks}"
    t = time.perf_counter()
    if args.reuse and (home / "home.json").exists():
        info = json.loads((home / "home.json").read_text())
    else:
        info = build_home(home, args.chunks)
        info["build_s"] = round(time.perf_counter() - t, 1)
        (home / "home.json").write_text(json.dumps(info))
    sheet = Sheet()
    queries = corpora.real_queries(args.queries, "large")
    d = Daemon(home).start()
    try:
        d.wait_idle()
        with d.client() as c:
            for q in queries[:10]:
                c.search(q)  # warm: the model, the pages, the held postings
            tag = f"{round(info['chunks'] / 1000)}k"
            measure(sheet, c, home / "index.sqlite", queries, tag, min_score=0.0)
    finally:
        d.stop()
    print(json.dumps({"home": info, **sheet.metrics}, indent=2))
    print("\n".join(sheet.notes.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
