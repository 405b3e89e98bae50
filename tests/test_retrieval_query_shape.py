"""Retrieval beyond the anchor (issue 9): the query's shape (identifier, question,
statement, long prose), the names it holds, the channel weights and boosts it gets, and a
query that names a file or is a path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import make_engine, write
from recalld.config import Config
from recalld.engine import Engine
from recalld.retrieval import path_query
from recalld.retrieval.query_shape import (
    analyze,
    boosted,
    index_names,
    is_long_prose,
    literal_share,
    normalise_name,
)
from recalld.retrieval.search_ranking import blend_share, channel_weights
from retrieval_support import code_engine as code_engine  # a fixture
from retrieval_support import paths_of


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
