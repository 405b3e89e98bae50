"""Transcripts through the engine and the daemon: deltas, resets, redaction, get of JSONL lines."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import BENCH, make_config, needs_bench
from daemon_process import DaemonProcess, wait_for
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.ingest.session_sync import SessionWatcher

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"


def msg(role: str, text: str) -> str:
    return (
        json.dumps(
            {
                "type": role,
                "message": {"role": role, "content": text},
                "timestamp": "2026-11-01T10:00:00Z",
                "sessionId": "s1",
            }
        )
        + "\n"
    )


def make_engine(home: Path, emb: Any, glob: str) -> Engine:
    return Engine(
        make_config(home, sessions__paths=[glob]), choice=ProviderChoice(emb, "test: local model")
    )


def test_claude_code_session_delta_and_get(home: Path, local_embedder: Any) -> None:
    sessions = home / "claude" / "projects" / "p1"
    sessions.mkdir(parents=True)
    t = sessions / "s1.jsonl"
    t.write_text(
        msg("user", "How do I rotate the nginx logs on the staging box?")
        + msg(
            "assistant", "Use logrotate with a daily rule; the config is in /etc/logrotate.d/nginx."
        )
        + "{not json at all\n"
        + msg("user", f"my key is {SECRET} please keep it")
    )
    eng = make_engine(home, local_embedder, str(home / "claude" / "projects" / "**" / "*.jsonl"))
    try:
        report = eng.sync()
        assert report.sessions and report.sessions["files_changed"] == 1
        assert report.sessions["skipped_lines"] == 1
        summary = eng.status()["transcripts"]
        assert summary["skipped_lines"] == 1 and summary["formats"] == {"claude_code": 1}
        res = eng.searcher.search({"query": "rotate nginx logs", "sources": ["sessions"]})
        top = res["results"][0]
        assert top["source"] == "sessions" and top["path"] == str(t)
        got = eng.searcher.get(
            {
                "path": str(t),
                "from_line": top["start_line"],
                "lines": top["end_line"] - top["start_line"] + 1,
            }
        )
        assert json.loads(got["text"].splitlines()[0])["type"] == "user"  # the JSONL's own lines
        # secrets never reach the index, a snippet, or get
        assert eng.searcher.search(
            {"query": "my key is", "mode": "keyword", "sources": ["sessions"]}
        )
        for r in eng.searcher.search({"query": "key please keep", "min_score": 0})["results"]:
            assert SECRET not in r["snippet"]
        whole = eng.searcher.get({"path": str(t)})["text"]
        assert SECRET not in whole and "REDACTED" in whole
        with eng.reader() as store:
            assert all(SECRET not in c.text for c in store.file_chunks(str(t)))
        # append one message: only the new line is read and indexed
        with t.open("a") as fh:
            fh.write(msg("assistant", "Also compress with zstd to save disk on the archive."))
        delta = eng.sync_sessions([t])
        assert delta["lines"] == 1 and delta["files_reset"] == 0
        assert eng.searcher.search({"query": "zstd archive", "mode": "keyword"})["results"][0][
            "path"
        ] == str(t)
        # a partial last line waits
        with t.open("a") as fh:
            fh.write(msg("user", "half written line")[:20])
        assert eng.sync_sessions([t])["lines"] == 0
        # truncation → re-indexed from the start
        t.write_text(msg("user", "fresh conversation about kubernetes ingress"))
        reset = eng.sync_sessions([t])
        assert reset["files_reset"] == 1
        assert eng.searcher.search({"query": "zstd", "mode": "keyword"})["results"] == []
        assert eng.searcher.search({"query": "kubernetes ingress", "mode": "keyword"})["results"]
        counts = eng.status()["counts"]
        assert counts["chunks"] == counts["fts_rows"] == counts["vectors"]
        t.unlink()
        eng.sync()
        assert eng.status()["counts"]["session_files"] == 0
    finally:
        eng.close()


@needs_bench("transcripts", "spotter")
def test_real_claude_code_sessions(home: Path, local_embedder: Any) -> None:
    src = sorted((BENCH / "transcripts" / "spotter").glob("*.jsonl"))[0]
    dst = home / "real" / src.name
    dst.parent.mkdir()
    shutil.copy(src, dst)
    eng = Engine(
        make_config(home, sessions__paths=[str(home / "real" / "*.jsonl")]),
        choice=ProviderChoice(None, "keyword-only for speed"),
    )
    try:
        report = eng.sync()
        assert report.sessions and report.sessions["messages"] > 10
        res = eng.searcher.search({"query": "tool", "mode": "keyword", "max_results": 3})
        assert res["results"] and all(r["source"] == "sessions" for r in res["results"])
        r = res["results"][0]
        got = eng.searcher.get({"path": r["path"], "from_line": r["start_line"], "lines": 1})
        json.loads(got["text"])  # still valid JSON after redaction
    finally:
        eng.close()


def test_watcher_thresholds(home: Path, tmp_path: Path) -> None:
    t = tmp_path / "a.jsonl"
    t.write_text(msg("user", "hello"))
    cfg = make_config(
        home,
        sessions__paths=[str(tmp_path / "*.jsonl")],
        sessions__delta_bytes=1000,
        sessions__delta_messages=3,
        sessions__quiet_s=5.0,
    )
    w = SessionWatcher(cfg, lambda due: None)
    w._files = [t]
    assert w.poll_once(0.0) == {t}  # unknown file: looked at once
    w.mark_indexed({str(t): t.stat().st_size})
    assert w.poll_once(1.0) == set()
    with t.open("a") as fh:
        fh.write(msg("user", "one"))
    assert w.poll_once(2.0) == set()  # 1 message, 100 bytes: wait
    with t.open("a") as fh:
        fh.write(msg("user", "two") + msg("user", "three"))
    assert w.poll_once(2.5) == {t}  # 3 messages
    w.mark_indexed({str(t): t.stat().st_size})
    with t.open("a") as fh:
        fh.write(msg("user", "x" * 1200))
    assert w.poll_once(3.0) == {t}  # bytes threshold
    w.mark_indexed({str(t): t.stat().st_size})
    with t.open("a") as fh:
        fh.write(msg("user", "quiet"))
    assert w.poll_once(4.0) == set()
    assert w.poll_once(9.5) == {t}  # quiet for 5 s


def test_daemon_makes_new_messages_searchable(home: Path) -> None:
    tdir = home / "sessions"
    tdir.mkdir()
    t = tdir / "chat.jsonl"
    t.write_text(msg("user", "we talked about the lighthouse renovation budget"))
    (home / "config.toml").write_text(
        f'[sessions]\npaths = ["{tdir}/*.jsonl"]\nquiet_s = 1.0\n[sync]\ndebounce_s = 0.3\n'
    )
    d = DaemonProcess(home).start()
    try:
        with d.client() as c:
            wait_for(
                lambda: bool(c.search("lighthouse renovation", mode="keyword")["results"]),
                timeout=60,
            )
            with t.open("a") as fh:
                fh.write(msg("assistant", "the quartermaster approved eleven thousand euros"))
            took = wait_for(
                lambda: bool(c.search("quartermaster euros", mode="keyword")["results"]), timeout=60
            )
            assert took < 10
            hit = c.search("quartermaster euros")["results"][0]
            assert hit["source"] == "sessions" and hit["start_line"] <= 2 <= hit["end_line"]
    finally:
        d.stop()


def test_transcript_linked_from_outside_is_not_indexed(home: Path, local_embedder: Any) -> None:
    sessions = home / "sessions"
    sessions.mkdir()
    outside = home / "elsewhere"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(msg("user", "the vault combination is plover-nine"))
    (sessions / "evil.jsonl").symlink_to(outside / "secret.jsonl")
    (sessions / "ok.jsonl").write_text(msg("user", "the garden needs plover-nine seeds"))
    eng = make_engine(home, local_embedder, str(sessions / "*.jsonl"))
    try:
        eng.sync()
        res = eng.searcher.search({"query": "plover-nine", "mode": "keyword", "min_score": 0})
        assert [Path(r["path"]).name for r in res["results"]] == ["ok.jsonl"]
    finally:
        eng.close()


def test_transcript_swapped_for_a_link_after_its_check_is_not_read(
    home: Path, local_embedder: Any
) -> None:
    """The read keeps to the checked file: a link swapped in after the glob admitted the path
    (or named in an explicit sync) is refused, and the file's old rows stay."""
    sessions = home / "sessions"
    sessions.mkdir()
    outside = home / "elsewhere"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(msg("user", "the vault combination is plover-nine"))
    t = sessions / "a.jsonl"
    t.write_text(msg("user", "the garden needs tulip bulbs"))
    eng = make_engine(home, local_embedder, str(sessions / "*.jsonl"))
    try:
        eng.sync()
        t.unlink()
        t.symlink_to(outside / "secret.jsonl")  # swapped in after the last check
        eng.sync_sessions([t])
        found = eng.searcher.search({"query": "plover-nine", "mode": "keyword", "min_score": 0})
        assert found["results"] == []
        kept = eng.searcher.search({"query": "tulip bulbs", "mode": "keyword", "min_score": 0})
        assert [Path(r["path"]).name for r in kept["results"]] == ["a.jsonl"]
        assert any("out of the transcript folders" in r for r in eng.skipped.values())
    finally:
        eng.close()


def test_transcript_deleted_as_it_is_read_loses_its_rows(
    home: Path, local_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transcript that vanishes between the listing and its read (made certain: deleted as
    it is opened) loses its rows in that sync, as a note does; before, its old text stayed
    searchable until the next sync."""
    from recalld.ingest.session_sync import SessionIndexer

    sessions = home / "sessions"
    sessions.mkdir()
    t = sessions / "a.jsonl"
    t.write_text(msg("user", "the garden needs tulip bulbs"))
    eng = make_engine(home, local_embedder, str(sessions / "*.jsonl"))
    try:
        eng.sync()
        with t.open("a") as f:
            f.write(msg("user", "and a trellis"))
        real = SessionIndexer._open

        def vanishing(self: Any, path: Path) -> Any:
            path.unlink()
            raise FileNotFoundError(2, "No such file or directory", str(path))

        monkeypatch.setattr(SessionIndexer, "_open", vanishing)
        report = eng.sync_sessions([t])
        monkeypatch.setattr(SessionIndexer, "_open", real)
        found = eng.searcher.search({"query": "tulip bulbs", "mode": "keyword", "min_score": 0})
        assert found["results"] == [] and report["files_removed"] == 1, report
    finally:
        eng.close()


def test_watcher_asks_for_a_same_size_edit(home: Path, tmp_path: Path) -> None:
    t = tmp_path / "a.jsonl"
    t.write_text(msg("user", "hello there"))
    cfg = make_config(home, sessions__paths=[str(tmp_path / "*.jsonl")], sessions__quiet_s=5.0)
    w = SessionWatcher(cfg, lambda due: None)
    w._files = [t]
    assert w.poll_once(0.0) == {t}
    w.mark_indexed({str(t): t.stat().st_size})
    assert w.poll_once(0.5) == set()
    time.sleep(0.02)  # a later tick of the mtime clock
    with open(t, "r+b") as f:  # same size, other bytes
        f.seek(t.read_bytes().index(b"hello"))
        f.write(b"HELLO")
    assert w.poll_once(1.0) == {t}
    w.mark_indexed({str(t): t.stat().st_size})
    assert w.poll_once(1.5) == set()


def test_watcher_asks_once_for_files_indexed_before_it_started(home: Path, tmp_path: Path) -> None:
    t = tmp_path / "a.jsonl"
    t.write_text(msg("user", "hello there"))
    cfg = make_config(home, sessions__paths=[str(tmp_path / "*.jsonl")])
    w = SessionWatcher(cfg, lambda due: None)
    w._files = [t]
    # The startup full sync reports its sizes before the first poll; the file may have been
    # edited in place in between, which only the writer (holding the old mtime) can tell.
    w.mark_indexed({str(t): t.stat().st_size})
    assert w.poll_once(0.0) == {t}
    w.mark_indexed({str(t): t.stat().st_size})
    assert w.poll_once(0.5) == set()


def test_a_transcript_that_never_rests_is_indexed_within_the_max_wait(
    home: Path, tmp_path: Path
) -> None:
    """A message every second: never quiet for quiet_s, under both deltas for a long time;
    indexed anyway once its first unindexed bytes have waited max(3 x quiet_s, 4 s)."""
    t = tmp_path / "a.jsonl"
    t.write_text(msg("user", "hello"))
    cfg = make_config(
        home,
        sessions__paths=[str(tmp_path / "*.jsonl")],
        sessions__delta_bytes=1_000_000,
        sessions__delta_messages=1000,
        sessions__quiet_s=2.0,
    )
    w = SessionWatcher(cfg, lambda due: None)
    w._files = [t]
    assert w.poll_once(0.0) == {t}
    w.mark_indexed({str(t): t.stat().st_size})
    due_at = []
    for second in range(1, 20):
        with t.open("a") as fh:
            fh.write(msg("user", f"message {second}"))
        if w.poll_once(float(second)):
            due_at.append(second)
            w.mark_indexed({str(t): t.stat().st_size})
    assert due_at == [7, 14], due_at  # first unindexed bytes at 1 s, 8 s; max wait 6 s
