"""Searches first (issue 40 item 1): background embedding waits while a search is in flight,
at most the cap a batch; its threads run at a lower priority; the setting turns it off.

The model, its side-by-side runner, the embed-ahead thread and the engine are the real ones;
a search is "in flight" for as long as the test holds the engine's in-flight counter.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import make_config, make_engine
from recalld import cpus
from recalld.embedding.local import LocalEmbedder
from recalld.embedding.search_first import SearchFirst, background, current
from recalld.embedding.side_by_side import Runner
from recalld.ingest.embed_ahead import EmbedAhead
from recalld.retrieval.channel_overlap import InFlight
from recalld.serve.config_watch import diff

TEXTS = [f"background note {i} about the weekly planning of the garden" for i in range(8)]
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's"
)


def _one_a_batch(local_embedder: Any) -> LocalEmbedder:
    """The packaged model, one text a batch on two threads: eight batches a call."""
    emb = LocalEmbedder(batch_size=1, threads=2)
    emb._loaded = local_embedder._ensure_loaded()  # the session loaded once for the suite
    return emb


def _hashes(texts: list[str]) -> list[tuple[str, str]]:
    return [(f"h{i}", t) for i, t in enumerate(texts)]


def test_a_search_in_flight_holds_background_embedding(local_embedder: Any) -> None:
    gate = SearchFirst(cap_s=30.0)
    in_flight = InFlight(gate)
    ahead = EmbedAhead(_one_a_batch(local_embedder), gate)
    try:
        with in_flight.search():
            assert gate.searches == 1
            ahead.offer(_hashes(TEXTS))
            held = ahead.collect(1.0)
            assert held.vectors == {} and not ahead.idle()  # waiting at the first batch
        got = ahead.collect(30.0)  # the search left: the batches go on
        assert len(got.vectors) == len(TEXTS) and got.error is None
        assert gate.waits >= 1 and gate.capped == 0 and gate.waited_s >= 0.9
    finally:
        ahead.close()


def test_the_cap_releases_background_embedding_while_searches_go_on(
    local_embedder: Any,
) -> None:
    gate = SearchFirst(cap_s=0.1)
    ahead = EmbedAhead(_one_a_batch(local_embedder), gate)
    try:
        gate.enter()  # a search that never ends
        start = time.monotonic()
        ahead.offer(_hashes(TEXTS))
        got = ahead.collect(30.0)
        took = time.monotonic() - start
        assert len(got.vectors) == len(TEXTS)  # never starved
        # Eight batches on two threads, each waited the cap: four rounds of 0.1 s at least.
        assert gate.waits == len(TEXTS) and gate.capped == len(TEXTS)
        assert took >= 0.35
    finally:
        gate.leave()
        ahead.close()


def test_searches_never_wait_and_foreground_embedding_ignores_the_gate(
    local_embedder: Any,
) -> None:
    gate = SearchFirst(cap_s=30.0)
    gate.enter()
    try:
        start = time.monotonic()
        vectors = _one_a_batch(local_embedder).embed(TEXTS)  # no background(): a search's
        assert vectors.shape == (len(TEXTS), 384)
        assert time.monotonic() - start < 15 and gate.waits == 0
        assert current() is None
    finally:
        gate.leave()


def test_the_setting_off_lets_background_embedding_run(home: Path, local_embedder: Any) -> None:
    gate = SearchFirst(cap_s=30.0)
    gate.configure(make_config(home, embedding__search_first=False))
    assert not gate.enabled
    ahead = EmbedAhead(_one_a_batch(local_embedder), gate)
    try:
        gate.enter()
        ahead.offer(_hashes(TEXTS))
        got = ahead.collect(15.0)
        assert len(got.vectors) == len(TEXTS) and gate.waits == 0
    finally:
        gate.leave()
        ahead.close()
    gate.configure(make_config(home))
    assert gate.enabled and gate.nice == 10  # the defaults


def test_the_engine_counts_its_searches_in_its_gate(home: Path, local_embedder: Any) -> None:
    (home / "memory" / "a.md").write_text("# Garden\n\nPlant the tomatoes in May.\n")
    engine = make_engine(home, local_embedder, embedding__background_nice=3)
    try:
        gate = engine.search_first
        with engine.in_flight.search():
            assert gate.searches == 1
        assert gate.searches == 0
        engine.keyword_first = True  # the daemon's setting: vectors embedded ahead
        engine.sync()
        ahead = engine.writes._ahead
        assert ahead is not None and ahead.gate is gate and gate.nice == 3
        assert engine.searcher.search({"query": "tomatoes"})["results"]
        assert gate.searches == 0
    finally:
        engine.close()


def test_pacing_keys_apply_without_loading_the_provider_again(home: Path) -> None:
    old = make_config(home)
    change = diff(old, make_config(home, embedding__search_first=False))
    assert change.keys == ("embedding.search_first",) and not change.provider
    assert diff(old, make_config(home, embedding__background_nice=0)).provider is False
    assert diff(old, make_config(home, embedding__threads=1)).provider is True


def _nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux_only
def test_background_threads_run_at_a_lower_priority_and_searches_do_not() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base > 9:
        pytest.skip("the test process already runs at nice > 9")
    runner = Runner(2)
    seen: dict[str, set[int]] = {"background": set(), "foreground": set()}
    threads: dict[str, set[str]] = {"background": set(), "foreground": set()}

    def job(kind: str) -> Any:
        def record(batch: list[int]) -> None:
            seen[kind].add(_nice_of_this_thread())
            threads[kind].add(threading.current_thread().name)
            time.sleep(0.02)

        return record

    def embed_in_background() -> None:  # its own thread: a lowered thread stays lowered
        with background(SearchFirst(nice=10)):
            runner.run([[i] for i in range(6)], job("background"))

    worker = threading.Thread(target=embed_in_background)
    worker.start()
    worker.join(30)
    runner.run([[i] for i in range(6)], job("foreground"))  # a search's call, afterwards
    runner.close()
    assert seen["background"] == {base + 10}
    assert len(threads["background"]) == 2  # the caller and its helper, both lowered
    assert seen["foreground"] == {base}  # its helper is not the background's
    assert len(threads["foreground"]) == 2


def test_usable_cores_is_within_affinity_and_count() -> None:
    n = cpus.usable_cores()
    assert 1 <= n <= (os.cpu_count() or 1)
    if hasattr(os, "sched_getaffinity"):
        assert n <= len(os.sched_getaffinity(0))


def test_cgroup_quota_is_the_tightest_cpu_max_on_the_way_up(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    leaf = root / "user.slice" / "recalld.service"
    leaf.mkdir(parents=True)
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/user.slice/recalld.service\n")
    assert cpus.cgroup_quota(root, proc) is None  # no cpu.max anywhere
    (leaf / "cpu.max").write_text("max 100000\n")
    assert cpus.cgroup_quota(root, proc) is None  # no quota
    (root / "user.slice" / "cpu.max").write_text("150000 100000\n")
    assert cpus.cgroup_quota(root, proc) == 1.5
    (leaf / "cpu.max").write_text("50000 100000\n")
    assert cpus.cgroup_quota(root, proc) == 0.5
    proc.write_text("1:cpu:/\n")  # cgroup v1 only
    assert cpus.cgroup_quota(root, proc) is None


def _task_nices(pid: int) -> list[int]:
    """The nice value of every thread of ``pid`` (field 19 of /proc/<pid>/task/<tid>/stat)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        out.append(int(stat.rsplit(")", 1)[1].split()[16]))
    return out


@pytest.mark.slow
@linux_only
def test_a_daemon_back_fill_yields_to_searches_at_its_lower_priority(home: Path) -> None:
    from daemon_process import DaemonProcess, wait_for

    (home / "config.toml").write_text(
        '[embedding]\nprovider = "local"\nbackground_nice = 4\n[sync]\ndebounce_s = 0.3\n'
        "[chunking]\ntarget_tokens = 60\n"
    )
    words = [
        "garden",
        "planning",
        "harvest",
        "compost",
        "seedling",
        "trellis",
        "irrigation",
        "mulch",
    ]
    for i in range(120):
        body = " ".join(words[(i + k) % len(words)] for k in range(160))
        (home / "memory" / f"n{i:03d}.md").write_text(f"# Note {i}\n\n{body} marker{i:03d}\n")
    d = DaemonProcess(home).start(timeout=120)
    try:
        assert d.proc is not None
        pid = d.proc.pid
        base = os.getpriority(os.PRIO_PROCESS, pid)
        if base > 15:  # as the test above: nice stops at 19, so +4 cannot be seen
            pytest.skip(f"the daemon inherits nice {base}: its threads cannot go 4 lower")
        lowered: set[int] = set()
        with d.client(timeout=120) as c:
            wait_for(lambda: bool(c.search("marker119", mode="keyword")["results"]), 120)
            while c.status()["vectors"]["vectors_pending"] > 0:
                c.search("compost for the seedlings")  # a search in flight now and then
                lowered.update(n for n in _task_nices(pid) if n > base)
            gate = c.status()["daemon"]["search_first"]
        assert gate["enabled"] and gate["nice"] == 4
        assert gate["waits"] > 0  # the back-fill waited for searches
        assert lowered == {base + 4}  # its threads ran lowered, by the setting
    finally:
        d.stop()
