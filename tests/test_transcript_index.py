"""Chunk kinds in the index: migration 4, delta sync of tool chunks, policy vectors, fair fusion."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest

from conftest import BENCH, make_engine, needs_bench
from recalld.engine import Engine
from recalld.errors import ConfigError
from recalld.index import migrations
from recalld.index.store import FileRow, NewChunk, Store
from recalld.ingest.sessions.chunking import checked_kinds
from recalld.retrieval import fusion

SESSION = BENCH / "transcripts" / "spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
needs_session = needs_bench("transcripts", "spotter", SESSION.name)


def test_migration_4_gives_old_chunks_a_kind(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    conn = apsw.Connection(str(db))
    conn.create_scalar_function("recalld_ident", lambda text: "")
    for number, sql in enumerate(migrations.MIGRATIONS[:3], start=1):
        with conn:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {number}")
    for path, source in (("/m/a.md", "memory"), ("/s/t.jsonl", "sessions")):
        conn.execute(
            "INSERT INTO chunks(path, source, start_line, end_line, hash, text, context) "
            "VALUES (?, ?, 1, 1, 'h', 'old text', '')",
            (path, source),
        )
    conn.close()
    with Store(db) as store:
        assert migrations.current_version(store.conn) == len(migrations.MIGRATIONS)
        rows = store.conn.execute("SELECT source, kind, tool, embed FROM chunks ORDER BY id")
        assert rows.fetchall() == [("memory", "note", "", 1), ("sessions", "message", "", 1)]
        store.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")


def test_keyword_only_chunks_are_never_due_a_vector(tmp_path: Path) -> None:
    from recalld.index.store import Identity

    with Store(tmp_path / "index.sqlite") as store:
        store.set_identity(Identity("k", "test", "m", 4, "{}"))
        chunks = [
            NewChunk(1, 1, "tool: Bash `ls`", "a", kind="tool_call", tool="Bash"),
            NewChunk(2, 2, "tool: huge log tail", "b", kind="tool_output", embed=False),
        ]
        vec = np.ones(4, dtype=np.float32)
        # A vector offered for the keyword-only chunk is not stored either.
        store.replace_file(FileRow("/s/t.jsonl", "sessions", 1, 1, "h", 2), chunks, {"b": vec})
        assert [h for _, h, _ in store.chunks_missing_vectors(10)] == ["a"]
        assert store.counts()["keyword_only_chunks"] == 1
        (row,) = [r for r in store.file_chunks("/s/t.jsonl") if not r.embed]
        assert (row.kind, row.tool) == ("tool_output", "")


# fusion -------------------------------------------------------------------------------------


def test_weighted_fusion_ranks_a_keyword_only_chunk_on_its_keyword_evidence() -> None:
    vector = {1: 0.62, 2: 0.60, 3: 0.30}
    keyword = {4: 1.0, 1: 0.2}  # 4: the identifier's only chunk, keyword-only by policy
    unfair = fusion.weighted(vector, keyword, vector_weight=0.7, text_weight=0.3)
    assert unfair[0].chunk_id == 1 and [f.chunk_id for f in unfair].index(4) > 0
    fair = fusion.weighted(vector, keyword, vector_weight=0.7, text_weight=0.3, no_vector={4})
    assert fair[0].chunk_id == 4 and fair[0].score == pytest.approx(1.0)
    assert fair[0].vector is None and fair[0].keyword == 1.0
    # Chunks that have vectors score exactly as before.
    assert {f.chunk_id: f.score for f in fair if f.chunk_id != 4} == {
        f.chunk_id: f.score for f in unfair if f.chunk_id != 4
    }


def test_rrf_counts_the_keyword_rank_twice_for_a_keyword_only_chunk() -> None:
    fair = fusion.rrf([1, 2], [3, 1], {1: 0.9, 2: 0.8}, {3: 1.0, 1: 0.5}, no_vector={3})
    assert fair[0].chunk_id == 3 and fair[0].score == pytest.approx(1.0)
    plain = fusion.rrf([1, 2], [3, 1], {1: 0.9, 2: 0.8}, {3: 1.0, 1: 0.5})
    assert plain[0].chunk_id == 1


# delta sync ---------------------------------------------------------------------------------


def _index_rows(eng: Engine, path: Path) -> Counter[tuple[Any, ...]]:
    with eng.reader() as store:
        return Counter(
            (r.start_line, r.end_line, r.kind, r.tool, r.embed, r.text)
            for r in store.file_chunks(str(path))
        )


@pytest.mark.slow
@needs_session
def test_delta_sync_builds_the_same_index_as_one_sync(home: Path) -> None:
    lines = SESSION.read_text(encoding="utf-8").split("\n")[:700]
    target = home / "s" / "t.jsonl"
    target.parent.mkdir()
    eng = make_engine(home, None, sessions__paths=[str(home / "s" / "*.jsonl")])
    try:
        step = 0
        with target.open("w", encoding="utf-8") as fh:
            for size in (3, 17, 40, 1, 90, 149, 200, 200):  # delta syncs of uneven sizes
                fh.write("".join(line + "\n" for line in lines[step : step + size]))
                fh.flush()
                step += size
                eng.sync()
        grown = _index_rows(eng, target)
    finally:
        eng.close()
    fresh_home = home / "fresh"
    (fresh_home / "memory").mkdir(parents=True)
    fresh = make_engine(fresh_home, None, sessions__paths=[str(home / "s" / "*.jsonl")])
    try:
        fresh.sync()
        whole = _index_rows(fresh, target)
    finally:
        fresh.close()
    assert grown == whole
    kinds = Counter(k for _, _, k, *_ in whole.elements())
    assert kinds["message"] and kinds["tool_call"] and kinds["tool_output"]


def _claude(kind: str, content: Any) -> str:
    record = {"type": kind, "message": {"role": kind, "content": content}}
    return json.dumps({**record, "timestamp": "2026-11-01T10:00:00Z"}) + "\n"


def test_a_result_arriving_later_than_its_call_is_indexed_with_the_tool_name(home: Path) -> None:
    target = home / "s" / "t.jsonl"
    target.parent.mkdir()
    call = {"type": "tool_use", "id": "t9", "name": "Grep", "input": {"pattern": "zq_marker"}}
    target.write_text(_claude("user", "find it") + _claude("assistant", [call]))
    eng = make_engine(home, None, sessions__paths=[str(home / "s" / "*.jsonl")])
    try:
        eng.sync()
        result = {"type": "tool_result", "tool_use_id": "t9", "content": "src/deep/qx_found.py"}
        with target.open("a", encoding="utf-8") as fh:
            fh.write(_claude("user", [result]))
        eng.sync()
        res = eng.searcher.search({"query": "qx_found", "mode": "keyword"})
        top = res["results"][0]
        assert (top["start_line"], top["kind"], top["tool"]) == (3, "tool_output", "Grep")
        call_hit = eng.searcher.search({"query": "zq_marker", "mode": "keyword"})["results"][0]
        assert (call_hit["start_line"], call_hit["kind"]) == (2, "tool_call")
    finally:
        eng.close()


def test_unknown_embed_kind_is_a_config_error(home: Path) -> None:
    (home / "s").mkdir()
    (home / "s" / "t.jsonl").write_text(_claude("user", "hello"))
    with pytest.raises(ConfigError, match=r"sessions\.embed_kinds: unknown kind 'logs'"):
        make_engine(
            home,
            None,
            sessions__paths=[str(home / "s" / "*.jsonl")],
            sessions__embed_kinds=["logs"],
        )
    with pytest.raises(ConfigError, match=r"sessions\.embed_kinds: unknown kind 'logs'"):
        checked_kinds(["message", "logs"])  # the chunker's own check, for configs built in code


def test_a_message_split_on_the_open_chunks_line_survives_delta_sync(home: Path) -> None:
    # A message longer than a chunk: its first parts are final, its last part opens the chunk
    # that the next sync rewrites from that same line on; the final parts must not be lost.
    long_text = " ".join(f"word{i} alpha{i % 7}" for i in range(400))
    target = home / "s" / "t.jsonl"
    target.parent.mkdir()
    target.write_text(_claude("user", "start") + _claude("assistant", long_text))
    glob = [str(home / "s" / "*.jsonl")]
    eng = make_engine(home, None, sessions__paths=glob)
    try:
        eng.sync()
        with target.open("a", encoding="utf-8") as fh:
            fh.write(_claude("user", "thanks, next step"))
        eng.sync()
        grown = _index_rows(eng, target)
    finally:
        eng.close()
    fresh_home = home / "fresh"
    (fresh_home / "memory").mkdir(parents=True)
    fresh = make_engine(fresh_home, None, sessions__paths=glob)
    try:
        fresh.sync()
        assert grown == _index_rows(fresh, target)
    finally:
        fresh.close()
    assert sum(1 for r in grown.elements() if r[0] == 2) >= 3  # line 2 is in several chunks
    assert any("word5 " in r[5] for r in grown.elements())


def test_the_default_claude_glob_matches_subagent_sessions(tmp_path: Path) -> None:
    from recalld.config import DEFAULT_SESSION_GLOBS
    from recalld.ingest.session_sync import transcript_files

    projects = tmp_path / ".claude" / "projects" / "-home-me-app"
    main = projects / "4d5611e5.jsonl"
    sub = projects / "4d5611e5" / "subagents" / "agent-a2898e3.jsonl"
    sub.parent.mkdir(parents=True)
    main.write_text(_claude("user", "hi"))
    sub.write_text(_claude("user", "sub"))
    (claude_glob,) = [g for g in DEFAULT_SESSION_GLOBS if ".claude" in g]
    found = transcript_files([claude_glob.replace("~", str(tmp_path), 1)])
    assert found == sorted([main, sub])


def test_snippet_of_one_long_line_is_centred_on_the_match() -> None:
    from recalld.retrieval.search import snippet

    line = "pad " * 300 + "found_the_needle_here " + "tail " * 300  # one 2.6 KB line
    got = snippet(line, ["found_the_needle_here"], 700)
    assert "found_the_needle_here" in got and len(got) <= 700
    assert got.startswith("…") and 150 < got.index("found_the_needle_here") < 350
    assert snippet("short text", ["x"], 700) == "short text"
    head = snippet("needle " + "a " * 800, ["needle"], 700)
    assert head.startswith("needle") and len(head) == 700


def test_snippet_shows_a_whole_identifier_over_its_parts() -> None:
    from recalld.retrieval.search import snippet

    # Its parts ("opentelemetry", "lib") fill the line's head; the whole path sits deep in it.
    line = '{"links": [' + '"opentelemetry lib", ' * 60 + '"see lib/opentelemetry_ecto.ex"]}'
    line += "\nopentelemetry lib\n" * 5
    terms = ["lib/opentelemetry_ecto.ex", "lib", "opentelemetry", "ecto", "ex"]
    got = snippet(line, terms, 300)
    assert "lib/opentelemetry_ecto.ex" in got and len(got) <= 300
