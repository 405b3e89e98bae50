"""The engine end to end in-process: real SQLite file, real model, real files."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import make_config, make_engine, write
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine
from recalld.errors import BadRequest, Forbidden, IndexError_, NotFound
from recalld.index.store import Identity, Store

NOTES = {
    "projects/alpha.md": "# Alpha project\n\nWe decided to use PostgreSQL for billing.\n"
    "The migration tool is `alembic_runner` and error E-1234 means a lock timeout.\n",
    "people/bob.md": "# Bob\n\nBob prefers tea over coffee and lives in Lisbon.\n"
    "He is allergic to peanuts.\n",
    "todo.md": "# To-do\n\n- renew the TLS certificate before March\n- call the plumber\n",
}


@pytest.fixture
def engine(home: Path, local_embedder: Any) -> Any:
    for rel, text in NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder)
    eng.sync()
    yield eng
    eng.close()


def test_search_result_contract(engine: Engine) -> None:
    res = engine.searcher.search({"query": "which database did we pick for billing?"})
    assert res["mode"] == "hybrid"
    assert res["provider"] == "local/all-MiniLM-L6-v2"
    assert res["degraded"] is None
    assert set(res["index"]) == {"state", "pending", "last_sync"}
    top = res["results"][0]
    assert top["path"].endswith("projects/alpha.md")
    assert set(top) == {
        "path",
        "source",
        "start_line",
        "end_line",
        "score",
        "snippet",
        "citation",
        "kind",
        "scores",
        "modified",
        "indexed",
        "date",
        "stale",
    }
    assert top["source"] == "memory" and top["kind"] == "note"
    assert top["citation"] == f"{top['path']}#L{top['start_line']}-L{top['end_line']}"
    assert len(top["snippet"]) <= 700
    assert top["scores"]["vector"] is not None


def test_paraphrase_and_identifier(engine: Engine) -> None:
    para = engine.searcher.search({"query": "what drink does Bob like", "mode": "vector"})
    assert para["results"][0]["path"].endswith("people/bob.md")
    ident = engine.searcher.search({"query": "E-1234", "mode": "keyword"})
    assert ident["results"][0]["path"].endswith("projects/alpha.md")
    snake = engine.searcher.search({"query": "alembic_runner"})
    assert snake["results"][0]["path"].endswith("projects/alpha.md")


def test_keyword_floor_keeps_a_match(engine: Engine) -> None:
    res = engine.searcher.search({"query": "plumber", "mode": "keyword", "min_score": 1.0})
    assert res["results"], "the floor must never drop every keyword-only match"
    assert res["results"][0]["path"].endswith("todo.md")


def test_filters_apply_inside_channels(home: Path, local_embedder: Any) -> None:
    for i in range(40):
        write(home / "memory" / "a" / f"n{i}.md", f"# Note {i}\n\nquarterly budget review {i}\n")
    write(home / "memory" / "b" / "only.md", "# Only\n\nquarterly budget review in folder b\n")
    eng = make_engine(home, local_embedder)
    eng.sync()
    try:
        for mode in ("hybrid", "keyword", "vector"):
            res = eng.searcher.search(
                {
                    "query": "quarterly budget review",
                    "max_results": 2,
                    "path_prefix": str(home / "memory" / "b") + "/",
                    "mode": mode,
                    "min_score": 0.0,
                }
            )
            assert [Path(r["path"]).name for r in res["results"]] == ["only.md"], mode
        rel = eng.searcher.search(
            {"query": "quarterly budget", "path_prefix": "b/", "min_score": 0.0}
        )
        assert [Path(r["path"]).name for r in rel["results"]] == ["only.md"]
        none = eng.searcher.search({"query": "quarterly budget", "sources": ["sessions"]})
        assert none["results"] == []
    finally:
        eng.close()


def test_rrf_fusion(home: Path, local_embedder: Any) -> None:
    for rel, text in NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder, search__fusion="rrf")
    eng.sync()
    try:
        res = eng.searcher.search({"query": "Bob coffee tea", "min_score": 0.0})
        assert res["results"][0]["path"].endswith("bob.md")
        assert 0 < res["results"][0]["score"] <= 1.0
    finally:
        eng.close()


def test_incremental_sync_reuses_cache(engine: Engine, home: Path) -> None:
    again = engine.sync()
    assert again.files_changed == 0 and again.files_unchanged == 3 and again.chunks_embedded == 0
    path = home / "memory" / "todo.md"
    path.write_text(path.read_text() + "- buy a new kettle\n")
    edited = engine.sync()
    assert edited.files_changed == 1
    assert edited.chunks_embedded <= 2
    assert engine.searcher.search({"query": "kettle", "mode": "keyword"})["results"]
    os.utime(home / "memory" / "people" / "bob.md")  # touched, same content: no re-embedding
    touched = engine.sync()
    assert touched.files_changed == 0 and touched.chunks_embedded == 0


def test_delete_removes_from_index(engine: Engine, home: Path) -> None:
    (home / "memory" / "people" / "bob.md").unlink()
    report = engine.sync()
    assert report.files_removed == 1
    res = engine.searcher.search({"query": "Lisbon peanuts", "min_score": 0.0})
    assert all(not r["path"].endswith("bob.md") for r in res["results"])
    counts = engine.status()["counts"]
    assert counts["chunks"] == counts["fts_rows"] == counts["vectors"]


def test_get_line_ranges(engine: Engine, home: Path) -> None:
    path = str(home / "memory" / "people" / "bob.md")
    got = engine.searcher.get({"path": path, "from_line": 3, "lines": 2})
    assert got == {
        "path": path,
        "start_line": 3,
        "end_line": 4,
        "total_lines": 4,
        "text": "Bob prefers tea over coffee and lives in Lisbon.\nHe is allergic to peanuts.",
    }
    rel = engine.searcher.get({"path": "people/bob.md", "from_line": 1, "lines": 1})
    assert rel["text"] == "# Bob"
    ranged = engine.searcher.get({"path": path + ":3-3"})
    assert ranged["text"].startswith("Bob prefers")
    with pytest.raises(NotFound, match="has 4 lines: line 99 is past its end"):
        engine.searcher.get({"path": path, "from_line": 99})


def test_get_refuses_outside_roots(engine: Engine, home: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("password\n")
    (home / "memory" / "link.md").symlink_to(secret)
    for bad in (
        "/etc/passwd",
        str(home / "memory" / ".." / "config.toml"),
        "../config.toml",
        str(home / "memory" / "link.md"),
        str(secret),
    ):
        with pytest.raises(Forbidden):
            engine.searcher.get({"path": bad})
    with pytest.raises(BadRequest):
        engine.searcher.get({"path": "people/bob.md\x00"})


def test_symlink_out_of_roots_is_not_indexed(
    home: Path, local_embedder: Any, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("# Outside\n\nzanzibar secret plans\n")
    (home / "memory" / "inside.md").symlink_to(outside)
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        assert eng.searcher.search({"query": "zanzibar", "mode": "keyword"})["results"] == []
    finally:
        eng.close()


def test_bad_queries(engine: Engine) -> None:
    with pytest.raises(BadRequest, match="empty"):
        engine.searcher.search({"query": "   "})
    with pytest.raises(BadRequest, match="limit"):
        engine.searcher.search({"query": "x" * 200_000})
    res = engine.searcher.search(
        {"query": "tea " * 12_000}
    )  # ~48 KB: accepted, cut to a sane length
    assert res["results"]
    for params in (
        {"query": "x", "max_results": 0},
        {"query": "x", "mode": "fuzzy"},
        {"query": "x", "min_score": 2},
        {"query": 5},
        {"query": "x", "sources": ["web"]},
    ):
        with pytest.raises(BadRequest):
            engine.searcher.search(params)
    odd = engine.searcher.search({"query": 'AND OR NOT NEAR( "unbalanced * ^ col:val $HOME'})
    assert isinstance(odd["results"], list)


def test_bad_files_are_skipped_not_fatal(home: Path, local_embedder: Any) -> None:
    write(home / "memory" / "good.md", "# Good\n\nnormal note about gardening\n")
    (home / "memory" / "binary.md").write_bytes(b"\x00\x01\x02PNG\x00" * 100)
    (home / "memory" / "latin1.md").write_bytes(
        "caf\xe9 cr\xe8me br\xfbl\xe9e recipe\n".encode("latin-1")
    )
    (home / "memory" / "empty.md").write_text("")
    (home / "memory" / ".hidden").mkdir()
    write(home / "memory" / ".hidden" / "x.md", "hidden folder note")
    write(home / "memory" / "notes.md.swp", "swap")
    eng = make_engine(home, local_embedder)
    try:
        report = eng.sync()
        assert report.files_skipped == 1  # the binary one
        indexed = eng.status()["counts"]["files"]
        assert indexed == 3  # good, latin1 (decoded with replacement), empty
        assert eng.searcher.search({"query": "recipe", "mode": "keyword"})["results"]
        from recalld.ingest.indexer import SyncReport

        gone = home / "memory" / "vanished.md"
        assert eng.writes.indexer(eng.writer, None)._prepare(gone, SyncReport()) is None  # type: ignore[arg-type]
    finally:
        eng.close()


def test_a_write_that_fails_mid_batch_loses_only_its_own_file(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files of a batch share one transaction, without a savepoint each (FTS5 writes its
    # pending rows out at every one): a write that fails after some of its rows went in undoes
    # the batch, which is written again with a savepoint per file; the bad one is rolled back
    # alone and reported, the others land.
    for name in ("a", "b", "c"):
        write(home / "memory" / f"{name}.md", f"# {name}\n\nword{name} one\n\nword{name} two\n")
    eng = Engine(make_config(home), choice=ProviderChoice(None, "no provider (test)"))
    assert eng.writer is not None
    real = eng.writer.replace_file
    changes: list[Any] = []
    savepoints: list[bool] = []

    def replace_file(row: Any, chunks: Any, vectors: Any, **kw: Any) -> Any:
        if row.path.endswith("b.md"):
            assert eng.writer is not None
            savepoints.append(kw.get("savepoint", True))
            # as inside replace_file: some rows written, then the failure (in its savepoint
            # when it has one; else only the batch's transaction undoes them)
            with eng.writer.conn if savepoints[-1] else contextlib.nullcontext():
                real(row, chunks[:1], vectors, **kw)
                raise RuntimeError("disk hiccup")
        return real(row, chunks, vectors, **kw)

    monkeypatch.setattr(eng.writer, "replace_file", replace_file)
    monkeypatch.setattr(eng, "apply_change", changes.append)
    try:
        report = eng.sync()
        assert [s["reason"] for s in report.skipped] == ["indexing failed: disk hiccup"]
        assert savepoints == [False, True]  # the batch undone, then written file by file
        # The failed file counts as skipped only (it is not in the index), not also changed.
        assert report.files_changed == 2 and report.files_skipped == 1
        assert report.chunks_written == 2
        assert len(changes) == 2  # told of the two files that landed, after their commit
        rows = eng.writer.conn.execute("SELECT path FROM chunks ORDER BY path").fetchall()
        assert [Path(r[0]).name for r in rows] == ["a.md", "c.md"]
        assert sorted(Path(p).name for p in eng.writer.files("memory")) == ["a.md", "c.md"]
        assert not eng.searcher.search({"query": "wordb", "mode": "keyword"})["results"]
        assert eng.searcher.search({"query": "wordc", "mode": "keyword"})["results"]
    finally:
        eng.close()


def test_refuses_to_mix_vector_spaces(home: Path) -> None:
    store = Store(home / "index.sqlite")
    store.set_identity(Identity("local|x|m|384", "local/m", "m", 384, "{}"))
    with pytest.raises(IndexError_, match="refusing to mix"):
        store.set_identity(
            Identity("openai||text-embedding-3-small|1536", "openai/t", "t", 1536, "{}")
        )
    store.close()


def test_identity_change_triggers_atomic_reindex(home: Path, local_embedder: Any) -> None:
    for rel, text in NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder)
    eng.sync()
    eng.close()
    changed = make_engine(home, local_embedder, chunking__target_tokens=100)
    try:
        assert changed.needs_reindex
        res = changed.searcher.search({"query": "Lisbon", "mode": "hybrid"})
        assert res["degraded"] and res["results"]  # old index still answers, keyword-only
        report = changed.sync()  # runs the full rebuild
        assert report.chunks_embedded == 0 or report.files_changed == 3
        assert not changed.needs_reindex
        assert changed.searcher.search({"query": "Lisbon"})["degraded"] is None
        assert not list(home.glob("index.sqlite.rebuild-*"))
    finally:
        changed.close()


def test_failed_reindex_leaves_old_index(engine: Engine, home: Path) -> None:
    before = engine.status()["counts"]

    def boom(progress: Any) -> None:
        if progress.phase == "indexing" and progress.files_done >= 1:
            raise RuntimeError("disk full (simulated)")

    engine.on_progress = boom
    with pytest.raises(RuntimeError):
        engine.reindex()
    engine.on_progress = None
    assert engine.status()["counts"] == before
    assert engine.searcher.search({"query": "Lisbon"})["results"]
    assert not list(home.glob("index.sqlite.rebuild-*"))


def test_keyword_only_without_provider(home: Path) -> None:
    for rel, text in NOTES.items():
        write(home / "memory" / rel, text)
    eng = Engine(make_config(home), choice=ProviderChoice(None, "no provider (test)"))
    try:
        eng.sync()
        res = eng.searcher.search({"query": "PostgreSQL billing"})
        assert res["mode"] == "keyword" and res["degraded"] == "no provider (test)"
        assert res["results"][0]["path"].endswith("alpha.md")
        assert eng.status()["provider"] == "none"
    finally:
        eng.close()
