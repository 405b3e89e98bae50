"""Retrieval beyond the anchor (issue 9): identifier parts, CJK, query shape, collapse, MMR,
recency, token budgets and --explain, through the real engine, store and model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest

from conftest import env_for, make_engine, write
from recalld.config import Config
from recalld.engine import Engine
from recalld.errors import BadRequest
from recalld.index import migrations
from recalld.index.ident_tokens import ident_text, split_word
from recalld.index.store import FileRow, NewChunk, Store
from recalld.retrieval import path_query
from recalld.retrieval.answer_budget import estimate_tokens, fit_to_budget, refit
from recalld.retrieval.diversity import Candidate, collapse, mmr
from recalld.retrieval.fts_query import build_match
from recalld.retrieval.note_dates import decay, is_evergreen, note_date
from recalld.retrieval.query_shape import (
    analyze,
    boosted,
    index_names,
    is_long_prose,
    literal_share,
    normalise_name,
)
from recalld.retrieval.search_ranking import blend_share, channel_weights

CODE_NOTES = {
    "net/errors.md": "# Network errors\n\nThe proxy logs ERR_CONN_RESET when the upstream drops "
    "the socket mid-request.\n",
    "net/retry.md": "# Retry policy\n\nWe call connection_reset() and back off exponentially "
    "before retrying.\n",
    "web/hooks.md": "# React notes\n\nState lives in useState; effects in useEffect.\n",
    "src/layout.md": "# Layout\n\nThe entry point is daemon/recalld/search_pipeline.py and the "
    "tests sit next to it.\n",
    "misc/weather.md": "# Weather\n\nIt rained all week in Lisbon; the reset of the garden "
    "waits for spring.\n",
}
CJK_NOTES = {
    "zh/travel.md": "# 旅行\n\n我们下个月去北京看长城，然后去上海吃小笼包。\n",
    "ja/tokyo.md": "# 東京\n\n昨日は東京タワーに行って、夜は新宿でラーメンを食べた。\n",
    "en/plain.md": "# Plain\n\nAn English note about gardening and compost.\n",
}


def paths_of(res: dict[str, Any], home: Path) -> list[str]:
    return [os.path.relpath(r["path"], home / "memory") for r in res["results"]]


@pytest.fixture
def code_engine(home: Path, local_embedder: Any) -> Any:
    for rel, text in CODE_NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder)
    eng.sync()
    yield eng
    eng.close()


# identifier parts and CJK -------------------------------------------------------------------


def test_split_word_and_ident_text() -> None:
    assert split_word("useState") == ["use", "state"]
    assert split_word("HTTPServer") == ["http", "server"]
    assert split_word("sha512sum") == ["sha", "512", "sum"]
    assert split_word("alpine") == ["alpine"]
    assert split_word("Ärger") == ["ärger"]  # only ASCII case boundaries split
    text = ident_text("see ERR_CONN_RESET and useState in 東京タワー 猫")
    assert "errconnreset" in text.split()
    assert "use state" in text
    assert "東京 京タ タワ ワー" in text and "猫" in text.split()
    assert ident_text("plain English words only.") == ""


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("ConnReset", {"net/errors.md", "net/retry.md"}),
        ("conn_reset", {"net/errors.md", "net/retry.md"}),
        ("ErrConnReset", {"net/errors.md"}),
        ("use_state", {"web/hooks.md"}),
        ("recalld/search_pipe", {"src/layout.md"}),
    ],
)
def test_partial_identifiers_find_the_full_one(
    code_engine: Engine, home: Path, query: str, expected: set[str]
) -> None:
    res = code_engine.searcher.search({"query": query, "mode": "keyword", "min_score": 0})
    top = paths_of(res, home)[: len(expected)]
    assert set(top) == expected, (query, paths_of(res, home))


def test_partial_identifiers_can_be_turned_off(home: Path, local_embedder: Any) -> None:
    for rel, text in CODE_NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder, search__partial_identifiers=False)
    try:
        eng.sync()
        res = eng.searcher.search({"query": "ConnReset", "mode": "keyword", "min_score": 0})
        assert res["results"] == []  # no exact token: only the partial match finds it
    finally:
        eng.close()


def test_cjk_notes_have_a_keyword_channel(home: Path, local_embedder: Any) -> None:
    for rel, text in CJK_NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        for query, want in [
            ("长城", "zh/travel.md"),
            ("小笼包", "zh/travel.md"),
            ("東京タワー", "ja/tokyo.md"),
            ("ラーメン", "ja/tokyo.md"),
            ("新宿", "ja/tokyo.md"),
        ]:
            res = eng.searcher.search({"query": query, "mode": "keyword", "min_score": 0})
            assert paths_of(res, home)[:1] == [want], (query, res["results"])
        # Without the bigram column, a word inside a CJK sentence is not a token at all.
        with eng.reader() as store:
            plain = build_match("新宿", partial=False)
            assert plain is not None
            assert store.keyword_search("{text context} : (" + plain + ")", 5, None, None) == []
    finally:
        eng.close()


def test_migration_3_backfills_the_ident_column(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite"
    conn = apsw.Connection(str(db))
    for number, sql in enumerate(migrations.MIGRATIONS[:2], start=1):
        with conn:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(
        "INSERT INTO files(path, source, size, mtime_ns, hash, lines, indexed_at) "
        "VALUES ('/m/a.md', 'memory', 1, 1, 'h', 1, 0)"
    )
    conn.execute(
        "INSERT INTO chunks(path, source, start_line, end_line, hash, text, context) "
        "VALUES ('/m/a.md', 'memory', 1, 1, 'c', 'we call getUserName here', 'A')"
    )
    conn.close()
    with Store(db) as store:
        assert migrations.current_version(store.conn) == len(migrations.MIGRATIONS)
        match = build_match("user_name", partial=True)
        assert match is not None
        assert [cid for cid, _ in store.keyword_search(match, 5, None, None)] == [1]
        row = store.conn.execute("SELECT ident FROM chunks").fetchone()
        assert row[0] == "get user name"
        # New chunks get the column from the store, and deleting them keeps FTS consistent.
        store.replace_file(
            FileRow("/m/a.md", "memory", 1, 2, "h2", 1),
            [NewChunk(1, 1, "now setUserName", "c2")],
            None,
        )
        assert store.conn.execute("SELECT ident FROM chunks").fetchall() == [("set user name",)]
        store.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")


# query shape ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("useState", "identifier"),
        ("ERR_CONN_RESET", "identifier"),
        ("src/app.py", "identifier"),
        ("#4521", "identifier"),
        ('"exact words here"', "identifier"),
        ("fix ERR_CONN_RESET", "identifier"),
        ("what did Caroline paint last summer?", "question"),
        ("how do I rotate the nginx logs", "question"),
        ("Caroline painted a sunrise over the lake last summer", "statement"),
        ("alpine", "mixed"),
        ("nginx logs", "mixed"),
        ("why does foo.bar() return None", "question"),
        ("IL-6 levels rise in patients with severe sepsis", "statement"),
    ],
)
def test_query_kinds(query: str, kind: str) -> None:
    assert analyze(query).kind == kind


@pytest.mark.parametrize(
    ("query", "long"),
    [
        ("Vitamin D deficiency raises the risk of fractures in elderly women in homes", True),
        ("what similarity laws must be obeyed when constructing aeroelastic models of wings", True),
        ("What did Caroline paint last summer?", False),  # a question, but short
        ("nginx logs", False),  # mixed
        ("the retry loop of the connection pool fails with ERR_CONN_RESET at startup", False),
        ('the "lock timeout" in the retry loop of the connection pool at daemon startup', False),
    ],
)
def test_long_prose_is_a_long_question_or_statement_without_literals(
    query: str, long: bool
) -> None:
    assert is_long_prose(analyze(query), 8) is long
    assert not is_long_prose(analyze(query), 0) and not is_long_prose(None, 8)


@pytest.mark.parametrize(
    ("query", "vector_weight"),
    [
        ("what are the results for the creep buckling of round tubes", 0.5),  # names nothing
        ("When did Caroline paint a sunrise?", 0.2),  # names a person: BM25's exact match
        ("What did we decide? Ask Bob", 0.2),  # a capital after a sentence's end is a name too
        ("What is it? Nothing.", 0.5),  # a capital that starts a sentence names nothing
        ("why does ERR_CONN_RESET happen in the proxy", 0.2),  # an identifier is a literal
    ],
)
def test_a_question_that_names_nothing_takes_its_own_vector_weight(
    query: str, vector_weight: float
) -> None:
    cfg = Config({"search.unnamed_question_vector_weight": 0.5})
    assert channel_weights(analyze(query), cfg)[0] == pytest.approx(vector_weight)
    assert channel_weights(analyze(query), Config({}))[0] == pytest.approx(vector_weight)  # 0.5
    off = Config({"search.unnamed_question_vector_weight": 0.0})  # off: the kind's weight
    assert channel_weights(analyze(query), off)[0] == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("query", "share"),
    [
        ("what are the results for the creep buckling of round tubes", 0.5),  # names nothing
        ("When did Caroline paint a sunrise?", 0.0),  # names a person
        ("why does ERR_CONN_RESET happen in the proxy", 0.0),  # a literal
        ("the creep buckling of round tubes under axial load", 0.0),  # a statement
    ],
)
def test_the_rrf_blend_of_questions_that_name_nothing_reaches_only_them(
    query: str, share: float
) -> None:
    cfg = Config({"search.unnamed_question_blend": 0.5})
    assert blend_share(analyze(query), cfg) == pytest.approx(share)
    assert blend_share(analyze(query), Config({})) == 0.0  # off by default (DECISIONS)
    long = Config({"search.unnamed_question_blend": 0.5, "search.long_query_words": 3})
    assert blend_share(analyze(query), long) == 0.0  # long prose: long_query_blend's, off


CHAT = (
    "**Melanie**: Hey Caroline, how was the support group last week?\n"
    "**Caroline**: It was great. I went with Jon and we met Sam there.\n"
    "**Melanie**: Glad to hear it, Caroline! Sam told me the group meets on Tuesdays.\n"
)


@pytest.mark.parametrize(
    ("terms", "texts", "named"),
    [
        (("caroline", "group"), [CHAT], True),  # "Hey Caroline," and "it, Caroline!"
        (("support", "group"), [CHAT], False),  # lower case inside sentences
        (("caroline",), ["**Caroline**: hi\nCaroline. Caroline? Caroline"], False),  # starts only
        (("stresses",), ["# Discontinuity Stresses In Shells\n\nthe stresses at junctions"], False),
        (("caroline",), ["I met Caroline there."], False),  # one mention: too little to say
        (("paris",), ["we flew to Paris and then to paris again, Paris was hot"], True),
        ((), [CHAT], False),
    ],
)
def test_the_index_says_which_query_terms_are_names(
    terms: tuple[str, ...], texts: list[str], named: bool
) -> None:
    assert index_names(terms, texts) is named


def test_a_name_typed_in_lower_case_still_names(home: Path, local_embedder: Any) -> None:
    write(home / "memory" / "chat.md", "# Chat\n\n" + CHAT)
    write(
        home / "memory" / "shells.md",
        "# pressurized shells\n\nthe discontinuity stresses at junctions of pressurized shells "
        "are found by the membrane theory and bending corrections at the junctions.\n",
    )
    eng = make_engine(home, local_embedder, search__unnamed_question_vector_weight=0.5)
    try:
        eng.sync()
        for query, vector_weight in [
            ("When did Caroline go to the support group?", 0.2),  # typed with a capital
            ("when did caroline go to the support group?", 0.2),  # the index writes Caroline
            ("what are the discontinuity stresses at junctions", 0.5),  # names nothing
        ]:
            res = eng.searcher.search({"query": query, "explain": True, "min_score": 0})
            weights = res["explain"]["shape_weights"]
            assert weights["vector"] == pytest.approx(vector_weight), query
    finally:
        eng.close()


def test_literals_names_and_boosts() -> None:
    shape = analyze('check "lock timeout" and ERR_CONN_RESET')
    assert shape.literals == ("lock timeout", "ERR_CONN_RESET")
    assert literal_share(shape.literals, "a Lock Timeout happened") == 0.5
    assert normalise_name("Fossil-Commit") == normalise_name("fossil commit") == "fossil commit"
    assert normalise_name("$") == "$"
    assert boosted(0.2, 0.5) == pytest.approx(0.6)
    assert boosted(1.0, 0.5) == 1.0 and 0.0 <= boosted(0.0, 2.0) <= 1.0


def test_a_file_named_like_the_query_comes_first(home: Path, local_embedder: Any) -> None:
    write(home / "memory" / "tools" / "setup-alpine.md", "# setup-alpine\n\nInstall alpine.\n")
    write(home / "memory" / "tools" / "alpine.md", "# alpine\n\nA mail client.\n")
    write(home / "memory" / "tools" / "apk.md", "# apk\n\nThe alpine alpine package tool.\n")
    eng = make_engine(home, local_embedder)
    off = make_engine(home, local_embedder, search__name_boost=0.0)
    try:
        eng.sync()
        assert paths_of(eng.searcher.search({"query": "alpine", "min_score": 0}), home)[0] == (
            "tools/alpine.md"
        )
        # Without the name boost the note that repeats the word wins: the boost is what helps.
        assert paths_of(off.searcher.search({"query": "alpine", "min_score": 0}), home)[0] != (
            "tools/alpine.md"
        )
    finally:
        eng.close()
        off.close()


def test_identifier_queries_lean_on_keywords(code_engine: Engine) -> None:
    res = code_engine.searcher.search({"query": "ERR_CONN_RESET", "explain": True, "min_score": 0})
    assert res["explain"]["shape"] == "identifier"
    assert res["explain"]["shape_weights"]["vector"] == pytest.approx(0.1)
    applied = res["explain"]["weights"]  # raised for the channel whose best hit stands clear
    assert applied["keyword"] >= 0.9 and applied["vector"] < applied["keyword"] / 3
    top = res["results"][0]
    assert top["path"].endswith("net/errors.md")
    assert top["explain"]["boosts"]["literal"] == 1.0
    res = code_engine.searcher.search(
        {"query": "what happens when the upstream drops the socket?", "explain": True}
    )
    assert res["explain"]["shape"] == "question"


# collapse and MMR ---------------------------------------------------------------------------


def test_same_passage_in_a_note_and_a_transcript_comes_back_once(
    home: Path, local_embedder: Any
) -> None:
    passage = (
        "The staging database password rotation runs every Tuesday at 04:00 UTC and the "
        "runbook lives in the ops wiki under rotation."
    )
    write(home / "memory" / "ops.md", f"# Ops\n\n{passage}\n")
    sessions = home / "sessions"
    sessions.mkdir()
    (sessions / "s1.jsonl").write_text(
        json.dumps(
            {
                "type": "user",
                "message": {"role": "user", "content": passage},
                "timestamp": "2026-11-01T10:00:00Z",
                "sessionId": "s1",
            }
        )
        + "\n"
    )
    glob = [str(sessions / "*.jsonl")]
    eng = make_engine(home, local_embedder, sessions__paths=glob)
    raw = make_engine(home, local_embedder, sessions__paths=glob, search__dedupe=False)
    try:
        eng.sync()
        query = {"query": "when does the staging password rotation run", "min_score": 0}
        plain = raw.searcher.search(query)["results"]
        assert {r["source"] for r in plain[:2]} == {"memory", "sessions"}
        res = eng.searcher.search(query)["results"]
        top = res[0]
        assert len(top["also"]) == 1
        places = {top["source"], top["also"][0]["source"]}
        assert places == {"memory", "sessions"}
        assert all(r["path"] != top["also"][0]["path"] for r in res)
    finally:
        eng.close()
        raw.close()


def test_collapse_overlapping_ranges_of_one_file() -> None:
    a = Candidate(1, 0.9, "/m/a.md", 1, 10, "alpha beta gamma")
    b = Candidate(2, 0.8, "/m/a.md", 8, 20, "totally different words")
    c = Candidate(3, 0.7, "/m/a.md", 21, 30, "more text")
    kept = collapse([a, b, c], 0.8, 6)
    assert [k.chunk_id for k in kept] == [1, 3] and kept[0].also == [2]


def test_mmr_keeps_one_file_from_filling_every_slot() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(size=16).astype(np.float32)
    base /= np.linalg.norm(base)
    vecs: dict[int, Any] = {}
    cands = []
    for i in range(5):  # five near-identical chunks of one long file, scored highest
        v = base + 0.01 * rng.normal(size=16).astype(np.float32)
        vecs[i] = v / np.linalg.norm(v)
        cands.append(Candidate(i, 0.95 - i * 0.01, "/m/long.md", i * 10 + 1, i * 10 + 9, "x"))
    other = rng.normal(size=16).astype(np.float32)
    other -= float(np.dot(other, base)) * base  # a different topic: orthogonal to the file's
    vecs[9] = other / np.linalg.norm(other)
    cands.append(Candidate(9, 0.7, "/m/other.md", 1, 5, "y"))

    def lookup(ids: Any) -> dict[int, Any]:
        return {i: vecs[i] for i in ids}

    assert [c.chunk_id for c in mmr(cands, 1.0, lookup, 3)][:3] == [0, 1, 2]
    diverse = [c.chunk_id for c in mmr(cands, 0.5, lookup, 3)][:3]
    assert diverse[0] == 0 and 9 in diverse


@pytest.mark.slow
def test_mmr_through_the_engine(home: Path, local_embedder: Any) -> None:
    long_file = "# Garden log\n\n" + "\n\n".join(
        f"Day {i}: watered the tomatoes and checked the tomato plants for blight."
        for i in range(40)
    )
    write(home / "memory" / "garden.md", long_file)
    write(home / "memory" / "pests.md", "# Pests\n\nTomato blight spreads in wet weather.\n")
    eng = make_engine(home, local_embedder, search__mmr_lambda=0.3)
    try:
        eng.sync()
        res = eng.searcher.search({"query": "tomato blight", "max_results": 3, "min_score": 0})
        assert "pests.md" in {Path(r["path"]).name for r in res["results"]}
    finally:
        eng.close()


# recency ------------------------------------------------------------------------------------


def test_note_dates(tmp_path: Path) -> None:
    named = write(tmp_path / "2024-03-14-standup.md", "# Standup\n")
    front = write(tmp_path / "plan.md", "---\ntitle: Plan\ndate: 2023-01-02\n---\n# Plan\n")
    session = write(
        tmp_path / "s.jsonl",
        '{"timestamp": "2022-05-01T10:00:00Z"}\n{"timestamp": "2022-05-03T10:00:00Z"}\n',
    )
    plain = write(tmp_path / "plain.md", "# Plain\n")
    os.utime(plain, (1_600_000_000, 1_600_000_000))
    assert note_date(str(named)) == pytest.approx(1710374400)
    assert note_date(str(front)) == pytest.approx(1672617600)
    assert note_date(str(session)) == pytest.approx(1651572000)
    assert note_date(str(plain)) == pytest.approx(1_600_000_000)
    assert note_date(str(tmp_path / "gone.md")) is None
    assert decay(30 * 86400, 30) == pytest.approx(0.5)
    assert decay(-5, 30) == 1.0 and decay(10**9, 0) == 1.0
    assert is_evergreen("/m/MEMORY.md", ["MEMORY.md"])
    assert is_evergreen("/m/core/facts.md", ["/m/core/*"])
    assert not is_evergreen("/m/notes.md", ["MEMORY.md"])


def test_recency_prefers_the_newer_note_but_not_over_evergreen(
    home: Path, local_embedder: Any
) -> None:
    text = "# Coffee\n\nThe team switched the office coffee machine to the {} beans.\n"
    old = write(home / "memory" / "2020-01-01-coffee.md", text.format("Ethiopian"))
    new = write(home / "memory" / "coffee-now.md", text.format("Kenyan"))
    ever = write(home / "memory" / "MEMORY.md", text.format("Colombian"))
    ancient = time.time() - 5 * 365 * 86400
    os.utime(ever, (ancient, ancient))
    eng = make_engine(home, local_embedder, search__recency_half_life_days=30.0)
    try:
        eng.sync()
        res = eng.searcher.search({"query": "office coffee machine beans", "explain": True})
        names = [Path(r["path"]).name for r in res["results"]]
        assert names.index(new.name) < names.index(old.name)
        assert names.index(ever.name) < names.index(old.name)
        factors = {Path(r["path"]).name: r["explain"]["recency"] for r in res["results"]}
        assert factors[ever.name] == 1.0 and factors[old.name] < 0.01
    finally:
        eng.close()


# budgets and explain ------------------------------------------------------------------------


def test_fit_to_budget_trims_then_drops() -> None:
    results = [
        {"path": f"/m/{i}.md", "citation": f"/m/{i}.md#L1-L9", "snippet": "word " * 140}
        for i in range(6)
    ]
    answer: dict[str, Any] = {
        "results": [dict(r) for r in results],
        "mode": "hybrid",
        "took_ms": 1.0,
    }
    report = fit_to_budget(answer, 400)
    assert report["used_tokens"] <= 400 and estimate_tokens(answer) <= 400
    # The best result stays whole; the others share the rest, each a real snippet.
    best, *rest = answer["results"]
    assert best["snippet"] == "word " * 140 and "truncated" not in best
    assert rest and report["snippets_trimmed"] == len(rest)
    assert all(r["truncated"] and len(r["snippet"]) >= 100 for r in rest)
    assert all(r["snippet"].endswith("…") for r in rest)
    small: dict[str, Any] = {"results": [dict(r) for r in results], "mode": "hybrid"}
    report = fit_to_budget(small, 150)
    assert report["dropped"] > 0 and len(small["results"]) == 6 - report["dropped"]
    roomy: dict[str, Any] = {"results": [dict(r) for r in results], "mode": "hybrid"}
    report = fit_to_budget(roomy, 100_000)
    assert report["snippets_trimmed"] == report["dropped"] == 0
    # A field added after the fit (vectors_pending, shared hits, a longer `degraded`): refit
    # keeps the answer within its budget and reports the earlier cuts with its own.
    answer = {"results": [dict(r) for r in results], "mode": "hybrid"}
    answer["budget"] = first = fit_to_budget(answer, 400)
    answer["took_ms"] = 12.5
    answer["degraded"] = "shared store unavailable: " + "connection refused " * 8
    answer["results"].append({**results[0], "path": "shared:eng/x.md"})
    second = refit(answer)["budget"]
    assert estimate_tokens(answer) <= 400 and second["used_tokens"] <= 400
    assert second["dropped"] >= first["dropped"]
    assert second["snippets_trimmed"] == sum(1 for r in answer["results"] if r.get("truncated"))
    assert refit({"results": []}) == {"results": []}  # no budget asked: left alone


def test_every_budget_holds_the_whole_answer(home: Path, local_embedder: Any) -> None:
    # vectors_pending is added after the search's own fit: the answer is fitted again with it.
    for i in range(6):
        write(home / "memory" / f"r{i}.md", f"# Reset {i}\n\n" + "the router reset again " * 40)
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        for budget in range(300, 900, 11):
            res = eng.searcher.search(
                {"query": "router reset", "min_score": 0, "max_tokens": budget}
            )
            assert len(res["results"]) >= 1 and res["budget"]["used_tokens"] <= budget
            assert estimate_tokens(res) <= budget, (budget, res["budget"])
    finally:
        eng.close()


def test_search_max_tokens_and_explain(code_engine: Engine) -> None:
    # The answer's JSON (paths, scores, index state) takes ~220 tokens with one result.
    res = code_engine.searcher.search({"query": "reset", "min_score": 0, "max_tokens": 300})
    assert res["budget"]["max_tokens"] == 300
    assert res["budget"]["used_tokens"] <= 300
    assert estimate_tokens(res) <= 300  # took_ms had a wider stand-in during the fit
    assert all(len(r["snippet"]) >= 40 for r in res["results"])
    for bad in (50, -1, "many", True):
        with pytest.raises(BadRequest):
            code_engine.searcher.search({"query": "reset", "max_tokens": bad})
    with pytest.raises(BadRequest):
        code_engine.searcher.search({"query": "reset", "explain": "yes"})
    res = code_engine.searcher.search(
        {"query": "connection reset", "explain": True, "min_score": 0}
    )
    e = res["results"][0]["explain"]
    assert set(e) >= {"vector", "keyword", "fused", "final"}
    assert e["keyword"]["rank"] >= 1 and 0 <= e["fused"] <= 1
    assert res["explain"]["fusion"] == "weighted" and res["explain"]["match"]


@pytest.mark.slow
def test_cli_search_explain_and_budget(home: Path) -> None:
    for rel, text in CODE_NOTES.items():
        write(home / "memory" / rel, text)
    env = env_for(home)
    run = [sys.executable, "-m", "recalld.surfaces.cli"]
    subprocess.run([*run, "sync"], env=env, check=True, capture_output=True, timeout=300)
    out = subprocess.run(
        [*run, "search", "ConnReset", "--explain", "--max-tokens", "300", "--min-score", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "explain: vector" in out.stdout and "final" in out.stdout
    assert "query shape identifier (0 prose words)" in out.stdout and "NEAR(" in out.stdout
    assert "budget 300: ~" in out.stderr
    js = subprocess.run(
        [*run, "search", "ConnReset", "--explain", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(js.stdout)
    assert data["explain"]["shape"] == "identifier" and "explain" in data["results"][0]


def test_eval_counts_collapsed_places_at_the_result_rank() -> None:
    from recalld.surfaces.evaluation import score_query

    hit = {
        "rel": "notes/a.md",
        "start_line": 1,
        "end_line": 5,
        "chars": 100,
        "also": [{"rel": "sessions/s.jsonl", "start_line": 7, "end_line": 7}],
    }
    scores = score_query([hit], [("sessions/s.jsonl", 7)], [1, 10])
    assert scores["hit@1"] == 1.0 and scores["mrr@10"] == 1.0
    scores = score_query([hit], [("sessions/s.jsonl", 8)], [1, 10])
    assert scores["hit@1"] == 0.0


def test_a_query_that_is_a_path_ranks_that_file_first(home: Path, local_embedder: Any) -> None:
    target = write(home / "memory" / "ops" / "deploy" / "k8s.md", "# Cluster\n\nNodes: three.\n")
    # Notes that say the path's words far more often than the file itself does.
    for i in range(4):
        write(
            home / "memory" / "ops" / f"about-deploy-{i}.md",
            f"# Ops {i}\n\nops deploy k8s md: the deploy of k8s by ops, see the md files.\n",
        )
    write(home / "memory" / "other" / "k8s.md", "# Other k8s\n\nNot the one.\n")
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        for query in ("ops/deploy/k8s.md", str(target), "deploy/k8s.md"):
            res = eng.searcher.search({"query": query})
            assert paths_of(res, home)[0] == "ops/deploy/k8s.md", (query, paths_of(res, home))
            assert res["results"][0]["score"] == 1.0
        explained = eng.searcher.search({"query": "ops/deploy/k8s.md", "explain": True})
        assert explained["results"][0]["explain"]["path_match"] == str(target)
        # Filters still apply; a name two files share puts both first.
        res = eng.searcher.search(
            {"query": "ops/deploy/k8s.md", "sources": ["sessions"], "min_score": 0}
        )
        assert not res["results"]
        both = paths_of(eng.searcher.search({"query": "k8s.md", "min_score": 0}), home)[:2]
        assert sorted(both) == ["ops/deploy/k8s.md", "other/k8s.md"]
        # The words alone, not a path: the channels decide as before.
        assert not path_query.looks_like_path("deploy k8s")
        assert path_query.looks_like_path("~/notes/a.md") and path_query.looks_like_path("a/b")
    finally:
        eng.close()


def test_candidates_all_under_the_floor_are_announced_with_how_to_see_them(
    home: Path, local_embedder: Any
) -> None:
    write(home / "memory" / "infra.md", "# Infra\n\nWe picked Kubernetes for the cluster.\n")
    write(home / "memory" / "food.md", "# Food\n\nTomatoes need sun and water.\n")
    eng = make_engine(home, local_embedder)
    try:
        eng.sync()
        # Paraphrase with no shared word: candidates from the vector channel, all under 0.95.
        res = eng.searcher.search({"query": "container orchestration choice", "min_score": 0.95})
        assert res["results"] == []
        floor = res["under_floor"]
        assert floor["candidates"] >= 1 and floor["min_score"] == 0.95
        assert 0 < floor["see_with"] <= floor["best_score"] < 0.95
        assert f"min_score {floor['see_with']:g}" in floor["hint"]
        shown = eng.searcher.search(
            {"query": "container orchestration choice", "min_score": floor["see_with"]}
        )
        assert shown["results"] and "under_floor" not in shown
        # The CLI and the MCP tool say the same.
        from recalld.surfaces.cli_output import search_text
        from recalld.surfaces.mcp_server import search_payload

        printed = search_text(res, False)[0]
        assert "no results over the score floor 0.95" in printed
        assert f"--min-score {floor['see_with']:g}" in printed
        assert floor["hint"] in search_payload(res)["note"]
        # Nothing found at all is not "under the floor": no such note.
        none = eng.searcher.search({"query": "zzqx", "mode": "keyword"})
        assert none["results"] == [] and "under_floor" not in none
    finally:
        eng.close()
