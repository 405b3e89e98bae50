"""Searches while the daemon works (issue 40 item 5): p50/p95 during a first sync and during a
transcript growing at an agent's pace, each over the same daemon idle.

One home per round: N real notes (tldr/scifact/locomo, ``BUSY_NOTES``; 3,000 in a full run) and a
real Claude Code transcript are written, a daemon is started on them, and one client searches
every ``PACE_S`` (hybrid and keyword-only in turn, real queries) through three phases:

- **sync**: from the daemon's start until every note is in and ``vectors_pending`` is 0 (the
  first sync: keyword rows, then the vector back-fill on every core);
- **idle**: the same daemon once idle, as many searches as the sync phase had (200 to
  ``IDLE_MAX``; the reference);
- **transcript**: ``TRANSCRIPT_S`` seconds while the transcript grows by real lines, at least
  ``APPEND_BYTES`` every ``APPEND_S`` (an agent at work with its tool output), which the daemon
  indexes and embeds in deltas.

Each round runs twice, side by side: the defaults (searches first: ``embedding.search_first``,
``embedding.background_nice`` 10) and the old behaviour (both off), in alternating order. The
cost of searches first is the time to the last vector under the same search load:
``busy_vectors_complete_s_on`` / ``_off``.

``busy`` is the ``busy`` part of ``make bench``; alone (300 notes, 2 rounds):
``.venv/bin/python bench/busy_search.py --notes 300 --rounds 2``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import corpora, homes
from bench.common import OUT, log, percentile

NOTES = int(os.environ.get("BUSY_NOTES", "3000"))
QUICK_NOTES = 300
PACE_S = 0.1  # between one answer and the next search
IDLE_MAX = 600  # searches of the idle reference at most (a 3,000-note sync has thousands)
APPEND_S = 0.5
APPEND_BYTES = 4096
TRANSCRIPT_S = float(os.environ.get("BUSY_TRANSCRIPT_S", "60"))
GATE_OFF = {"embedding.search_first": False, "embedding.background_nice": 0}
Samples = dict[str, list[float]]  # mode -> latencies in ms


class Searcher:
    """One client searching every PACE_S on a thread: hybrid and keyword-only in turn."""

    def __init__(self, daemon: Any, queries: list[str]) -> None:
        self.daemon = daemon
        self.queries = queries
        self.samples: Samples = {"hybrid": [], "keyword": []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.daemon.client(timeout=120) as c:
            i = 0
            while not self._stop.is_set():
                mode = "hybrid" if i % 2 == 0 else "keyword"
                query = self.queries[(i // 2) % len(self.queries)]
                t = time.perf_counter()
                c.search(query, mode=mode)
                self.samples[mode].append((time.perf_counter() - t) * 1000)
                i += 1
                self._stop.wait(PACE_S)

    @contextmanager
    def running(self) -> Iterator[Samples]:
        """Search while the block runs; the samples when it ends."""
        self._thread.start()
        try:
            yield self.samples
        finally:
            self._stop.set()
            self._thread.join(120)


def _appender(path: Path, lines: list[bytes], stop: threading.Event) -> int:
    """Append real transcript lines, at least APPEND_BYTES every APPEND_S; bytes written."""
    written = 0
    it = iter(lines)
    with path.open("ab") as f:
        while not stop.wait(APPEND_S):
            tick = 0
            for line in it:
                f.write(line)
                tick += len(line)
                if tick >= APPEND_BYTES:
                    break
            f.flush()
            written += tick
    return written


def _stats(samples: Samples) -> dict[str, float]:
    out: dict[str, float] = {}
    for mode, values in samples.items():
        out[f"{mode}_n"] = len(values)
        out[f"{mode}_p50"] = percentile(values, 0.5)
        out[f"{mode}_p95"] = percentile(values, 0.95)
    return out


def _wait(d: Any, done: Any) -> None:
    """Poll ``status`` until ``done(status)``."""
    with d.client(timeout=600) as c:
        while not done(c.status()):
            time.sleep(0.2)


def _keyword_in(notes: int) -> Any:
    return lambda st: (st["counts"].get("memory_files") or 0) >= notes


def _vectors_in(st: dict[str, Any]) -> bool:
    return bool(st["vectors"]["vectors_pending"] == 0 and st["state"] == "idle")


def round_(home: Path, docs: list[corpora.Doc], lines: list[bytes], gate: bool) -> dict[str, Any]:
    """One daemon through the three phases; the figures of each."""
    from bench.daemonproc import Daemon

    homes.wipe(home)
    sessions = home / "agent"
    sessions.mkdir(parents=True)
    transcript = sessions / "session.jsonl"
    head = 40  # the transcript so far: indexed by the first sync
    transcript.write_bytes(b"".join(lines[:head]))
    homes.home_config(
        home, sessions=[str(sessions / "*.jsonl")], extra=None if gate else dict(GATE_OFF)
    )
    homes.write_docs(home / "memory", docs)
    queries = corpora.real_queries(400, seed="busy")
    out: dict[str, Any] = {"gate": gate, "notes": len(docs)}
    t0 = time.perf_counter()
    d = Daemon(home).start()
    try:
        # The sync phase starts once every note is keyword-searchable (a few seconds): searches
        # of a still empty index would flatter it. It lasts while the vectors are embedded.
        _wait(d, _keyword_in(len(docs)))
        out["keyword_in_s"] = time.perf_counter() - t0
        with Searcher(d, queries).running() as during_sync:
            _wait(d, _vectors_in)
            out["vectors_complete_s"] = time.perf_counter() - t0
        out["sync"] = _stats(during_sync)
        d.wait_idle()
        with d.client() as c:
            out["gate_waits"] = c.status()["daemon"].get("search_first")  # what it did
        idle_n = min(max(len(during_sync["hybrid"]) + len(during_sync["keyword"]), 200), IDLE_MAX)
        searcher = Searcher(d, queries)
        with searcher.running() as idle:
            while len(idle["hybrid"]) + len(idle["keyword"]) < idle_n:
                time.sleep(0.2)
        out["idle"] = _stats(idle)
        stop = threading.Event()
        appended: list[int] = []
        writer = threading.Thread(
            target=lambda: appended.append(_appender(transcript, lines[head:], stop))
        )
        with Searcher(d, queries).running() as during_transcript:
            writer.start()
            time.sleep(TRANSCRIPT_S)
            stop.set()
            writer.join(30)
        out["transcript"] = _stats(during_transcript)
        out["transcript_bytes"] = sum(appended)
        with d.client() as c:
            out["chunks_at_end"] = c.status()["counts"]["chunks"]
    finally:
        d.stop()
    return out


def run(pool: list[corpora.Doc], notes: int, rounds: int, home: Path) -> dict[str, Any]:
    """``rounds`` pairs of rounds (searches first on / off, alternating order)."""
    docs = corpora.interleave([d for d in pool if d.chunks], "busy")[:notes]
    lines = corpora.transcript_bytes(3_000_000).splitlines(keepends=True)
    got: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for r in range(rounds):
        for gate in (True, False) if r % 2 == 0 else (False, True):
            one = round_(home, docs, lines, gate)
            got["on" if gate else "off"].append(one)
            log(f"busy round {r + 1} gate={'on' if gate else 'off'}: {_line(one)}")
    return got


def ratios(one: dict[str, Any], mode: str = "hybrid") -> dict[str, float]:
    """During / idle of one round, p50 and p95."""
    idle = one["idle"]
    return {
        f"{phase}_over_idle_{q}": one[phase][f"{mode}_{q}"] / idle[f"{mode}_{q}"]
        for phase in ("sync", "transcript")
        for q in ("p50", "p95")
    }


def _line(one: dict[str, Any]) -> str:
    r, k = ratios(one), ratios(one, "keyword")
    return (
        f"vectors {one['vectors_complete_s']:.1f} s; hybrid idle "
        f"{one['idle']['hybrid_p50']:.1f}/{one['idle']['hybrid_p95']:.1f} ms, sync "
        f"{r['sync_over_idle_p50']:.2f}/{r['sync_over_idle_p95']:.2f}x, transcript "
        f"{r['transcript_over_idle_p50']:.2f}/{r['transcript_over_idle_p95']:.2f}x; keyword sync "
        f"{k['sync_over_idle_p50']:.2f}/{k['sync_over_idle_p95']:.2f}x, transcript "
        f"{k['transcript_over_idle_p50']:.2f}/{k['transcript_over_idle_p95']:.2f}x"
    )


def _median(values: list[float]) -> float:
    from bench.common import median

    return median(values)


def busy(ctx: Any) -> None:
    """The ``busy`` part: 3,000 notes (300 with --quick), one round each way."""
    from bench.speed_ctx import SPEED

    notes = NOTES if ctx.sizes.name == "full" else QUICK_NOTES
    got = run(list(ctx.pool), notes, 1, SPEED / "busy")
    put(ctx.sheet, got)


def put(s: Any, got: dict[str, list[dict[str, Any]]]) -> None:
    """The figures into the sheet: medians over rounds, searches first (on) as the main keys."""
    for side, gate_off in (("on", ""), ("off", "gate_off_")):
        rounds = got[side]
        for mode, name in (("hybrid", "search"), ("keyword", "keyword")):
            rs = [ratios(one, mode) for one in rounds]
            for key in rs[0]:
                main = f"{name}_during_{key}"
                value = _median([r[key] for r in rs])
                s.put(f"busy_{gate_off}{main}" if gate_off else main, value, 2)
            for phase in ("idle", "sync", "transcript"):
                for q in ("p50", "p95"):
                    values = [one[phase][f"{mode}_{q}"] for one in rounds]
                    s.put(f"busy_{gate_off}{name}_{phase}_{q}_ms", _median(values), 1)
        s.put(
            f"busy_vectors_complete_s_{side}",
            _median([one["vectors_complete_s"] for one in rounds]),
            1,
        )
    s.put("busy_notes", got["on"][0]["notes"])
    s.put(
        "busy_sync_cost_on_over_off",
        s.metrics["busy_vectors_complete_s_on"] / s.metrics["busy_vectors_complete_s_off"],
        3,
    )
    s.note(
        "search_during_sync_over_idle_p50",
        f"{got['on'][0]['notes']} real notes and a real transcript in a fresh home, a daemon "
        "started on them; one client searches every 0.1 s (hybrid and keyword in turn) during "
        "the first sync (from every note keyword-searchable until vectors_pending is 0), then as "
        "many times idle, then 60 s while "
        f"the transcript grows >= {APPEND_BYTES} B every {APPEND_S} s; ratios to the same "
        "daemon idle; busy_gate_off_* the same with embedding.search_first off and "
        "background_nice 0 (the old behaviour), run side by side",
    )


def main(argv: list[str] | None = None) -> int:
    """Run alone: the figures printed, and BENCHMARKS.partial-style JSON in bench/out."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--notes", type=int, default=QUICK_NOTES)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    import json

    from bench.common import Sheet

    pool = corpora.load_pool({"tldr": 3000, "scifact-train": 2000, "locomo": None})
    got = run(pool, args.notes, args.rounds, OUT / "busy")
    sheet = Sheet()
    put(sheet, got)
    for key, value in sheet.metrics.items():
        log(f"{key}: {value}")
    (OUT / "busy.json").write_text(json.dumps({"rounds": got, **sheet.metrics}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
