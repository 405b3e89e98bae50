"""Store schema/consistency and fusion arithmetic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recalld.config import Config
from recalld.errors import ConfigError
from recalld.index.migrations import MIGRATIONS, current_version
from recalld.index.store import FileRow, Identity, NewChunk, Store
from recalld.index.vector_index import VectorIndex
from recalld.retrieval import fusion


def unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def test_migrations_and_consistency(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.sqlite")
    assert current_version(store.conn) == len(MIGRATIONS)
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.set_identity(Identity("k", "t/m", "m", 3, "{}"))
    row = FileRow("/m/a.md", "memory", 10, 1, "h", 3)
    chunks = [NewChunk(1, 1, "alpha beta", "h1"), NewChunk(2, 3, "gamma delta", "h2")]
    change = store.replace_file(row, chunks, {"h1": unit([1, 0, 0]), "h2": unit([0, 1, 0])})
    assert len(change.added) == 2 and change.removed == []
    counts = store.counts()
    assert counts["chunks"] == counts["fts_rows"] == counts["vectors"] == 2
    again = store.replace_file(row, chunks[:1], {"h1": unit([1, 0, 0])})
    # The unchanged chunk stays as it was (its id and vector); only the other one goes.
    assert again.removed == [2] and again.inserted == [] and again.kept == 1
    counts = store.counts()
    assert counts["chunks"] == counts["fts_rows"] == counts["vectors"] == 1
    assert store.keyword_search('"alpha"', 5, None, None)
    assert store.keyword_search('"gamma"', 5, None, None) == []
    store.remove_file("/m/a.md")
    counts = store.counts()
    assert counts["chunks"] == counts["fts_rows"] == counts["vectors"] == counts["files"] == 0
    assert store.integrity_ok()
    store.close()


def test_an_index_of_schema_7_keeps_its_keyword_rows_and_writes_new_ones_once(
    tmp_path: Path,
) -> None:
    """Migration 8 hands the chunks' keyword rows from a trigger to the Store: rows written by
    the trigger stay searchable, and a chunk written after is in FTS5 exactly once."""
    db = tmp_path / "i.sqlite"
    store = Store(db)
    store.set_identity(Identity("k", "t/m", "m", 3, "{}"))
    with store.conn:  # the index as schema 7 left it: the insert trigger writes keyword rows
        store.conn.execute(
            "CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN "
            "INSERT INTO chunks_fts(rowid, text, context, ident) "
            "VALUES (new.id, new.text, new.context, new.ident); END; PRAGMA user_version = 7"
        )
        store.conn.execute(
            "INSERT INTO chunks(path, source, start_line, end_line, hash, text, context, ident) "
            "VALUES ('/m/old.md', 'memory', 1, 1, 'o1', 'written by the trigger', '', '')"
        )
    store.close()
    store = Store(db)
    try:
        assert current_version(store.conn) == len(MIGRATIONS)
        triggers = store.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'chunks'"
        ).fetchall()
        assert ("chunks_ai",) not in triggers and ("chunks_ad",) in triggers
        row = FileRow("/m/new.md", "memory", 10, 1, "h", 3)
        store.replace_file(row, [NewChunk(1, 1, "written by the store", "n1")], None)
        counts = store.counts()
        assert counts["chunks"] == counts["fts_rows"] == 2
        assert len(store.keyword_search('"written"', 5, None, None)) == 2
        assert len(store.keyword_search('"trigger"', 5, None, None)) == 1
        store.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        store.remove_file("/m/new.md")  # the delete trigger still takes the keyword row out
        assert store.keyword_search('"store"', 5, None, None) == []
        assert store.integrity_ok()
    finally:
        store.close()


def test_counts_read_from_shadow_tables_agree_with_full_scans(tmp_path: Path) -> None:
    """status counts FTS5 and vec0 rows in their shadow tables and keyword-only chunks by a
    partial index (cheap after every write); each must equal the count of a full scan."""
    store = Store(tmp_path / "i.sqlite")
    store.set_identity(Identity("k", "t/m", "m", 3, "{}"))
    for i in range(5):
        row = FileRow(f"/m/{i}.md", "memory", 10, 1, f"h{i}", 3)
        chunks = [NewChunk(1, 1, f"alpha {i}", f"a{i}"), NewChunk(2, 2, f"beta {i}", f"b{i}")]
        if i % 2:
            chunks.append(NewChunk(3, 3, f"tool output {i}", f"t{i}", embed=False))
        store.replace_file(row, chunks, {f"a{i}": unit([1, 0, 0])})  # b, t: no vector yet
    store.remove_file("/m/0.md")

    def scan(sql: str) -> int:
        return int(store.conn.execute(sql).fetchone()[0])

    counts = store.counts()
    assert counts["fts_rows"] == scan("SELECT count(*) FROM chunks_fts") == 10
    assert counts["vectors"] == scan("SELECT count(*) FROM chunks_vec") == 4
    assert counts["keyword_only_chunks"] == 2
    plan = store.conn.execute(
        "EXPLAIN QUERY PLAN SELECT count(*) FROM chunks WHERE embed = 0"
    ).fetchall()
    assert "chunks_keyword_only" in str(plan)
    store.close()


def test_embedding_cache_keyed_by_space(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.sqlite")
    store.put_cache("p1", "m", 3, {"h": unit([1, 2, 3])})
    assert "h" in store.cached("p1", "m", 3, ["h"])
    assert store.cached("p2", "m", 3, ["h"]) == {}
    assert store.cached("p1", "m", 4, ["h"]) == {}
    other = Store(tmp_path / "j.sqlite")
    assert other.copy_cache_from(tmp_path / "i.sqlite") == 1
    np.testing.assert_allclose(other.cached("p1", "m", 3, ["h"])["h"], unit([1, 2, 3]))


def test_vector_index_exact_topk_with_mask() -> None:
    rng = np.random.default_rng(0)
    mat = rng.normal(size=(500, 16)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    index = VectorIndex(16)
    index.apply([], [(i + 1, mat[i]) for i in range(500)])
    q = mat[7]
    exact = list(np.argsort(-(mat @ q))[:10] + 1)
    assert [cid for cid, _ in index.search(q, 10)] == exact
    allowed = np.arange(200, 301, dtype=np.int64)
    got = index.search(q, 5, allowed)
    assert all(200 <= cid <= 300 for cid, _ in got) and len(got) == 5
    index.apply([8], [])
    assert 8 not in [cid for cid, _ in index.search(q, 10)]
    assert len(index) == 499


def test_bm25_mapping_and_weighted_fusion() -> None:
    kw = fusion.bm25_scores([(1, -8.0), (2, -4.0), (3, -0.0001)])
    assert kw[1] == 1.0 and kw[2] == pytest.approx(0.5) and 0 < kw[3] <= 1
    vs = fusion.cosine_scores([(1, 0.2), (4, 0.9), (5, -0.3)])
    assert vs[5] == 0.0
    fused = fusion.weighted(vs, kw, vector_weight=0.7, text_weight=0.3, normalise=False)
    by_id = {f.chunk_id: f for f in fused}
    assert by_id[1].score == pytest.approx(0.7 * 0.2 + 0.3 * 1.0)
    assert by_id[4].score == pytest.approx(0.7 * 0.9) and by_id[4].keyword is None
    assert by_id[2].score == pytest.approx(0.3 * 0.5) and by_id[2].vector is None
    assert fused[0].chunk_id == 4


def test_min_max_fusion() -> None:
    vs = {1: 0.30, 2: 0.50, 3: 0.40}
    kw = {1: 1.0, 4: 0.2}
    fused = {f.chunk_id: f for f in fusion.weighted(vs, kw, vector_weight=0.2, text_weight=0.8)}
    # vector range [0.25, 0.5] (bottom at most half the best), keyword range [0.2, 1.0]
    assert fused[2].score == pytest.approx(0.2 * 1.0)  # best vector, no keyword match
    assert fused[1].score == pytest.approx(0.2 * 0.2 + 0.8 * 1.0)
    assert fused[3].score == pytest.approx(0.2 * 0.6)
    assert fused[4].score == pytest.approx(0.0)
    near = fusion.min_max({1: 1.0, 2: 0.99})  # a near-tie stays a near-tie
    assert near[1] == 1.0 and near[2] == pytest.approx(0.98)
    assert fused[1].vector == 0.30 and fused[1].keyword == 1.0  # shown as mapped, not rescaled
    assert fusion.min_max({7: 0.4}) == {7: 1.0}


def test_rrf_scaled_to_one() -> None:
    fused = fusion.rrf([1, 2, 3], [1, 3], {}, {}, k=60)
    assert fused[0].chunk_id == 1 and fused[0].score == pytest.approx(1.0)
    assert fused[1].chunk_id == 3
    assert fused[-1].chunk_id == 2


def test_config_validation(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[search]\nmin_score = 0.5\nfusion = "rrf"\n')
    loaded = Config.load(cfg)
    assert loaded.float("search.min_score") == 0.5 and loaded.str("search.fusion") == "rrf"
    cfg.write_text("[search]\nmin_scor = 0.5\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'search\.min_scor'"):
        Config.load(cfg)
    cfg.write_text('[search]\nmax_results = "six"\n')
    with pytest.raises(ConfigError, match="must be int"):
        Config.load(cfg)
    cfg.write_text("[search\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Config.load(cfg)


@pytest.mark.slow
def test_vector_index_prefilter_matches_exact_search() -> None:
    rng = np.random.default_rng(1)
    basis = rng.normal(size=(48, 384)).astype(np.float32)  # embeddings live near a subspace
    mat = rng.normal(size=(6000, 48)).astype(np.float32) @ basis
    mat += 0.05 * rng.normal(size=mat.shape).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    index = VectorIndex(384, prefilter_min_rows=2000)
    index.apply([], [(i + 1, mat[i]) for i in range(6000)])
    assert index._proj is not None  # the prefilter is active at this size
    hits = 0
    for j in range(50):
        q = mat[j * 13] + 0.2 * rng.normal(size=384).astype(np.float32)
        q /= np.linalg.norm(q)
        exact = set((np.argsort(-(mat @ q))[:10] + 1).tolist())
        got = [cid for cid, _ in index.search(q, 10)]
        assert len(got) == 10
        hits += len(exact & set(got))
    assert hits / 500 >= 0.99
    allowed = np.arange(100, 200, dtype=np.int64)
    assert all(100 <= cid < 200 for cid, _ in index.search(mat[150], 5, allowed))
    index.apply([151], [(7001, mat[150])])  # updates after the fit stay searchable
    top = index.search(mat[150], 2)
    assert top[0][0] == 7001 and 151 not in [c for c, _ in top]
