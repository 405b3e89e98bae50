"""Search filters and per-hit freshness in-process: a real engine, SQLite file, model and files.

Notes dated by front matter, by a daily-note name and by mtime; tags in front matter and inline;
notes in two top folders; a Claude Code transcript with its own cwd, session id and message
times. Every filter must hold in every mode (both channels filter before ranking).
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import make_engine, write
from recalld.engine import Engine
from recalld.errors import BadRequest
from recalld.index.store import FileRow, Identity, NewChunk, Store

MODES = ("hybrid", "keyword", "vector")
SESSION_ID = "5d1c0f7e-0000-4000-8000-00000000beef"
CWD = "/home/dev/src/billing-api"
NOW = datetime.now(UTC)


def iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


def claude_record(role: str, text: str, when: datetime) -> str:
    rec = {
        "type": role,
        "message": {"role": role, "content": text},
        "timestamp": iso(when),
        "cwd": CWD,
        "sessionId": SESSION_ID,
    }
    return json.dumps(rec) + "\n"


def transcript_lines() -> str:
    old = NOW - timedelta(days=400)
    new = NOW - timedelta(hours=2)
    return (
        claude_record("user", "how do we rotate the invoice signing key?", old)
        + claude_record("assistant", "Rotate the invoice signing key with the kms tool.", old)
        + "".join(
            claude_record("user", f"long unrelated padding about lunch number {i} " * 8, old)
            for i in range(12)
        )
        + claude_record("user", "the invoice signing key rotation failed again today", new)
        + claude_record("assistant", "The invoice signing key rotation needs the admin role.", new)
    )


def populate(home: Path) -> Path:
    """The notes and transcript every test here searches; returns the transcript's path."""
    mem = home / "memory"
    write(
        mem / "billing" / "decisions.md",
        "---\ntitle: Billing decisions\ndate: 2025-01-10\ntags: [decision, billing]\n---\n\n"
        "# Invoice signing\n\nWe sign every invoice with the invoice signing key in the kms.\n",
    )
    write(mem / "2025-02-03.md", "# Daily\n\nChecked the invoice signing key expiry date.\n")
    write(
        mem / "ops" / "runbook.md",
        "# Runbook\n\n## Keys\n\nThe invoice signing key lives in the vault. #security\n\n"
        "## Lunch\n\nNothing about keys here, only the invoice lunch order.\n",
    )
    old = time.time() - 30 * 86400
    os.utime(mem / "ops" / "runbook.md", (old, old))  # dated by its mtime: 30 days ago
    transcript = home / "sessions" / "-home-dev-src-billing-api" / f"{SESSION_ID}.jsonl"
    write(transcript, transcript_lines())
    return transcript


@pytest.fixture
def engine(home: Path, local_embedder: Any) -> Any:
    populate(home)
    eng = make_engine(home, local_embedder, sessions__paths=[str(home / "sessions" / "**/*.jsonl")])
    eng.sync()
    yield eng
    eng.close()


def hits(eng: Engine, **params: Any) -> list[dict[str, Any]]:
    params.setdefault("query", "invoice signing key")
    params.setdefault("min_score", 0.0)
    params.setdefault("max_results", 20)
    return list(eng.searcher.search(params)["results"])


def names(results: list[dict[str, Any]]) -> set[str]:
    return {Path(r["path"]).name for r in results}


def test_every_hit_says_how_fresh_it_is(engine: Engine, home: Path) -> None:
    results = hits(engine)
    assert results
    for r in results:
        assert r["stale"] is False
        for key in ("modified", "indexed", "date"):
            assert isinstance(r[key], str) and r[key].endswith("Z"), (key, r)
            datetime.fromisoformat(r[key].replace("Z", "+00:00"))
    by_name = {Path(r["path"]).name: r for r in results}
    assert by_name["decisions.md"]["date"] == "2025-01-10T00:00:00Z"  # front matter
    assert by_name["2025-02-03.md"]["date"] == "2025-02-03T00:00:00Z"  # daily-note name
    runbook = by_name["runbook.md"]
    assert runbook["date"] == runbook["modified"]  # no other date: its mtime
    session = [r for r in results if r["source"] == "sessions"]
    assert session and all(r["date"][:4] in (str(NOW.year), str(NOW.year - 1)) for r in session)


def test_stale_after_an_edit_until_the_next_sync(engine: Engine, home: Path) -> None:
    note = home / "memory" / "2025-02-03.md"
    note.write_text(note.read_text() + "\nRenewed the invoice signing key.\n")
    later = time.time() + 5
    os.utime(note, (later, later))
    results = hits(engine, mode="keyword")
    mine = [r for r in results if r["path"] == str(note)]
    others = [r for r in results if r["path"] != str(note)]
    assert mine and all(r["stale"] is True for r in mine)
    assert others and all(r["stale"] is False for r in others)
    engine.sync()
    assert all(r["stale"] is False for r in hits(engine, mode="keyword"))
    note.unlink()  # gone from disk, still indexed: stale, its indexed mtime shown
    gone = [r for r in hits(engine, mode="keyword") if r["path"] == str(note)]
    assert gone and gone[0]["stale"] is True and gone[0]["modified"]


@pytest.mark.parametrize("mode", MODES)
def test_tags_from_front_matter_and_inline(engine: Engine, mode: str) -> None:
    assert names(hits(engine, tags=["decision"], mode=mode)) == {"decisions.md"}
    # An inline #tag marks its own section only, not the whole note.
    tagged = hits(engine, tags=["#Security"], mode=mode)
    assert names(tagged) == {"runbook.md"}
    assert all("vault" in r["snippet"] for r in tagged)
    assert names(hits(engine, tags=["security", "decision"], mode=mode)) == {
        "decisions.md",
        "runbook.md",
    }
    assert hits(engine, tags=["nosuchtag"], mode=mode) == []


@pytest.mark.parametrize("mode", MODES)
def test_since_and_until(engine: Engine, mode: str) -> None:
    recent = hits(engine, since="7d", mode=mode)
    assert recent and all(r["source"] == "sessions" for r in recent)
    assert all(r["date"] >= iso(NOW - timedelta(days=7)) for r in recent)
    month = names(hits(engine, since="60d", mode=mode))
    assert "runbook.md" in month and "decisions.md" not in month
    early = names(hits(engine, until="2025-01-31", mode=mode))
    assert "decisions.md" in early and "2025-02-03.md" not in early
    window = names(hits(engine, since="2025-02-01", until="2025-02-03", mode=mode))
    assert window == {"2025-02-03.md"}  # a bare until date includes that day
    assert hits(engine, since="12h", until="1h", mode=mode)  # the messages of two hours ago


@pytest.mark.parametrize("mode", MODES)
def test_project_and_session(engine: Engine, home: Path, mode: str) -> None:
    assert names(hits(engine, project="billing", mode=mode)) == {"decisions.md"}  # top folder
    by_name = hits(engine, project="billing-api", mode=mode)  # the transcript's cwd, by name
    assert by_name and {r["source"] for r in by_name} == {"sessions"}
    assert names(hits(engine, project=CWD + "/", mode=mode)) == names(by_name)
    assert hits(engine, project="api", mode=mode) == []  # a whole folder name, not a piece
    by_id = hits(engine, session=SESSION_ID, mode=mode)
    assert by_id and {r["source"] for r in by_id} == {"sessions"}
    both = hits(engine, session=SESSION_ID, since="7d", project="billing-api", mode=mode)
    assert both and all(r["date"] >= iso(NOW - timedelta(days=1))[:10] for r in both)
    assert hits(engine, session="another-session", mode=mode) == []


def test_a_narrow_filter_still_fills_max_results(home: Path, local_embedder: Any) -> None:
    old = time.time() - 90 * 86400
    for i in range(300):
        note = write(home / "memory" / "old" / f"n{i}.md", f"# Note {i}\n\ncache eviction {i}\n")
        os.utime(note, (old, old))
    for i in range(8):
        write(home / "memory" / "new" / f"r{i}.md", f"# Recent {i}\n\ncache eviction r{i}\n")
    eng = make_engine(home, local_embedder)
    eng.sync()
    try:
        for mode in MODES:
            res = eng.searcher.search(
                {"query": "cache eviction", "max_results": 6, "since": "7d", "mode": mode}
            )
            assert len(res["results"]) == 6, (mode, res["results"])
            assert all("/new/" in r["path"] for r in res["results"]), mode
    finally:
        eng.close()


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"since": "last week"}, "since must be an ISO date"),
        ({"until": "7x"}, "until must be an ISO date"),
        ({"since": 7}, "since must be"),
        ({"since": "1d", "until": "7d"}, "must be before until"),
        ({"tags": [3]}, "tags must be a list of strings"),
        ({"tags": ["#", " "]}, "tags must name at least one tag"),
        ({"project": ""}, "project must be a non-empty string"),
        ({"session": ["a"]}, "session must be a non-empty string"),
    ],
)
def test_bad_filters_are_refused_clearly(engine: Engine, params: dict[str, Any], says: str) -> None:
    with pytest.raises(BadRequest, match=says):
        engine.searcher.search({"query": "invoice", **params})


def test_rows_indexed_before_the_facts_are_back_filled(home: Path, local_embedder: Any) -> None:
    populate(home)
    globs = [str(home / "sessions" / "**/*.jsonl")]
    eng = make_engine(home, local_embedder, sessions__paths=globs)
    eng.sync()
    index = eng.index_path
    eng.close()
    # The index as schema 5 left it: no date column, no tags, no file facts, no tombstones.
    store = Store(index)
    with store.conn:
        store.conn.execute(
            "DROP TRIGGER chunk_tags_ad; DROP TRIGGER file_facts_ad; DROP INDEX chunks_by_date;"
            "ALTER TABLE chunks DROP COLUMN date; DROP TABLE chunk_tags; DROP TABLE file_facts;"
            "DROP TABLE tombstones;"
            "PRAGMA user_version = 5"
        )
    store.close()
    eng = make_engine(home, local_embedder, sessions__paths=globs)
    try:
        report = eng.sync()
        assert report.chunks_written == 0  # nothing re-chunked, nothing embedded
        assert names(hits(eng, tags=["decision"])) == {"decisions.md"}
        assert names(hits(eng, tags=["security"])) == {"runbook.md"}
        assert names(hits(eng, until="2025-01-31")) >= {"decisions.md"}
        assert {r["source"] for r in hits(eng, session=SESSION_ID)} == {"sessions"}
        assert {r["source"] for r in hits(eng, project="billing-api")} == {"sessions"}
        assert all(r["date"] for r in hits(eng))
    finally:
        eng.close()


@pytest.mark.parametrize("keep", [40, 300, 2500])
def test_vector_channel_scores_a_filters_rows_exactly(tmp_path: Path, keep: int) -> None:
    """Few kept rows are scored alone (no scan), more through the masked scan: either way the
    answer is the exact top k of the kept rows."""
    import numpy as np

    from recalld.index.vector_index import FEW_ALLOWED_SHARE, VectorIndex

    dims, files, per_file = 32, 300, 20  # 6,000 vectors: the projected prefilter is on
    store = Store(tmp_path / "index.sqlite")
    store.set_identity(Identity("k", "t/m", "m", dims, "{}"))
    rng = np.random.default_rng(5)
    mat = rng.normal(size=(files * per_file, dims)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    for f in range(files):
        chunks = [NewChunk(j + 1, j + 1, f"t {f}-{j}", f"h{f}-{j}") for j in range(per_file)]
        vecs = {c.hash: mat[f * per_file + j] for j, c in enumerate(chunks)}
        store.replace_file(FileRow(f"/m/f{f}.md", "memory", 1, 1, f"x{f}", per_file), chunks, vecs)
    index = VectorIndex.load(store, dims)
    ids = np.asarray([r[0] for r in store.conn.execute("SELECT id FROM chunks ORDER BY id")])
    store.close()
    assert keep * FEW_ALLOWED_SHARE <= len(ids) or keep == 2500  # both paths are covered
    allowed = np.sort(rng.choice(ids, keep, replace=False)).astype(np.int64)
    by_id = dict(zip(ids.tolist(), mat, strict=True))
    for q in mat[:5] + 0.1:
        q = (q / np.linalg.norm(q)).astype(np.float32)
        got = index.search(q, 24, allowed)
        exact = sorted(((float(by_id[int(i)] @ q), int(i)) for i in allowed), reverse=True)[:24]
        assert [i for i, _ in got] == [i for _, i in exact]
        assert all(abs(s - e) < 1e-5 for (_, s), (e, _) in zip(got, exact, strict=True))


def test_a_growing_transcript_keeps_its_message_times(engine: Engine, home: Path) -> None:
    """Lines appended later (a delta sync, the open chunk rewritten) are dated by their own
    times, to the second; the transcript keeps its session and project."""
    transcript = home / "sessions" / "-home-dev-src-billing-api" / f"{SESSION_ID}.jsonl"
    # Taken now, not from the module's NOW: a loaded suite may reach this test an hour after
    # the import, and the record must stay inside the ``since="1h"`` window it is searched by.
    when = (datetime.now(UTC) - timedelta(minutes=10)).replace(microsecond=0)
    with transcript.open("a") as f:
        f.write(claude_record("user", "zanzibar checkout totals look wrong", when))
        f.write(claude_record("assistant", "The zanzibar totals skip the tax line.", when))
    engine.sync()
    found = hits(engine, query="zanzibar totals", since="1h", session=SESSION_ID)
    assert found and all(r["date"] == iso(when) for r in found), found
    older = hits(engine, query="zanzibar totals", until="1h")
    assert not any("zanzibar" in r["snippet"] for r in older)
    assert hits(engine, query="zanzibar totals", project="billing-api")
