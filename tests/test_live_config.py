"""Config edits reach a running ``recalld serve`` (issue 15): new folders and globs, weights,
invalid edits, SIGHUP, rebuilds; and the log's and status's first lines say where things are.

Keyword-only daemons (``embedding.provider = "none"``): nothing here depends on vectors, and a
daemon without the model starts in a fraction of the time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, wait_for

BASE = '[embedding]\nprovider = "none"\n[sync]\ndebounce_s = 0.2\n'


def save(home: Path, text: str) -> None:
    """Save config.toml as editors do: a temporary file renamed over the old one."""
    tmp = home / ".config.toml.tmp"
    tmp.write_text(text)
    tmp.replace(home / "config.toml")


def settings(home: Path, memory: list[Path], globs: list[str], extra: str = "") -> str:
    return (
        BASE
        + f"[memory]\npaths = {json.dumps([str(p) for p in memory])}\n"
        + f"[sessions]\npaths = {json.dumps(globs)}\n"
        + extra
    )


def names(res: Any) -> list[str]:
    return [Path(r["path"]).name for r in res["results"]]


@pytest.fixture
def daemon(home: Path) -> Iterator[DaemonProcess]:
    save(home, settings(home, [home / "memory"], []))
    for i in range(4):
        write(home / "memory" / f"kelp{i}.md", f"# Kelp {i}\n\nKelp forest survey number {i}.\n")
    d = DaemonProcess(home).start()
    d.wait_idle()
    yield d
    d.stop()


def claude_line(text: str) -> str:
    msg = {"type": "user", "message": {"role": "user", "content": text}, "sessionId": "s1"}
    return json.dumps(msg) + "\n"


def test_added_memory_folder_and_glob_are_indexed_and_removed_ones_dropped(
    daemon: DaemonProcess, home: Path
) -> None:
    more = home / "more"
    write(more / "tides.md", "# Tides\n\nThe spring tide table for Brest harbour.\n")
    write(home / "agent" / "s1.jsonl", claude_line("remember the quokka feeding schedule"))
    with daemon.client() as c:
        assert c.search("Brest harbour", mode="keyword")["results"] == []
        save(home, settings(home, [home / "memory", more], [str(home / "agent" / "*.jsonl")]))
        took = wait_for(lambda: "tides.md" in names(c.search("Brest harbour", mode="keyword")))
        took_glob = wait_for(
            lambda: "s1.jsonl" in names(c.search("quokka feeding", mode="keyword"))
        )
        st = c.status()
        assert str(more) in st["memory_roots"]
        assert st["session_globs"] == [str(home / "agent" / "*.jsonl")]
        assert st["config"]["error"] is None and st["config_error"] is None
        assert "memory.paths" in st["config"]["last_change"]["keys"]
        assert st["daemon"]["watching"]
        assert took < 8, f"the new folder was searchable after {took:.1f} s"
        # The new folder is watched, not just scanned once.
        write(more / "moon.md", "# Moon\n\nA lunar eclipse over the estuary.\n")
        wait_for(lambda: "moon.md" in names(c.search("lunar eclipse", mode="keyword")), 10)
        # Removed from the config: its rows go (the index mirrors the configured folders).
        save(home, settings(home, [home / "memory"], []))
        wait_for(lambda: c.search("Brest harbour", mode="keyword")["results"] == [], 10)
        wait_for(lambda: c.search("quokka feeding", mode="keyword")["results"] == [], 10)
        assert "kelp0.md" in names(c.search("kelp forest survey", mode="keyword"))
    print(f"new folder searchable {took:.2f} s after the save, transcript {took_glob:.2f} s later")


def test_weight_edit_applies_to_the_next_search(daemon: DaemonProcess, home: Path) -> None:
    with daemon.client() as c:
        assert len(c.search("kelp forest survey", mode="keyword")["results"]) == 4
        save(home, settings(home, [home / "memory"], [], "[search]\nmax_results = 2\n"))
        wait_for(lambda: len(c.search("kelp forest survey", mode="keyword")["results"]) == 2, 10)
        assert c.status()["config"]["last_change"]["keys"] == ["search.max_results"]
        # A weight: the explanation shows the configured fusion weights.
        extra = '[search]\nmax_results = 2\nquery_shape = false\nfusion = "weighted"\n'
        save(home, settings(home, [home / "memory"], [], extra + "text_weight = 0.55\n"))

        def keyword_weight() -> Any:
            res = c.search("kelp forest survey", mode="keyword", explain=True)
            return res["explain"]["weights"]["keyword"]

        wait_for(lambda: keyword_weight() == 0.55, 10)


@pytest.mark.slow
def test_invalid_edit_is_refused_and_the_old_config_kept(daemon: DaemonProcess, home: Path) -> None:
    good = settings(home, [home / "memory"], [], "[search]\nmax_results = 3\n")
    with daemon.client() as c:
        save(home, good)
        wait_for(lambda: len(c.search("kelp forest survey", mode="keyword")["results"]) == 3, 10)
        save(home, good.replace("max_results = 3", "max_results = 500"))
        wait_for(lambda: c.status()["config_error"] is not None, 10)
        st = c.status()
        assert "search.max_results must be between 1 and 50" in st["config_error"]
        assert any("not applied" in w for w in st["warnings"])
        assert len(c.search("kelp forest survey", mode="keyword")["results"]) == 3  # old kept
        save(home, good + "[search\n")  # not TOML at all
        wait_for(lambda: "not valid TOML" in (c.status()["config_error"] or ""), 10)
        assert len(c.search("kelp forest survey", mode="keyword")["results"]) == 3
        save(home, good.replace("max_results = 3", "max_results = 1"))
        wait_for(lambda: c.status()["config_error"] is None, 10)
        assert len(c.search("kelp forest survey", mode="keyword")["results"]) == 1
    log = daemon.log.read_text()
    assert "config not applied" in log and "search.max_results must be between 1 and 50" in log


def test_sighup_reloads_at_once(daemon: DaemonProcess, home: Path) -> None:
    assert daemon.proc is not None
    with daemon.client() as c:
        save(home, settings(home, [home / "memory"], [], "[search]\nmax_results = 1\n"))
        os.kill(daemon.proc.pid, signal.SIGHUP)  # before the poll sees the save settle
        wait_for(lambda: len(c.search("kelp forest survey", mode="keyword")["results"]) == 1, 5)
        os.kill(daemon.proc.pid, signal.SIGHUP)
        wait_for(lambda: "config reloaded (SIGHUP): nothing changed" in daemon.log.read_text())
        assert c.status()["daemon"]["pid"] == daemon.proc.pid  # still the same process
    assert "config reloaded (SIGHUP): search.max_results changed" in daemon.log.read_text()


def test_chunking_edit_starts_a_rebuild_with_its_reason(daemon: DaemonProcess, home: Path) -> None:
    with daemon.client() as c:
        before = c.status()["identity"]["chunking"]
        save(home, settings(home, [home / "memory"], [], "[chunking]\ntarget_tokens = 120\n"))
        wait_for(lambda: c.status()["config"]["rebuild"] is not None, 10)
        wait_for(lambda: c.status()["config"]["rebuild"]["state"] == "done", 60)
        st = c.status()
        assert st["config"]["rebuild"]["reason"] == "the chunking settings changed"
        assert json.loads(st["identity"]["chunking"])["target_tokens"] == 120
        assert st["identity"]["chunking"] != before and "reindex" not in str(st["degraded"])
        assert "kelp0.md" in names(c.search("kelp forest survey", mode="keyword"))
    assert "config change needs a full rebuild: the chunking settings changed" in (
        daemon.log.read_text()
    )


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", *args],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_log_and_status_open_with_where_things_are(daemon: DaemonProcess, home: Path) -> None:
    first = daemon.log.read_text().splitlines()[:4]
    assert f"notes: memory folders {home / 'memory'}" in first[0]
    assert "transcripts: none" in first[1]
    assert f"index: {home / 'index.sqlite'}" in first[2]
    assert f"config: {home / 'config.toml'} (edits apply live, SIGHUP reloads)" in first[3]
    out = run(home, "status").stdout.splitlines()
    assert out[0] == f"memory:    {home / 'memory'} (watched)"
    assert out[1].startswith("sessions:  (none")
    assert out[2] == f"index:     {home / 'index.sqlite'}"
    assert out[3].startswith(f"config:    {home / 'config.toml'} (loaded ")


@pytest.mark.slow
def test_search_without_daemon_says_the_index_is_stale(home: Path) -> None:
    save(home, settings(home, [home / "memory"], []))
    note = write(home / "memory" / "log.md", "# Log\n\nFirst entry about herons.\n")
    run(home, "sync")
    fresh = run(home, "search", "herons", "--mode", "keyword")
    assert "log.md" in fresh.stdout and "no recalld daemon" not in fresh.stderr
    with note.open("a") as fh:
        fh.write("\nSecond entry about cormorants.\n")
    stale = run(home, "search", "cormorants", "--mode", "keyword")
    assert "no results" in stale.stdout
    assert "no recalld daemon is running and the index was last updated" in stale.stderr
    assert "1 file new or changed since then (e.g. " in stale.stderr and "log.md" in stale.stderr
    assert "`recalld serve`" in stale.stderr and "`recalld sync`" in stale.stderr
    run(home, "sync")
    synced = run(home, "search", "cormorants", "--mode", "keyword")
    assert "log.md" in synced.stdout and "no recalld daemon" not in synced.stderr
    out = run(home, "status").stdout.splitlines()
    assert (
        out[0] == f"memory:    {home / 'memory'} (not watched: no daemon running (`recalld serve`))"
    )


@pytest.mark.slow
def test_a_skipped_file_is_listed_and_not_stale_until_it_changes(home: Path) -> None:
    save(home, settings(home, [home / "memory"], []))
    write(home / "memory" / "log.md", "# Log\n\nAn entry about herons.\n")
    odd = home / "memory" / "odd.md"
    odd.write_bytes(b"# Odd\n\nzanzibar \x00 in a note\n")
    run(home, "sync")
    fresh = run(home, "search", "herons", "--mode", "keyword")
    assert "log.md" in fresh.stdout and "new or changed" not in fresh.stderr, fresh.stderr
    status = run(home, "status").stdout
    assert "skipped:   1 file not indexed" in status
    assert f"{odd}: looks binary (NUL bytes)" in status
    with odd.open("ab") as fh:  # edited: a sync may index it now, so the note says so
        fh.write(b"more\n")
    stale = run(home, "search", "herons", "--mode", "keyword")
    assert "1 file new or changed since then" in stale.stderr and "odd.md" in stale.stderr


def test_provider_edit_resolves_the_embedder_again(daemon: DaemonProcess, home: Path) -> None:
    """Keyword-only to the local model: vectors are back-filled (same chunks, no rebuild)."""
    with daemon.client() as c:
        assert c.status()["counts"]["vectors"] == 0
        save(home, settings(home, [home / "memory"], []).replace('"none"', '"local"'))
        wait_for(lambda: c.status()["provider"] == "local/all-MiniLM-L6-v2", 60)
        wait_for(lambda: c.status()["counts"]["vectors"] == c.status()["counts"]["chunks"], 60)
        st = c.status()
        assert st["config"]["rebuild"] is None and st["degraded"] is None
        hit = c.search("underwater seaweed woods", mode="vector", min_score=0.0)["results"][0]
        assert hit["scores"]["vector"] is not None and hit["path"].endswith(".md")


def test_config_watcher_sees_a_file_created_later_and_in_place_writes(home: Path) -> None:
    """No config.toml at start (a fresh install), then created, then written in place."""
    from recalld.serve.config_watch import ConfigWatcher

    path = home / "conf" / "config.toml"
    calls: list[str] = []
    watcher = ConfigWatcher(path, calls.append, poll_s=0.05)
    watcher.start()
    try:
        time.sleep(0.2)
        assert calls == []
        path.parent.mkdir()
        path.write_text("[search]\nmax_results = 2\n")
        wait_for(lambda: calls == ["the config file changed"], 5)
        with path.open("r+") as fh:  # in place, same size: mtime/ctime tell
            fh.write("[search]\nmax_results = 3\n")
        wait_for(lambda: len(calls) == 2, 5)
        watcher.ask()
        wait_for(lambda: calls[-1] == "SIGHUP", 5)
        time.sleep(0.3)
        assert len(calls) == 3  # nothing changed since: no further reload
    finally:
        watcher.stop()


def test_diff_sorts_keys_by_what_they_need() -> None:
    from recalld.config import Config
    from recalld.serve.config_watch import diff

    old = Config({})
    weights = diff(old, old.with_overrides({"search.min_score": 0.5}))
    assert weights.keys == ("search.min_score",)
    assert not (weights.resync or weights.chunking or weights.provider or weights.rewatch_memory)
    roots = diff(old, old.with_overrides({"memory.paths": ["/tmp/x"]}))
    assert roots.resync and roots.rewatch_memory and not roots.chunking
    thinking = diff(old, old.with_overrides({"sessions.include_thinking": True}))
    assert thinking.chunking and not thinking.resync
    model = diff(old, old.with_overrides({"embedding.model": "other"}))
    assert model.provider and not model.chunking


def test_freshness_counts_deleted_files_and_says_when_cut_short(home: Path) -> None:
    from conftest import make_engine
    from recalld.ingest import freshness

    for i in range(3):
        write(home / "memory" / f"n{i}.md", f"# N{i}\n\nnote {i}\n")
    eng = make_engine(home, None)
    try:
        eng.sync()
        (home / "memory" / "n0.md").unlink()
        with eng.reader() as store:
            found = freshness.check(store, eng.config)
            cut = freshness.check(store, eng.config, budget_s=0.0)
    finally:
        eng.close()
    assert found.complete and found.removed == 1 and found.changed == []
    line = freshness.note(found)
    assert line is not None and "1 deleted since then" in line
    assert not cut.complete and cut.removed == 0  # not counted from a partial walk
    assert "could not check the files" in (freshness.note(cut) or "")
