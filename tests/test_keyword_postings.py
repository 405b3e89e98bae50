"""Held postings score the keyword channel exactly as FTS5's bm25() does, and stay exact
through every kind of write (keyword_postings.py, keyword_scoring.py, fts_postings.py).

Real index files and engines: each answer of the numpy scoring is compared with FTS5's own
ranked query on the same connection, after new notes, edits, removals, transcript appends and
a rebuild, with column filters, identifier variants, other column weights, a tiny memory
budget and a flood of changes.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import apsw
import numpy as np
import pytest

from conftest import make_engine, write
from recalld.engine import Engine
from recalld.index import fts_postings
from recalld.index.store import Store
from recalld.retrieval import coordination, keyword_postings, keyword_scoring
from recalld.retrieval.fts_query import match_terms, or_terms
from recalld.retrieval.keyword_postings import PostingsCache
from recalld.retrieval.keyword_scoring import Term
from recalld.retrieval.term_stats import TermCounts

_WORD_TEXT = """
    deploy rollback ledger zephyr quokka timeout retry cache index postgres mongo billing invoice
    meeting dinner hiking painting running dogs cats garden kitchen travel paris config parser
    socket daemon tray vector keyword search memory notes session agent
"""
WORDS = _WORD_TEXT.split()
NAMES = ["Caroline", "Melanie", "Deborah", "Audrey", "Jon"]
QUERIES = [
    "When did Caroline go hiking?",
    "what timeout did Melanie suggest for the retry",
    "Deborah's dogs and cats",
    "billing ledger postgres",
    "conn_reset ERR_CONN_RESET",
    "useState hook",
    "running in paris",
    "memory notes agent session search",
    "quokka",
    "config.parser socket",
    "the and of",  # stopwords only
    "zzzz-not-there",
]


def _note(rng: random.Random, i: int) -> str:
    lines = [f"# {rng.choice(WORDS).title()} {rng.choice(NAMES)} {i}", ""]
    for _ in range(rng.randint(2, 9)):
        who = rng.choice(NAMES)
        said = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 25)))
        lines.append(f"{who}: {said}.")
    if i % 7 == 0:
        lines.append("Saw ERR_CONN_RESET from config.parser after useState changed; conn reset.")
    if i % 11 == 0:
        lines.append("Deborah's dogs love running; Jon's cats do not.")
    return "\n".join(lines) + "\n"


def _fill(memory: Path, count: int, seed: int = 7) -> random.Random:
    rng = random.Random(seed)
    for i in range(count):
        write(memory / f"n{i:03d}.md", _note(rng, i))
    return rng


def _msg(role: str, text: str) -> str:
    line = {"type": role, "message": {"role": role, "content": text}, "sessionId": "s1"}
    line["timestamp"] = "2026-11-01T10:00:00Z"
    return json.dumps(line) + "\n"


def _terms(query: str, partial: bool) -> list[Term]:
    return [(e, not partial) for e in match_terms(query, partial=partial)]


def _assert_same(
    store: Store, cache: PostingsCache, terms: list[Term], weights: tuple[float, float, float]
) -> int:
    """The numpy answer equals FTS5's (ids in order, ties aside; scores to 1e-9)."""
    if not terms:
        return 0
    limit = 24
    ref = store.keyword_search(
        keyword_scoring.match_of(terms),
        10_000,
        None,
        None,
        context_weight=weights[1],
        ident_weight=weights[2],
    )
    got = keyword_scoring.search(store.conn, cache, terms, limit, weights)
    if got is None:  # phrases only: FTS5's own query
        return 0
    want = ref[:limit]
    assert len(got) == len(want), (terms, got, want)
    for (_, gs), (_, ws) in zip(got, want, strict=True):
        assert gs == pytest.approx(ws, rel=1e-9, abs=1e-12), terms
    # the same rows, except where FTS5 and we break a tie at the cut differently
    cut = want[-1][1] if want else 0.0
    sure = {cid for cid, s in ref if s < cut - 1e-9}
    assert sure <= {cid for cid, _ in got}, terms
    return len(got)


def _check_all(store: Store, cache: PostingsCache) -> int:
    found = 0
    for q in QUERIES:
        for partial in (True, False):
            for weights in ((1.0, 1.5, 1.0), (1.0, 3.0, 0.0)):
                terms = _terms(q, partial)
                found += _assert_same(store, cache, terms, weights)
                extra = [('"hiking"', False), ('"dog"', False), ('"ledgers"', False)]
                found += _assert_same(store, cache, terms + extra, weights)
    return found


def _held_match_fresh(engine: Engine) -> None:
    """Every word the cache holds has FTS5's postings now."""
    assert engine.postings is not None
    with engine.reader() as store:
        for word in ("Caroline", "dogs", "hiking", "ledger", "quokka", "conn"):
            (token,) = fts_postings.query_tokens(store.conn, word)  # "carolin", "dog", "hike"
            engine.postings.snapshot(store.conn, [token])
            held = engine.postings.held_ids(token)
            fresh = fts_postings.term_postings(store.conn, token)
            assert held is not None and np.array_equal(held, fresh.ids), token
            # the document frequencies searches are told come from them too
            quoted = f'"{word}"'
            told = engine.term_stats.on(store.conn, engine.searcher.held_counts(store)).df(quoted)
            assert told == TermCounts(store.conn).df(quoted) == len(fresh.ids), word


@contextlib.contextmanager
def _synced(home: Path, notes: int) -> Iterator[tuple[Store, PostingsCache]]:
    """A reader of a synced index of ``notes`` notes, and a fresh cache of its own."""
    _fill(home / "memory", notes)
    engine = make_engine(home, None)
    try:
        engine.sync()
        with engine.reader() as store:
            yield store, PostingsCache(64 << 20)
    finally:
        engine.close()


def test_scores_equal_fts5_bm25(home: Path) -> None:
    with _synced(home, 120) as (store, cache):
        assert _check_all(store, cache) > 200
        assert cache.stats["fetched"] > 0 and cache.stats["held"] > 0


def test_the_feedback_search_reads_the_phrases_once(home: Path) -> None:
    """A second search with the first one's phrases (pseudo-relevance feedback) reuses FTS5's
    part of the sum: the same answer as asking FTS5 again, one phrase query instead of two."""
    with _synced(home, 60) as (store, cache):
        terms = _terms("Did Deborah's dogs see ERR_CONN_RESET after useState", True)
        extra = [*terms, ('"hiking"', False), ('"ledger"', False)]
        weights = (1.0, 1.5, 1.0)
        asked: list[str] = []

        def trace(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
            if "bm25(chunks_fts" in sql:
                asked.append(sql)
            return True

        store.conn.exec_trace = trace
        try:
            memo: keyword_scoring.PhraseParts = {}
            first = keyword_scoring.search(store.conn, cache, terms, 24, weights, None, memo)
            # one statement per phrase: "Deborah s", "ERR CONN RESET" and its text-only twin,
            # the two groups' NEARs
            phrases = len(asked)
            assert phrases == 5
            second = keyword_scoring.search(store.conn, cache, extra, 24, weights, None, memo)
            assert len(asked) == phrases
            assert first == keyword_scoring.search(store.conn, cache, terms, 24, weights)
            assert second == keyword_scoring.search(store.conn, cache, extra, 24, weights)
            assert len(asked) == 3 * phrases  # without the memo each search asks again
        finally:
            store.conn.exec_trace = None
        assert first and second and first != second
        _assert_same(store, cache, extra, weights)


_IDENT_NOTES = [
    "CD4 counts rose; memory CD4+ T cells, cd 4 and cd-4 too. P38 MAPK.\n",
    "p = 0.38 and p < 0.4 for the cd group; cd4 cells; the x_OR_y flag, x or y.\n",
    'Set x_OR_y, then say ""quoted"" for ERR_CONN_RESET; P38 again, p38.\n',
]


def test_identifier_groups_score_their_words_from_held_postings(home: Path) -> None:
    """An identifier group's single words (``"CD4"`` and its text-only twin) are scored from
    the held postings and only its other parts by FTS5: the same scores as FTS5's bm25 of
    the whole group (a sum over phrases), with the quote-aware split of the group."""
    for i, text in enumerate(_IDENT_NOTES * 4):
        write(home / "memory" / f"id{i:02d}.md", text)
    with _synced(home, 40) as (store, cache):
        asked: list[str] = []

        def trace(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
            if "bm25(chunks_fts" in sql and isinstance(bindings, tuple):
                asked.append(str(bindings[0]))
            return True

        for q in ("memory CD4+ T cells", "P38 kinase", "x_OR_y dogs", "CD4 p38", "ERR_CONN_RESET"):
            terms = _terms(q, True)
            assert any(e.startswith("(") for e, _ in terms), terms  # a group is there
            for weights in ((1.0, 1.5, 1.0), (1.0, 0.5, 0.3), (1.0, 3.0, 0.0)):
                assert _assert_same(store, cache, terms, weights) > 0, q
                asked.clear()
                store.conn.exec_trace = trace
                try:
                    keyword_scoring.search(store.conn, cache, terms, 24, weights)
                finally:
                    store.conn.exec_trace = None
                # FTS5 was asked for the groups' phrases and NEAR only (one statement
                # each), never their words
                assert asked, q
                words = ('"CD4"', '"P38"', '"p38"', '"xory"', '"errconnreset"')
                assert not any(w in one for w in words for one in asked), asked
                assert any("NEAR(" in one for one in asked) == (q == "ERR_CONN_RESET"), asked
                assert not any(" OR " in one.replace('"x OR y"', "") for one in asked), asked
        # a group whose exact form is a phrase keeps it for FTS5, quotes and " OR " included
        (group,) = [e for e, _ in _terms("x_OR_y", True)]
        assert keyword_scoring._alternatives(group) == [
            '"x OR y"',
            '{text context} : "x OR y"',
            '"xory"',
        ]
        assert keyword_scoring._alternatives('("a"" OR b" OR "c")') == ['"a"" OR b"', '"c"']
        assert keyword_scoring._alternatives('("a") OR ("b")') is None


def test_postings_follow_every_write(home: Path) -> None:
    memory = home / "memory"
    rng = _fill(memory, 60)
    glob = str(home / "claude" / "projects" / "*" / "*.jsonl")
    engine = make_engine(home, None, sessions__paths=[glob])
    assert engine.postings is not None
    try:
        engine.sync()

        def check() -> None:
            # through the engine's own cache, the one its searches use
            engine.searcher.search({"query": "Caroline hiking dogs ledger", "mode": "keyword"})
            with engine.reader() as store:
                assert engine.postings is not None
                assert _check_all(store, engine.postings) > 0
            _held_match_fresh(engine)

        check()
        assert engine.postings.stats["lengths_only"] > 0  # nothing held yet: nothing tokenized
        write(memory / "new.md", "Caroline went hiking with the quokka ledger.\n")  # new note
        engine.sync()
        check()
        write(memory / "n003.md", _note(rng, 999))  # an edit
        engine.sync()
        check()
        (memory / "n004.md").unlink()  # a removal
        (memory / "new.md").unlink()
        engine.sync()
        check()
        session = home / "claude" / "projects" / "p1" / "s1.jsonl"
        session.parent.mkdir(parents=True, exist_ok=True)
        session.write_text(_msg("user", "Caroline: dogs hiking, then the ledger"), "utf-8")
        engine.sync_sessions([session])  # a transcript, then an append
        with session.open("a", encoding="utf-8") as f:
            f.write(_msg("assistant", "The ledger timeout is 30 s; Caroline agreed."))
        engine.sync_sessions([session])
        check()
        write(memory / "n005.md", "only a quokka now\n")  # not synced: the rebuild reads it
        engine.reindex()  # the index file is swapped under the cache
        check()
        assert engine.postings.stats["caught_up"] > 0
    finally:
        engine.close()


def test_tiny_budget_and_a_flood_of_changes(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = home / "memory"
    rng = _fill(memory, 40)
    engine = make_engine(home, None, **{"search.keyword_cache_mb": 1})
    assert engine.postings is not None
    engine.postings.budget = 2_000  # a few words at most: every search evicts
    monkeypatch.setattr(keyword_postings, "MAX_PENDING", 30)
    try:
        engine.sync()
        with engine.reader() as store:
            assert _check_all(store, engine.postings) > 0
        assert engine.postings.stats["evicted"] > 0
        for i in range(20):  # more changed rows than MAX_PENDING: forget, read afresh
            write(memory / f"n{i:03d}.md", _note(rng, 500 + i))
        engine.sync()
        with engine.reader() as store:
            assert _check_all(store, engine.postings) > 0
        assert engine.postings.stats["forgotten"] >= 1
    finally:
        engine.close()


def test_off_and_read_only_engines_use_fts5(home: Path) -> None:
    _fill(home / "memory", 10)
    engine = make_engine(home, None, **{"search.keyword_cache_mb": 0})
    try:
        engine.sync()
        assert engine.postings is None
        hits = engine.searcher.search({"query": "Caroline hiking", "mode": "keyword"})["results"]
        assert hits
    finally:
        engine.close()
    reader = Engine(engine.config, writable=False, choice=engine.choice)
    try:
        assert reader.postings is None  # it hears of no write: it could not keep them fresh
        assert (
            reader.searcher.search({"query": "Caroline hiking", "mode": "keyword"})["results"]
            == hits
        )
    finally:
        reader.close()


def test_coordination_reads_held_postings_like_fts5(home: Path) -> None:
    with _synced(home, 80) as (store, cache):
        for q in QUERIES:
            terms = _terms(q, True)
            if not terms:
                continue
            hits = keyword_scoring.search(store.conn, cache, terms, 40, (1.0, 1.5, 1.0))
            cands = [cid for cid, _ in hits or []]
            held = keyword_scoring.holder(store.conn, cache)
            for term in or_terms(q):
                known = held(term, cands)
                if known is not None:
                    assert known == coordination._holding(store.conn, term, cands, None)


def test_docsize_records_decode_like_sqlite_varints() -> None:
    def varint(v: int) -> bytes:
        out = [v & 0x7F]
        v >>= 7
        while v:
            out.append(0x80 | (v & 0x7F))
            v >>= 7
        return bytes(reversed(out))

    values = [[0, 0, 0], [1, 127, 128], [16383, 16384, 5], [2**21 + 5, 3, 2**28 + 1]]
    blobs = [b"".join(varint(v) for v in row) for row in values]
    assert [fts_postings._varints(b) for b in blobs] == values
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    totals = fts_postings._decode_sizes(b"".join(blobs), sizes)
    assert list(totals) == [sum(r) for r in values]


def test_readers_make_their_vocabulary_table_despite_query_only(home: Path) -> None:
    write(home / "memory" / "c.md", "Caroline went hiking.\n")
    engine = make_engine(home, None)
    try:
        engine.sync()
        with engine.reader() as store:
            assert store.conn.execute("PRAGMA query_only").fetchone()[0] == 1
            assert list(fts_postings.term_postings(store.conn, "carolin").ids) == [1]
            assert store.conn.execute("PRAGMA query_only").fetchone()[0] == 1
            with pytest.raises(apsw.ReadOnlyError):
                store.conn.execute("CREATE TABLE x(a)")
    finally:
        engine.close()


def test_a_failing_postings_read_falls_back_to_fts5_and_says_so(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(home / "memory", 30)
    engine = make_engine(home, None)
    try:
        engine.sync()
        query = {"query": "Caroline hiking ledger", "mode": "keyword"}
        held = engine.searcher.search(query)["results"]
        assert engine.status()["keyword_postings"]["words"] > 0

        def broken(conn: apsw.Connection, token: str) -> fts_postings.Postings:
            raise apsw.SQLError("no such table: recalld_vocab")

        assert engine.postings is not None
        engine.postings.reset()
        monkeypatch.setattr(fts_postings, "term_postings", broken)
        assert engine.searcher.search(query)["results"] == held  # FTS5's own query, the same answer
        assert engine.status()["keyword_postings"]["failed"] >= 1
    finally:
        engine.close()


def test_searches_beside_writes_end_exact(home: Path) -> None:
    """Searches on two threads while the writer edits notes: the held postings end as FTS5's."""
    memory = home / "memory"
    rng = _fill(memory, 40)
    engine = make_engine(home, None)
    stop = threading.Event()
    errors: list[BaseException] = []

    def searching(seed: int) -> None:
        local = random.Random(seed)
        try:
            while not stop.is_set():
                engine.searcher.search({"query": local.choice(QUERIES), "mode": "keyword"})
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    try:
        engine.sync()
        threads = [threading.Thread(target=searching, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for i in range(25):
            write(memory / f"n{rng.randrange(40):03d}.md", _note(rng, 1000 + i))
            if i % 5 == 0:
                (memory / f"n{rng.randrange(40):03d}.md").unlink(missing_ok=True)
            engine.sync()
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors
        _held_match_fresh(engine)
        with engine.reader() as store:
            assert engine.postings is not None
            assert _check_all(store, engine.postings) > 0
    finally:
        stop.set()
        engine.close()


def test_held_arrays_are_narrow_but_exact() -> None:
    ids = np.array([3, 9, 40], dtype=np.int64)
    counts = np.array([[1, 0, 0], [255, 2, 0], [0, 0, 7]], dtype=np.uint16)
    post = fts_postings.Postings(*fts_postings.compact(ids, counts))
    assert post.ids.dtype == np.int32 and post.counts.dtype == np.uint8
    assert post.nbytes == 3 * 4 + 9  # 7 bytes a posting
    # a count past 255 widens the merged counts, never wraps
    more = post.plus(np.array([12], dtype=np.int64), np.array([[300, 1, 0]], dtype=np.uint16))
    assert list(more.ids) == [3, 9, 12, 40] and more.counts.dtype == np.uint16
    assert more.counts[2].tolist() == [300, 1, 0] and more.counts[1].tolist() == [255, 2, 0]
    # ids past int32 stay 64-bit
    big = fts_postings.compact(np.array([1, 2**31 + 5], dtype=np.int64), counts[:2])[0]
    assert big.dtype == np.int64 and int(big[-1]) == 2**31 + 5
    assert list(fts_postings.contained(post.ids, np.array([9, 10, 40]))) == [1, 2]
