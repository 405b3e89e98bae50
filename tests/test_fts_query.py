"""Safe FTS5 MATCH expressions, run against a real FTS5 table with the index's tokenizer."""

from __future__ import annotations

import re
from collections.abc import Iterator

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recalld.index.ident_tokens import ident_text
from recalld.retrieval.fts_query import MAX_MATCH_CHARS, MAX_TERMS, build_match, query_terms

DDL = (
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, path UNINDEXED, "
    'tokenize = "porter unicode61 remove_diacritics 2")'
)
SEARCH = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts)"

ROWS = {
    1: "Use snake_case names, the useState hook and camelCase in React.",
    2: "Error E-1234 happened when calling foo.bar() in v1.2.3 of the tool",
    3: "Config lives in $HOME/.config/recalld; see path/to/file.md for details",
    4: "Set col:value pairs near the start (a line) with a* globs and ^start anchors",
    5: "Unrelated text about a café, a naïve résumé and 🙂 emoji",
    6: "The case of the snake: it is not worth a case at all, the end",
}

# Every term is a quoted string; only OR/AND sit between them.
_QUOTED = r'"(?:[^"]|"")*"'
GRAMMAR = re.compile(rf"{_QUOTED}(?: (?:OR|AND) {_QUOTED})*")


@pytest.fixture(scope="module")
def db() -> Iterator[apsw.Connection]:
    conn = apsw.Connection(":memory:")
    conn.execute(DDL)
    for rowid, text in ROWS.items():
        conn.execute(
            "INSERT INTO chunks_fts(rowid, text, path) VALUES (?, ?, ?)", (rowid, text, "p")
        )
    yield conn
    conn.close()


def search(db: apsw.Connection, query: str, mode: str = "or") -> list[int]:
    match = build_match(query, mode=mode)  # type: ignore[arg-type]
    if match is None:
        return []
    assert GRAMMAR.fullmatch(match), match
    return [row[0] for row in db.execute(SEARCH, (match,))]


NASTY = [
    "snake_case",
    "camelCase",
    "useState",
    "E-1234",
    "foo.bar()",
    "$HOME",
    '"unbalanced',
    "(paren",
    "paren)",
    "AND",
    "NEAR(a b)",
    "NEAR(snake case, 2)",
    "OR NOT",
    "a OR b NOT c AND",
    "col:value",
    "text:snake",
    "{text path}: snake",
    "a*",
    "*",
    "^start",
    "-snake +case",
    "🙂",
    "🙂🚀 useState",
    "",
    "   \t\n ",
    '""',
    '"a""b"',
    "x\x00y",
    "\x00",
    "lone \ud800 surrogate",
    "path/to/file.md",
    "v1.2.3",
    "C:\\Users\\me\\notes.md",
    "naïve—résumé",
    "x" * 5000,
]


@pytest.mark.parametrize("query", NASTY)
@pytest.mark.parametrize("mode", ["or", "and"])
def test_nasty_queries_never_error(db: apsw.Connection, query: str, mode: str) -> None:
    search(db, query, mode)  # neither building nor running may raise


@pytest.mark.parametrize(
    ("query", "rowid"),
    [
        ("snake_case", 1),
        ("camelCase", 1),
        ("useState", 1),
        ("usestate", 1),
        ("USESTATE", 1),
        ("E-1234", 2),
        ("e1234", None),  # a different token sequence: not found, and that is right
        ("foo.bar()", 2),
        ("foo.bar", 2),
        ("v1.2.3", 2),
        ("$HOME", 3),
        ("path/to/file.md", 3),
        ("col:value", 4),
        ("a*", 4),
        ("^start", 4),
        ("resume", 5),
        ("café", 5),
        ("naïve—résumé", 5),  # non-ASCII separator: FTS5 splits the quoted span itself
    ],
)
def test_identifiers_find_their_row(db: apsw.Connection, query: str, rowid: int | None) -> None:
    hits = search(db, query, "and")
    if rowid is None:
        assert hits == []
    else:
        assert rowid in hits
        assert rowid in search(db, query, "or")


def test_compound_is_a_phrase() -> None:
    assert build_match("snake_case") == '"snake case"'
    assert build_match("foo.bar()") == '"foo bar"'
    assert build_match("E-1234") == '"E 1234"'
    assert build_match("useState") == '"useState"'  # FTS5 folds case itself


def test_phrase_requires_adjacency(db: apsw.Connection) -> None:
    # Row 6 has "snake" and "case", but not one right after the other.
    assert search(db, "snake_case") == [1]
    assert set(search(db, "snake case", "and")) == {1, 6}
    assert search(db, "foo.bar()") == [2]


def test_keywords_are_terms_not_operators(db: apsw.Connection) -> None:
    assert build_match("NOT") == '"NOT"'
    assert build_match("a OR b", mode="and") == '"a" AND "OR" AND "b"'
    assert search(db, "not", "and") == [6]
    assert build_match("NEAR(a b)") == '"NEAR a" OR "b"'


def test_stopwords_dropped_in_or_mode_only() -> None:
    assert build_match("how to use the useState hook") == '"use" OR "useState" OR "hook"'
    assert build_match("the and of") == '"the" OR "and" OR "of"'
    assert build_match("the hook", mode="and") == '"the" AND "hook"'


def test_empty_and_unsearchable() -> None:
    for q in ["", "   ", "\n\t", "🙂🚀", "***", "()", '"', "-", "^:"]:
        assert build_match(q) is None
        assert build_match(q, mode="and") is None
        assert query_terms(q) == []


def test_dedup_case_insensitive() -> None:
    assert build_match("foo Foo FOO foo.") == '"foo"'
    assert build_match("a_b A-B a.b") == '"a b"'


def test_query_terms() -> None:
    terms = query_terms("How to use snake_case and useState?")
    assert terms == ["use", "snake", "case", "usestate"]
    assert query_terms("the of") == ["the", "of"]


def test_control_chars_and_quotes_are_neutralised() -> None:
    assert build_match("x\x00y") == '"x y"'
    assert build_match('a"b') == '"a b"'
    match = build_match('é\x00—"ü')  # non-ASCII gap: the raw span is kept, but made safe
    assert match == '"é —""ü"'


def test_huge_query_is_capped(db: apsw.Connection) -> None:
    words = " ".join(f"word{i} snake_case{i}" for i in range(10_000))  # ~160 KB
    match = build_match(words)
    assert match is not None
    assert match.count(" OR ") + 1 == MAX_TERMS
    assert len(match) <= MAX_MATCH_CHARS
    search(db, words)
    one_word = "a.b" * 40_000  # 120 KB without whitespace: phrases of a few tokens each
    match = build_match(one_word, mode="and")
    assert match is not None and len(match) <= MAX_MATCH_CHARS
    search(db, one_word, "and")
    assert build_match("x" * 500) is None  # no one searches for a 500-char token


fts_text = st.text(
    alphabet=st.sampled_from(list('"*^:()-+_.$ {}[],;\\/ANDORNTEAab1é\x00\t\n🙂')), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(query=st.one_of(st.text(), fts_text), mode=st.sampled_from(["or", "and"]))
def test_property_any_text_is_safe(db: apsw.Connection, query: str, mode: str) -> None:
    search(db, query, mode)
    terms = query_terms(query)
    assert len(terms) == len(set(terms))
    assert all(t == t.casefold() and t for t in terms)


# identifiers as typed beat their parts ----------------------------------------------------------

IDENT_ROWS = {
    1: "tool: Bash `git show --stat HEAD`",
    2: "with {:ok, metadata} <- git_show(hash, git_cwd), {:ok, commit} <- update_commit(hash)",
    3: "tool: test/support/fake_tmux.ex",
    4: "2e91017 fix: use FakeTmux in all review-launch tests (spotter-bhj) and more words here",
    5: "lib/spotter_web/router.ex:12: the router of lib, routes for spotter and web",
    6: "spotter: lib holds web code; the router, an ex-router, lives in a long sentence here",
}


@pytest.fixture(scope="module")
def ident_db() -> Iterator[apsw.Connection]:
    conn = apsw.Connection(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, ident, "
        'tokenize = "porter unicode61 remove_diacritics 2")'
    )
    for rowid, text in IDENT_ROWS.items():
        conn.execute(
            "INSERT INTO chunks_fts(rowid, text, context, ident) VALUES (?, ?, '', ?)",
            (rowid, text, ident_text(text)),
        )
    yield conn
    conn.close()


@pytest.mark.parametrize(
    ("query", "best"),
    [
        ("git_show", 2),  # the snake_case name, not the prose "git show"
        ("FakeTmux", 4),  # the CamelCase name as typed, not fake_tmux
        ("fake_tmux", 3),  # and the other way round
        ("lib/spotter_web/router.ex", 5),  # the exact sequence, not the parts scattered
    ],
)
def test_identifier_as_typed_ranks_first(ident_db: apsw.Connection, query: str, best: int) -> None:
    match = build_match(query, partial=True)
    assert match is not None
    rows = [int(r[0]) for r in ident_db.execute(SEARCH, (match,))]
    assert rows[:1] == [best], (match, rows)


def test_dotted_name_beats_prose_with_its_words() -> None:
    conn = apsw.Connection(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, ident, "
        'tokenize = "porter unicode61 remove_diacritics 2")'
    )
    rows = {
        1: "the agent made a tool call to read the file",
        2: "span = tracer.start_span(name) and attrs = tool.call(span, args)",
    }
    # Unrelated rows, so that inverse document frequencies mean something.
    rows.update({i: f"note {i}: the build passed and the tests ran green" for i in range(3, 30)})
    for rowid, text in rows.items():
        conn.execute(
            "INSERT INTO chunks_fts(rowid, text, context, ident) VALUES (?, ?, '', ?)",
            (rowid, text, ident_text(text)),
        )
    match = build_match("tool.call", partial=True)
    assert match is not None
    found = [int(r[0]) for r in conn.execute(SEARCH, (match,))]
    assert found[:1] == [2], (match, found)


def test_elided_words_are_prose_not_identifiers(ident_db: apsw.Connection) -> None:
    # A possessive or contraction is one phrase of its tokens, without the identifier variants
    # (NEAR of prefixes, the ident column) that a compound like ``foo_bar`` gets.
    assert build_match("James's job", partial=True) == '"James s" OR "job"'
    assert build_match("James\u2019s job", partial=True) == '"James\u2019s" OR "job"'
    assert build_match("rock'n'roll", partial=True) == '"rock n roll"'
    assert "NEAR(" in (build_match("foo_bar's", partial=True) or "")  # an identifier still
    for query in ["James's", "don't", "that's"]:
        match = build_match(query, partial=True)
        assert match is not None
        list(ident_db.execute(SEARCH, (match,)))  # valid FTS5


def test_hyphened_words_are_one_phrase(ident_db: apsw.Connection) -> None:
    # Words joined by hyphens are their exact phrase (which also finds them joined by "_", split
    # in the ident column); a part that splits further (``useState-hook``) is an identifier.
    assert build_match("middle-aged adults", partial=True) == '"middle aged" OR "adults"'
    assert build_match("systemctl list-unit-files", partial=True) == (
        '"systemctl" OR "list unit files"'
    )
    assert build_match("HHV\u20118", partial=True) == '"HHV\u20118"'
    assert "NEAR(" in (build_match("useState-hook", partial=True) or "")
    assert "NEAR(" in (build_match("list_unit_files", partial=True) or "")
    assert "NEAR(" in (build_match("list-unit_files", partial=True) or "")
    texts = ["run list-unit-files", "ListUnitFiles()", "list_unit_files", "list files by unit"]
    for rowid, text in enumerate(texts, start=101):
        ident_db.execute(
            "INSERT INTO chunks_fts(rowid, text, context, ident) VALUES (?, ?, '', ?)",
            (rowid, text, ident_text(text)),
        )
    match = build_match("list-unit-files", partial=True)
    assert {int(r[0]) for r in ident_db.execute(SEARCH, (match,))} == {101, 102, 103}


def test_short_identifier_parts_are_their_exact_sequence(ident_db: apsw.Connection) -> None:
    # Parts too short to be prefixes (``CD4``, ``P38``) are their exact sequence, not a NEAR:
    # ``p = 0.38`` is no P38. A sequence that is the exact phrase itself is not added twice.
    assert build_match("CD4", partial=True) == '("CD4" OR {text context} : "CD4" OR "cd 4")'
    assert build_match("a_b", partial=True) == '("a b" OR {text context} : "a b" OR "ab")'
    assert "NEAR(" in (build_match("miRNA", partial=True) or "")  # "rna"* is a prefix
    texts = ["P38 MAPK", "the p38 kinase", "p 38 again", "p = 0.38 here", "p38MAPK"]
    for rowid, text in enumerate(texts, start=201):
        ident_db.execute(
            "INSERT INTO chunks_fts(rowid, text, context, ident) VALUES (?, ?, '', ?)",
            (rowid, text, ident_text(text)),
        )
    match = build_match("P38", partial=True)
    assert {int(r[0]) for r in ident_db.execute(SEARCH, (match,))} == {201, 202, 203, 205}


def test_elided_stopwords_are_stopwords() -> None:
    # ``that's``, ``I'm``, ``don't`` are stopwords with a clitic: dropped like "that" and "do".
    assert build_match("that's what I'm saying, don't wait") == '"saying" OR "wait"'
    assert build_match("we've can't it'll won't deploy") == '"deploy"'
    # A name with a clitic is no stopword, whatever its letters: "Don" is not "don't".
    assert build_match("Don's car") == '"Don s" OR "car"'
    assert build_match("Won's fix") == '"Won s" OR "fix"'
    # Only stopwords: kept, as a query of stopwords is.
    assert build_match("that's") == '"that s"'
