"""A huge single-line note must not hold up small edits (issue 14, item 12).

Through a real daemon with the real local model: the big note is chunked off the writer and
indexed keyword-first, its vectors back-filled in slices between other jobs.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from daemon_process import DaemonProcess, wait_for
from recalld.ingest.vector_backfill import BackgroundChunker


def one_line_note(size: int, marker: str) -> str:
    r = random.Random(7)
    vocab = [
        "".join(r.choices("abcdefghijklmnopqrstuvwxyz", k=r.randint(2, 10))) for _ in range(3000)
    ]
    words: list[str] = []
    n = 0
    while n < size:
        words.append(r.choice(vocab))
        n += len(words[-1]) + 1
    half = len(words) // 2
    return " ".join([*words[:half], marker, *words[half:]])[:size] + "\n"


def _peak_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise KeyError("VmHWM")


@pytest.mark.slow
def test_small_edits_stay_fast_while_a_huge_note_is_indexed(home: Path) -> None:
    (home / "config.toml").write_text('[embedding]\nprovider = "local"\n[sync]\ndebounce_s = 0.3\n')
    memory = home / "memory"
    d = DaemonProcess(home).start(timeout=120)
    try:
        assert d.proc is not None
        with d.client(timeout=120) as c:
            d.wait_idle()
            (memory / "big.md").write_text(one_line_note(4_000_000, "zeppelinmarker"))
            # The big note is being chunked now: ~1.4 s on its own thread from the debounce on
            # (26,798 chunks). A small edit saved after that, while the writer commits the big
            # note's keyword rows, waits for that commit (~5 s): see docs/DECISIONS.md, session
            # 15. This test is about the chunking, so the edit comes well inside it.
            time.sleep(0.3)
            (memory / "small.md").write_text("the zanzibar quokka ledger\n")
            took = wait_for(
                lambda: bool(c.search("zanzibar quokka", mode="keyword")["results"]), 60
            )
            assert took < 5, f"a small edit waited {took:.1f} s behind the big note"
            print(f"small edit searchable after {took:.2f} s while the big note was chunked")
            wait_for(lambda: bool(c.search("zeppelinmarker", mode="keyword")["results"]), 300)
            st = c.status()
            assert st["counts"]["chunks"] > 1000
            # Its vectors come in slices; a small edit made meanwhile still goes through.
            assert st["counts"]["vectors"] < st["counts"]["chunks"]
            (memory / "small2.md").write_text("the okapi gazette during the back-fill\n")
            took = wait_for(lambda: bool(c.search("okapi gazette", mode="keyword")["results"]), 60)
            assert took < 5, f"a small edit waited {took:.1f} s behind the back-fill"
            print(f"small edit searchable after {took:.2f} s during the back-fill")
            # The back-fill is making progress: a step commits about once a second, but the
            # small edit may have been searchable before the next one did.
            took = wait_for(lambda: c.status()["counts"]["vectors"] > st["counts"]["vectors"], 30)
            print(f"the back-fill's next step committed {took:.2f} s after the edit was found")
            peak = _peak_mb(d.proc.pid)
            print(f"daemon peak RSS {peak} MB")
            assert peak < 700
    finally:
        d.stop()


def test_background_chunker_newest_request_wins_and_stale_results_are_refused() -> None:
    ready: list[Path] = []
    chunker: BackgroundChunker[str] = BackgroundChunker(ready.append)
    try:
        chunker.request("/n.md", "d1", lambda: "old")
        wait_for(lambda: bool(ready), 10)
        assert chunker.take("/n.md", "other-digest") is None  # the file changed since
        assert chunker.take("/n.md", "d1") == "old"
        assert chunker.take("/n.md", "d1") is None  # handed out once
        chunker.request("/n.md", "d2", lambda: "new")
        wait_for(lambda: len(ready) == 2 and chunker.pending() == 0, 10)
        assert chunker.take("/n.md", "d2") == "new"

        def boom() -> str:
            raise ValueError("bad")

        chunker.request("/bad.md", "d", boom)  # logged; the thread goes on
        chunker.request("/ok.md", "d", lambda: "fine")
        wait_for(lambda: chunker.take("/ok.md", "d") == "fine", 10)
        assert chunker.take("/bad.md", "d") is None
    finally:
        chunker.close()
