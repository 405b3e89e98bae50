"""A narrow ``since`` filter against the same search unfiltered, on the large part's daemon.

Issue 34's target: hybrid p50 with ``since`` keeping 1 % of the 100k chunks must not be slower
than the unfiltered p50 (both channels filter before ranking: the vector channel scores the
kept rows only, the keyword channel masks its held postings). ``since`` is the content date
that 1 % of the chunks reach (the home's notes are dated by their mtimes: the files written
last). Each query runs unfiltered, then filtered, in the same round, so load on the machine
falls on both alike. Every filtered hit is checked to be dated on or after ``since``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import Sheet, percentile

SHARE = 0.01


def since_keeping(index: Path, share: float) -> tuple[str, float]:
    """The ISO ``since`` that keeps about ``share`` of the chunks, and the share it keeps."""
    from recalld.index.store import Store

    with Store(index, readonly=True) as store:
        total = int(store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        offset = max(int(total * share) - 1, 0)
        row = store.conn.execute(
            "SELECT date FROM chunks WHERE date IS NOT NULL ORDER BY date DESC LIMIT 1 OFFSET ?",
            (offset,),
        ).fetchone()
        if row is None:
            raise RuntimeError(f"{index}: no chunk has a date (migration 6 not applied?)")
        cut = float(row[0])
        kept = int(store.conn.execute("SELECT count(*) FROM chunks WHERE date >= ?", (cut,))
                   .fetchone()[0])  # fmt: skip
    since = datetime.fromtimestamp(cut, UTC).isoformat().replace("+00:00", "Z")
    return since, kept / max(total, 1)


def measure(sheet: Sheet, client: Any, index: Path, queries: list[str], tag: str) -> None:
    """Paired rounds of unfiltered and ``since``-filtered hybrid searches through ``client``."""
    since, kept = since_keeping(index, SHARE)
    cut = datetime.fromisoformat(since.replace("Z", "+00:00")).replace(microsecond=0)
    plain: list[float] = []
    narrow: list[float] = []
    returned: list[int] = []
    outside = 0
    for q in queries:
        t = time.perf_counter()
        client.search(q)
        plain.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        res = client.search(q, since=since)
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
        f"{len(queries)} real queries, each searched (hybrid, 6 results, floor 0.35) through "
        f"recalld_client unfiltered and then with since={since} (keeps {kept:.2%} of the "
        "chunks: the files written last, dated by mtime) in the same round; "
        f"{outside} filtered hits dated before since",
    )
