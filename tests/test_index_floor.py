"""The keyword-first floor (issue 40): the cheaper paths of a first sync give exactly what the
library and the former regexes gave, on real notes.

Chunk boundaries and texts are the embedding cache's key, and ``ident`` is what identifier
queries match, so neither may move: each faster path is compared with the slow one it replaces.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import BENCH, needs_bench
from recalld.index import ident_tokens as it
from recalld.index.store import FileRow, Identity, NewChunk, Store
from recalld.ingest.chunking import chunk_markdown
from recalld.ingest.indexer import text_hash
from recalld.tokens import _MAX_PIECE, _SPACES, Tokenizer, _ascii_count

VAULT = BENCH / "vault-known-item" / "corpus"
TRANSCRIPTS = BENCH / "transcripts"


def _notes(limit: int) -> list[str]:
    files = sorted(p for p in VAULT.rglob("*.md") if p.is_file())
    random.Random(40).shuffle(files)
    return [p.read_text(encoding="utf-8", errors="replace") for p in files[:limit]]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.load()


def _library(tok: Tokenizer) -> object:
    """The count the library gives one text (what ``count`` did through it, word by word)."""

    def count(text: str) -> int:
        return len(tok.tokens(text))

    return count


# --- counting --------------------------------------------------------------------------------


def test_longest_vocab_token_bounds_the_greedy_match(tok: Tokenizer) -> None:
    assert max(map(len, tok._vocab)) == _MAX_PIECE
    # Every printable ASCII char but the capitals (lowercased first) is a token of its own.
    assert all(chr(c) in tok._vocab for c in range(0x21, 0x7F) if not chr(c).isupper())


@needs_bench("vault-known-item")
def test_ascii_count_is_the_library_count_of_every_real_word(tok: Tokenizer) -> None:
    words = {w for text in _notes(400) for w in _SPACES.split(text)}
    r = random.Random(1)
    words |= {"".join(r.choices("abcXYZ019#_-.'[]()", k=r.randint(1, 30))) for _ in range(20000)}
    # Pieces that look like vocab entries but are not words, the 100-char [UNK] limit.
    words |= {"##ing", "[CLS]", "[unk]", "a" * 100, "a" * 101, "x" * 101 + ".b", "Qx" * 60}
    ascii_words = sorted(w for w in words if w.isascii() and w.isprintable())
    assert len(ascii_words) > 25000
    library = [len(e) for e in tok._plain.encode_batch_fast(ascii_words, add_special_tokens=False)]
    got = [_ascii_count(w, tok._vocab) for w in ascii_words]
    assert [w for w, a, b in zip(ascii_words, got, library, strict=True) if a != b] == []


@needs_bench("vault-known-item")
def test_chunks_of_real_notes_are_those_of_library_counts(
    tok: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small memory so that it starts over many times on the way (the path with a clear).
    monkeypatch.setattr("recalld.tokens.MEMO_WORDS", 3000)
    library = _library(tok)
    notes = _notes(300)
    assert sum(map(len, notes)) > 400_000
    for text in notes:
        for line in text.split("\n"):
            assert tok.count(line) == library(line)  # type: ignore[operator]
        kwargs = {"max_tokens": 256, "target_tokens": 160, "chat_overlap": 0.25, "additive": True}
        new = chunk_markdown(text, tok.count, **kwargs)  # type: ignore[arg-type]
        old = chunk_markdown(text, library, **kwargs)  # type: ignore[arg-type]
        assert new == old
        assert [text_hash(c.text) for c in new] == [text_hash(c.text) for c in old]


# --- ident --------------------------------------------------------------------------------------

# The patterns ident_tokens tried at every token before (the reference for _compounds), greedy:
# the token and separator classes are disjoint, so they match what the possessive forms did, and
# CPython 3.11.2 (Debian 12's python3) mis-matches possessive repeats inside a repeated group.
_UNDERSCORE = re.compile(r"(?<![^\W_])[^\W_]+(?:_+[^\W_]+)+")
_DOTTED = re.compile(r"(?<![^\W_])[^\W_]+(?:[._]+[^\W_]+)+")


def _reference_derive(text: str, out: it._Budget) -> None:
    for m in it._RICH_TOKEN.finditer(text):
        if out.full:
            return
        tok = m.group()
        if it._CJK.search(tok):
            out.add([g for run in it._CJK.findall(tok) for g in it.cjk_bigrams(run)])
        else:
            parts = it.split_word(tok) if len(tok) <= it.MAX_SPLIT_CHARS else []
            if len(parts) > 1 and not it._noise(parts):
                out.add(parts)
    for rx in (_UNDERSCORE, _DOTTED):
        for m in rx.finditer(text):
            if out.full:
                return
            if rx is _DOTTED and "." not in m.group():
                continue
            squashed = it._SEPARATORS.sub("", m.group()).casefold()
            if not it._CJK.search(squashed):
                out.add([squashed])


def _reference_ident(text: str) -> str:
    out = it._Budget()
    _reference_derive(text, out)
    if "\\" in text or "\x1b" in text:
        for m in it._DIRTY_WORD.finditer(text):
            if out.full:
                break
            clean = it.decode_escapes(m.group()[: 2 * it.MAX_IDENT_CHARS])
            out.add([t.casefold() for t in it._TOKEN.findall(clean)])
            _reference_derive(clean, out)
    return " ".join(out.words)[: it.MAX_IDENT_CHARS]


def _odd_texts() -> Iterator[str]:
    r = random.Random(7)
    alphabet = "aZ0_._. -日本\\\x1b[émMQ9\u00e9\u0301\u2028\n"
    for _ in range(5000):
        yield "".join(r.choices(alphabet, k=r.randint(0, 60)))
    yield from ["a" * 40000 + ".b", "x_" * 5000, "A1" * 20000, "_a.b", "a._b", "a.-_b", "3.5"]
    yield "ERR_CONN_RESET SpotterWeb.Router useState HTTPServer sha512sum 東京タワー"


@needs_bench("vault-known-item")
def test_ident_text_is_the_reference_on_real_and_odd_texts() -> None:
    texts = [line for note in _notes(300) for line in [note, *note.split("\n\n")]]
    texts += list(_odd_texts())
    if TRANSCRIPTS.exists():  # tool output: JSON escapes, paths, colour codes
        for p in sorted(TRANSCRIPTS.rglob("*.jsonl"))[:6]:
            texts += p.read_text(errors="replace").split("\n")[:300]
    assert [t[:200] for t in texts if it.ident_text(t) != _reference_ident(t)] == []


def test_ident_paths_on_ascii_and_other_text() -> None:
    # The ASCII path (pairs found by bytes.find) and the other (the pattern) agree on order.
    text = "call getUserName then IL6 and x9 via foo.bar_baz, 東京 mixedCase"
    assert it.ident_text(text) == _reference_ident(text)
    assert "get user name" in it.ident_text(text) and "foobarbaz" in it.ident_text(text)
    assert list(it._rich_tokens("p53 and CD4+ cells")) == ["p53", "CD4"]
    assert list(it._compounds("a.b_c d._e x_y", it._DOTTED_LINK)) == [(0, 5), (6, 10), (11, 14)]


# --- writes -------------------------------------------------------------------------------------


def test_vectors_generation_moves_only_when_vectors_do(tmp_path: Path) -> None:
    """A keyword-first write adds no vector and leaves the generation (a saved matrix stays
    current); a vector written or a chunk removed counts as before."""
    store = Store(tmp_path / "index.sqlite")
    try:
        store.set_identity(Identity("k", "local", "m", 4, "{}"))
        state = store.vectors_state()
        assert state is not None
        epoch, g0 = state

        def write(path: str, text: str, vectors: dict[str, np.ndarray] | None) -> int | None:
            h = text_hash(text)
            row = FileRow(path, "memory", len(text), 1, h, 1)
            return store.replace_file(row, [NewChunk(1, 1, text, h)], vectors).generation

        assert write("/m/a.md", "alpha words", None) == g0  # new file, no vector
        assert store.vectors_state() == (epoch, g0)
        vec = np.full(4, 0.5, dtype=np.float32)
        assert write("/m/b.md", "beta words", {text_hash("beta words"): vec}) == g0 + 1
        assert write("/m/a.md", "alpha edited", None) == g0 + 2  # its old chunk removed
        assert store.vectors_state() == (epoch, g0 + 2)
        ids = store.conn.execute("SELECT count(*) FROM chunks WHERE path = '/m/a.md'").fetchone()
        assert ids == (1,)
    finally:
        store.close()
