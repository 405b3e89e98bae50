"""Transcripts that change under the indexer: in-place edits and endless lines (issue 14, 7/11).

Real files, a real engine (keyword-only: these are about what is read, not about vectors) and a
real daemon whose reads and memory are taken from /proc.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import make_config
from daemon_process import DaemonProcess, wait_for
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine

WORD = "plover-zebra-42"


def msg(role: str, text: str) -> str:
    record = {"type": role, "message": {"role": role, "content": text}, "sessionId": "s1"}
    return json.dumps(record) + "\n"


def conversation(n: int, special: int) -> str:
    return "".join(
        msg("user" if i % 2 else "assistant", f"message {i} about the harbour survey")
        if i != special
        else msg("user", f"the code word is {WORD} do not share it")
        for i in range(n)
    )


def keyword_engine(home: Path, glob: str, **values: Any) -> Engine:
    cfg = make_config(home, sessions__paths=[glob], **values)
    return Engine(cfg, choice=ProviderChoice(None, "keyword-only"))


def hits(eng: Engine, query: str) -> int:
    res = eng.searcher.search(
        {"query": query, "mode": "keyword", "min_score": 0, "sources": ["sessions"]}
    )
    return len(res["results"])


def scrub(path: Path, word: str) -> None:
    """Overwrite ``word`` in place with as many x's: same inode, same size."""
    time.sleep(0.02)  # mtime/ctime tick on a coarse clock: make the edit visibly later
    data = path.read_bytes()
    at = data.index(word.encode())
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"x" * len(word))


def test_same_size_scrub_in_the_middle_is_reindexed(home: Path) -> None:
    tdir = home / "sessions"
    tdir.mkdir()
    t = tdir / "chat.jsonl"
    t.write_text(conversation(400, special=200))
    eng = keyword_engine(home, str(tdir / "*.jsonl"))
    try:
        eng.sync()
        assert hits(eng, WORD) == 1
        size = t.stat().st_size
        scrub(t, WORD)
        assert t.stat().st_size == size
        report = eng.sync_sessions([t])
        assert report["files_reset"] == 1
        assert hits(eng, WORD) == 0 and hits(eng, "harbour survey") > 0
        # the full sync path sees it too
        time.sleep(0.02)
        with open(t, "r+b") as f:
            data = f.read()
            f.seek(data.index(b"message 300"))
            f.write(b"mossage 300")
        assert eng.sync().sessions["files_reset"] == 1  # type: ignore[index]
        assert hits(eng, "mossage") == 1
        # a touch alone re-hashes but re-indexes nothing
        time.sleep(0.02)
        t.touch()
        assert eng.sync_sessions([t])["files_reset"] == 0
    finally:
        eng.close()


def test_endless_line_is_skipped_counted_and_later_lines_indexed(home: Path) -> None:
    tdir = home / "sessions"
    tdir.mkdir()
    t = tdir / "chat.jsonl"
    t.write_text(msg("user", "before the flood of bytes"))
    with t.open("a") as f:
        f.write('{"type":"user","message":{"content":"' + "y" * 2_500_000)
    eng = keyword_engine(home, str(tdir / "*.jsonl"), sessions__max_line_bytes=1_000_000)
    try:
        first = eng.sync().sessions
        assert first and first["lines"] == 1
        assert hits(eng, "flood bytes") == 1
        with t.open("a") as f:
            f.write('"}}\n' + msg("assistant", "after the flood came the lighthouse"))
        report = eng.sync_sessions([t])
        assert report["lines"] == 1 and report["long_lines"] == 1
        assert hits(eng, "lighthouse") == 1
        summary = eng.status()["transcripts"]
        assert summary["long_lines"] == 1
        assert summary["skipped_by_file"] == [{"path": str(t), "skipped_lines": 1, "long_lines": 1}]
        eng.close()
        eng = keyword_engine(home, str(tdir / "*.jsonl"), sessions__max_line_bytes=1_000_000)
        assert eng.sync().sessions["lines"] == 0  # type: ignore[index]  # nothing read again
    finally:
        eng.close()


def _proc(pid: int, name: str, key: str) -> int:
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    raise KeyError(key)


@pytest.mark.slow
def test_daemon_reads_an_endless_line_once_with_bounded_memory(home: Path) -> None:
    tdir = home / "sessions"
    tdir.mkdir()
    t = tdir / "chat.jsonl"
    t.write_text(msg("user", "the quay before the endless line"))
    line = 200 * 1024 * 1024
    with t.open("r+b") as f:  # a 200 MB line of NUL bytes without a newline: sparse, no disk
        f.truncate(t.stat().st_size + line)
    (home / "config.toml").write_text(
        f'[sessions]\npaths = ["{tdir}/*.jsonl"]\nquiet_s = 0.5\n'
        '[embedding]\nprovider = "none"\n[sync]\ndebounce_s = 0.3\n'
    )
    d = DaemonProcess(home).start()
    try:
        assert d.proc is not None
        pid = d.proc.pid
        with d.client() as c:
            wait_for(lambda: bool(c.search("quay endless", mode="keyword")["results"]), 60)
            d.wait_idle()
            time.sleep(1.0)  # let the first scan of the line finish
            before = _proc(pid, "io", "rchar")
            time.sleep(8.0)  # 16 watcher polls, more than one quiet period
            reread = _proc(pid, "io", "rchar") - before
            assert reread < 5 * 1024 * 1024, f"{reread} bytes read while nothing changed"
            with t.open("a") as f:
                f.write("\n" + msg("assistant", "after it the breakwater was rebuilt"))
            took = wait_for(lambda: bool(c.search("breakwater", mode="keyword")["results"]), 60)
            assert took < 10
            peak_kb = _proc(pid, "status", "VmHWM:")
            print(f"idle re-read {reread} B; next line after {took:.2f} s; peak {peak_kb} kB")
            assert peak_kb < 150 * 1024, f"daemon peak RSS {peak_kb} kB"
            st = c.status()
            assert st["transcripts"]["long_lines"] == 1
    finally:
        d.stop()


def test_daemon_watcher_sees_a_same_size_scrub(home: Path) -> None:
    tdir = home / "sessions"
    tdir.mkdir()
    t = tdir / "chat.jsonl"
    t.write_text(conversation(400, special=200))
    (home / "config.toml").write_text(
        f'[sessions]\npaths = ["{tdir}/*.jsonl"]\nquiet_s = 1.0\n'
        '[embedding]\nprovider = "none"\n[sync]\ndebounce_s = 0.3\n'
    )
    d = DaemonProcess(home).start()
    try:
        with d.client() as c:

            def found(query: str) -> int:
                return len(c.search(query, mode="keyword", min_score=0)["results"])

            wait_for(lambda: found(WORD) == 1, 60)
            d.wait_idle()
            scrub(t, WORD)
            took = wait_for(lambda: found(WORD) == 0, 30)
            print(f"scrubbed word gone from search after {took:.2f} s")
            assert took < 5
            assert found("harbour survey") > 0
    finally:
        d.stop()


@pytest.mark.slow
def test_huge_word_in_a_message_is_chunked_in_linear_time() -> None:
    # A pasted base64 blob is one "word": the session chunker used to binary-search the rest
    # of the text for every part (quadratic: 40 s for 107 KB, 250 chars counted per char of a
    # 200 KB blob). Now each char is counted a small constant number of times (7 measured).
    import base64
    import random

    from recalld.ingest.sessions import SessionChunker, TranscriptParser
    from recalld.tokens import default_tokenizer

    real = default_tokenizer().count
    counted = 0

    def count(s: str) -> int:
        nonlocal counted
        counted += len(s)
        return real(s)

    blob = base64.b64encode(random.Random(1).randbytes(150_000)).decode()
    line = json.dumps({"type": "user", "message": {"role": "user", "content": "see " + blob}})
    messages = TranscriptParser().feed([(1, line.encode())])
    chunker = SessionChunker(count, max_tokens=256, target_tokens=160)
    chunks = chunker.feed(messages) + chunker.pending()
    assert all(real(c.text) <= 254 for c in chunks)
    assert any(blob[:40] in c.text for c in chunks) and any(blob[-40:] in c.text for c in chunks)
    assert counted < 12 * len(blob), counted / len(blob)


def test_index_from_the_previous_version_is_not_reindexed(home: Path) -> None:
    # Tail states saved before this version have no "tail" entry in their JSON state: the first
    # sync hashes what was read (one read of the file) and re-indexes nothing.
    tdir = home / "sessions"
    tdir.mkdir()
    t = tdir / "chat.jsonl"
    t.write_text(conversation(300, special=150))
    eng = keyword_engine(home, str(tdir / "*.jsonl"))
    try:
        eng.sync()
        assert eng.writer is not None
        rows = list(eng.writer.conn.execute("SELECT path, state FROM session_state"))
        with eng.writer.conn:
            for path, state in rows:
                old = json.loads(state)
                old.pop("tail")
                old.pop("long_lines")
                eng.writer.conn.execute(
                    "UPDATE session_state SET state = ? WHERE path = ?", (json.dumps(old), path)
                )
        report = eng.sync_sessions([t])
        assert report["files_reset"] == 0 and report["lines"] == 0
        assert hits(eng, WORD) == 1
        scrub(t, WORD)  # and from now on a same-size edit is caught
        assert eng.sync_sessions([t])["files_reset"] == 1
        assert hits(eng, WORD) == 0
    finally:
        eng.close()
