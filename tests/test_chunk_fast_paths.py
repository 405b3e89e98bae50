"""The fourth pass of the keyword floor (issue 40): each faster path of chunking a note gives
exactly what the path it replaces gave (chunks are the embedding cache's key, tags a filter)."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from recalld.ingest import line_pieces
from recalld.ingest.chunking import chunk_markdown
from recalld.ingest.conversation_windows import _SPEAKER, _speaker
from recalld.ingest.line_pieces import WORD, LinePieces, more_words_than
from recalld.ingest.note_facts import _INLINE_TAG, inline_tags
from recalld.tokens import _ODD_SPACES, _SPACES, Tokenizer

# Spaces of every kind count() and str.split() may disagree on, and chars around them.
_ALPHABET = "ab Z9.,#-_/&=:\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2003\u3000é漢"


def _texts(seed: int, n: int, longest: int = 30) -> list[str]:
    rnd = random.Random(seed)
    return ["".join(rnd.choices(_ALPHABET, k=rnd.randint(0, longest))) for _ in range(n)]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.load()


def test_str_split_is_taken_only_where_it_cuts_as_the_pattern_does() -> None:
    # str.split() cuts ASCII text at these chars; count() cuts at _SPACES' four: the others must
    # send a text to the pattern.
    split_at = {chr(c) for c in range(128) if chr(c).isspace()}
    assert split_at - set(" \t\n\r") == {c for c in split_at if _ODD_SPACES.match(c)}


def test_count_is_the_library_count_of_odd_whitespace(tok: Tokenizer) -> None:
    texts = _texts(1, 3000)
    for text in texts + texts:  # the second time from the memo
        assert tok.count(text) == len(tok.tokens(text)), repr(text)


def test_count_by_pieces_is_the_library_count_of_plain_ascii(
    tok: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain ASCII text (printable chars, tabs, line breaks) is counted by its pieces: every
    printable char, runs past the remembered length and WordPiece's 100-char limit, and a memo
    small enough to start over on the way."""
    monkeypatch.setattr("recalld.tokens.MEMO_WORDS", 200)
    fresh = Tokenizer.load()
    rnd = random.Random(6)
    plain = [chr(c) for c in range(0x20, 0x7F)] + ["\t", "\n", "\r", " ", " ", "e", "s"]
    texts = ["".join(rnd.choices(plain, k=rnd.randint(0, 60))) for _ in range(3000)]
    runs = ["x" * 64, "y" * 65, "Ab1" * 33, "z" * 100, "q" * 101, "tokenization" * 9]
    texts += [f"{a} {b}.{a}\t({b})" for a, b in zip(runs, reversed(runs), strict=True)]
    for text in texts + texts:  # the second time from the memo
        assert fresh.count(text) == len(tok.tokens(text)), repr(text)
    assert len(fresh._pieces) <= 200 + len(tok._pieces)


def test_count_adds_up_as_the_pattern_cuts(tok: Tokenizer) -> None:
    fresh = Tokenizer.load()
    for text in _texts(2, 3000, longest=80):
        words = _SPACES.split(text)
        assert fresh.count(text) == sum(len(tok.tokens(w)) for w in words), repr(text)


def test_more_words_than_counts_the_word_pattern() -> None:
    for text, n in itertools.product(_texts(3, 1500), (0, 1, 2, 5)):
        former = next(itertools.islice(WORD.finditer(text), n, None), None) is not None
        assert more_words_than(text, n) is former, (repr(text), n)


def test_inline_tag_pattern_finds_what_the_former_did() -> None:
    former = re.compile(r"(?<![\w#/&=.:])#([A-Za-z_][\w\-/]*)")
    odd = ["#a", "##a", "x#a", "(#a_b/c-d) #é #_x", ":#a &#a"]
    texts = [*_texts(4, 20_000, longest=40), *odd]
    for text in texts:
        got = [m.span(1) for m in _INLINE_TAG.finditer(text)]
        assert got == [m.span(1) for m in former.finditer(text)], repr(text)
    assert inline_tags("# Title\n#Work and #home, not a#b nor ##c") == ["work", "home"]


def test_long_lines_chunk_alike_with_a_shared_word_memo(tok: Tokenizer) -> None:
    rnd = random.Random(5)
    words = ["alpha", "beta,", "γάμμα", "x" * 70, "delta.", "epsilon-zeta", "eta"]
    notes = [
        "# Note\n\n" + " ".join(rnd.choices(words, k=rnd.randint(200, 1500))) + "\n"
        for _ in range(20)
    ]
    for note in notes:
        # A plain function is not shared: each run remembers its own words, as before.
        alone = chunk_markdown(note, lambda s: tok.count(s), max_tokens=128, target_tokens=96)
        shared = chunk_markdown(note, tok.count, max_tokens=128, target_tokens=96)
        assert [(c.start_line, c.end_line, c.text) for c in shared] == [
            (c.start_line, c.end_line, c.text) for c in alone
        ]
    memo = line_pieces._memo_of(tok.count)
    assert memo and memo is LinePieces(tok.count, 126, 96)._words
    assert line_pieces._memo_of(lambda s: tok.count(s)) == {}


def test_a_line_without_a_colon_opens_no_turn() -> None:
    lines = [*_texts(6, 5000), "Ann: hi there", "- **Bob Lee**: yes", "[10:02] Cy: ok", "no colon"]
    for line in lines:
        m = _SPEAKER.match(line)
        assert _speaker(line) == (m.group("name").lower() if m else None), repr(line)
