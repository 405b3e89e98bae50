"""The WordPiece tokenizer of all-MiniLM-L6-v2, built from the bundled ``data/vocab.txt``.

It is the BERT-uncased pipeline of the model's own ``tokenizer.json`` (lowercase, accents
stripped, Chinese characters split, ``[CLS] text [SEP]``), assembled in code so that nothing is
fetched at run time. The chunker uses :meth:`Tokenizer.count` to keep chunks inside the model's
256-wordpiece window; the local embedder uses :meth:`Tokenizer.encode_ids` / :func:`pad_batch`.

Importing this module or loading the tokenizer never imports onnxruntime.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib import resources
from itertools import repeat
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import models, normalizers, pre_tokenizers, processors

__all__ = ["MAX_LENGTH", "IntArray", "Tokenizer", "adds_up", "default_tokenizer", "pad_batch"]

#: The model's window in wordpieces, [CLS] and [SEP] included (sentence-transformers'
#: ``max_seq_length``; longer input is truncated).
MAX_LENGTH = 256

IntArray = npt.NDArray[np.int64]

_CLS, _SEP, _PAD, _UNK = "[CLS]", "[SEP]", "[PAD]", "[UNK]"

# Where count() cuts a text into words: chars that BertNormalizer turns into a space (or keeps as
# one) and BertPreTokenizer then splits at, so no wordpiece spans them. Not every Unicode space:
# U+001C-U+001F, for one, are removed as control chars and join what they separate.
_SPACES = re.compile(r"[ \t\n\r]+")
# The ASCII chars str.split() also cuts at but count() must not (BertNormalizer removes them as
# control chars): ASCII text without them is cut by str.split(), ~2x faster than _SPACES; it
# only drops the empty words _SPACES leaves at the ends, which count 0.
_ODD_SPACES = re.compile(r"[\x0b\x0c\x1c-\x1f]")
#: Words whose counts a tokenizer remembers (then it starts over): about 10 MB at most. The
#: 12.9k notes of the bench's three sets (12.7M characters) hold 67k distinct words.
MEMO_WORDS = 100_000
_MEMO_WORD_CHARS = 64  # longer words (base64, minified code) are counted, not remembered
_FRESH_PER_CALL = 1024  # new words counted per library call
_FEW_WORDS = 64  # fewer new words than this are counted one call each (no thread pool)


# An ASCII word as BertPreTokenizer cuts it once lowercased: runs of letters and digits, and
# every punctuation char alone (all of ASCII's non-alphanumeric printable chars are punctuation
# to BERT, and each is a token of the vocab).
_ASCII_PIECES = re.compile(r"[a-z0-9]+|[^a-z0-9]")
# The same cut over a whole text of printable ASCII, tabs and line breaks (spaces dropped): its
# count is the sum of its pieces' (count() remembers pieces, fewer than words: "word," "(word"
# and "Word." are one run and a punctuation char each).
_TEXT_PIECES = re.compile(r"[a-z0-9]+|[^a-z0-9 \t\n\r]")
# What sends an ASCII text to the word path instead: chars BertNormalizer deletes (controls, DEL;
# they join what they separate) and the spaces it keeps but str.split() has other views on.
_NOT_PLAIN = re.compile(r"[^\t\n\r\x20-\x7e]")
# Each printable ASCII punctuation char is one wordpiece (a token of the vocab).
_PUNCTUATION = {chr(c): 1 for c in range(0x21, 0x7F) if not chr(c).isalnum()}
_MAX_PIECE = 18  # longest token of the vocab, "##" included (checked in _ascii_count's test)
_MAX_WORD_CHARS = 100  # WordPiece's max_input_chars_per_word: a longer piece is one [UNK]


def _ascii_count(word: str, vocab: dict[str, int]) -> int:
    """Wordpieces of one word of printable ASCII (no whitespace): WordPiece's greedy longest
    match, the count the library gives (a piece that cannot be matched is one [UNK])."""
    low = word.lower()
    total = 0
    for piece in (low,) if low.isalnum() else _ASCII_PIECES.findall(low):
        if piece in vocab or len(piece) > _MAX_WORD_CHARS:  # one token, or one [UNK]
            total += 1
            continue
        n, start, size = 0, 0, len(piece)
        while start < size:
            end = min(size, start + (_MAX_PIECE if start == 0 else _MAX_PIECE - 2))
            sub = piece[start:end] if start == 0 else "##" + piece[start:end]
            while sub not in vocab:
                end -= 1
                if end == start:
                    n = 1  # no match: the whole piece is [UNK]
                    start = size
                    break
                sub = piece[start:end] if start == 0 else "##" + piece[start:end]
            else:
                n += 1
                start = end
        total += n
    return total


def _read_vocab(path: Path | None) -> dict[str, int]:
    if path is None:
        text = resources.files("recalld").joinpath("data", "vocab.txt").read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    # One token a line, the id is the line number (as BertTokenizer reads it).
    return {token: i for i, token in enumerate(text.splitlines())}


def _build(vocab: dict[str, int]) -> _HFTokenizer:
    tok = _HFTokenizer(models.WordPiece(vocab, unk_token=_UNK, max_input_chars_per_word=100))
    # strip_accents=None follows lowercase, as BertTokenizer(do_lower_case=True) does.
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{_CLS} $A {_SEP}",
        pair=f"{_CLS} $A {_SEP} $B:1 {_SEP}:1",
        special_tokens=[(_CLS, vocab[_CLS]), (_SEP, vocab[_SEP])],
    )
    return tok


class Tokenizer:
    """all-MiniLM-L6-v2's tokenizer: counts wordpieces and encodes model input.

    Safe to share between threads: the underlying tokenizers are configured once in
    ``__init__`` and never mutated afterwards (truncation settings are per instance in the
    Rust library, so changing them while another thread encodes would race); the word counts
    of :meth:`count` are a plain dict.
    """

    def __init__(self, vocab: dict[str, int]) -> None:
        self._vocab = vocab
        self.pad_id = vocab[_PAD]
        self.cls_id = vocab[_CLS]
        self.sep_id = vocab[_SEP]
        self.vocab_size = len(vocab)
        # For count(): no truncation, no padding.
        self._plain = _build(vocab)
        # Word -> wordpieces, for count(). Plain dict operations, atomic under the GIL: two
        # threads counting at once at worst both count a word.
        self._memo: dict[str, int] = {"": 0}
        # Piece of plain ASCII text (a run of letters and digits, or one punctuation char) ->
        # wordpieces, for count(); the same rules as _memo.
        self._pieces: dict[str, int] = dict(_PUNCTUATION)
        # For encode_ids(): one truncating instance per max_length, made on demand.
        self._truncating: dict[int, _HFTokenizer] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, vocab_path: str | Path | None = None) -> Tokenizer:
        """Build from ``vocab_path`` (default: the bundled ``recalld/data/vocab.txt``)."""
        return cls(_read_vocab(Path(vocab_path) if vocab_path is not None else None))

    def count(self, text: str) -> int:
        """Wordpieces in ``text``, without [CLS]/[SEP] and without truncation.

        The sum of its words' counts (see :func:`adds_up`): words cut at spaces, tabs and line
        breaks, each counted once and remembered (:data:`MEMO_WORDS` of them at most); plain
        ASCII text is cut further, into the pieces BERT's pre-tokenizer makes, which repeat more
        than words do. A corpus repeats its words, so the chunker, which counts every line, asks
        the library about few of them; counting is linear in the text either way.
        """
        if text.isascii() and _NOT_PLAIN.search(text) is None:  # most text: by pieces
            pieces = _TEXT_PIECES.findall(text.lower())
            try:
                return sum(map(self._pieces.__getitem__, pieces))
            except KeyError:
                return self._count_pieces(pieces)
        if text.isascii() and _ODD_SPACES.search(text) is None:
            words = text.split()
        else:
            words = _SPACES.split(text)
        try:  # most lines hold only words counted before: one pass in C
            return sum(map(self._memo.__getitem__, words))
        except KeyError:
            pass
        memo = self._memo
        fresh = self._count_new(set(words).difference(memo))
        try:  # the new words' counts, the others' from the memo (sums in C)
            total = sum(map(fresh.get, words, repeat(0)))
            total += sum(map(memo.__getitem__, [w for w in words if w not in fresh]))
        except KeyError:  # another thread started the memo over meanwhile
            total = 0
            for word in words:
                n = fresh.get(word)
                if n is None:
                    n = memo.get(word)
                if n is None:
                    n = fresh[word] = self._count_new({word})[word]
                total += n
        if len(memo) + len(fresh) > MEMO_WORDS:
            memo.clear()  # start over: a word that comes back is counted again
            memo[""] = 0
        memo.update((w, n) for w, n in fresh.items() if len(w) <= _MEMO_WORD_CHARS)
        return total

    def _count_pieces(self, pieces: list[str]) -> int:
        """The count of a plain ASCII text's pieces, some not remembered yet (each counted by
        WordPiece's greedy match: a piece is lowercase letters and digits, or one char)."""
        memo, vocab = self._pieces, self._vocab
        total = 0
        for piece in pieces:
            n = memo.get(piece)
            if n is None:
                n = _ascii_count(piece, vocab)
                if len(memo) >= MEMO_WORDS:
                    memo.clear()  # start over: a piece that comes back is counted again
                    memo.update(_PUNCTUATION)
                if len(piece) <= _MEMO_WORD_CHARS:
                    memo[piece] = n
            total += n
        return total

    def _count_new(self, words: set[str]) -> dict[str, int]:
        """The counts of words not remembered yet.

        A word of printable ASCII is counted here (lowercase, cut at punctuation, WordPiece's
        greedy longest match in the vocab: what the library does to it, at a fraction of the
        cost of a library call); any other word goes to the library, in batches.
        """
        got: dict[str, int] = {}
        rest: list[str] = []
        for word in words:
            n = _ascii_count(word, self._vocab) if word.isascii() and word.isprintable() else None
            if n is None:
                rest.append(word)
            else:
                got[word] = n
        if len(rest) < _FEW_WORDS:  # one by one: a batch call's threads cost ~1 ms when busy
            got.update((w, len(self._plain.encode(w, add_special_tokens=False))) for w in rest)
            return got
        for at in range(0, len(rest), _FRESH_PER_CALL):
            part = rest[at : at + _FRESH_PER_CALL]
            encs = self._plain.encode_batch_fast(part, add_special_tokens=False)
            got.update(zip(part, (len(e) for e in encs), strict=True))
        return got

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """:meth:`count` for many texts at once (parallel in the Rust library)."""
        encs = self._plain.encode_batch_fast(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encs]

    def tokens(self, text: str) -> list[str]:
        """The wordpieces of ``text`` (no specials), for debugging and tests."""
        return list(self._plain.encode(text, add_special_tokens=False).tokens)

    def encode_ids(self, texts: Sequence[str], max_length: int = MAX_LENGTH) -> list[list[int]]:
        """Token ids with [CLS]/[SEP], each list truncated to ``max_length``; not padded."""
        if max_length < 2:
            raise ValueError("max_length must leave room for [CLS] and [SEP]")
        encs = self._truncating_for(max_length).encode_batch_fast(list(texts))
        return [e.ids for e in encs]

    def encode_batch(
        self, texts: Sequence[str], max_length: int = MAX_LENGTH
    ) -> tuple[IntArray, IntArray, IntArray]:
        """``(input_ids, attention_mask, token_type_ids)``, int64, padded to the longest."""
        return pad_batch(self.encode_ids(texts, max_length), self.pad_id)

    def _truncating_for(self, max_length: int) -> _HFTokenizer:
        tok = self._truncating.get(max_length)
        if tok is None:
            with self._lock:
                tok = self._truncating.get(max_length)
                if tok is None:
                    tok = _build(self._vocab)
                    # The post-processor's two specials are counted inside max_length.
                    tok.enable_truncation(max_length=max_length)
                    self._truncating[max_length] = tok
        return tok


def pad_batch(ids: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[IntArray, IntArray, IntArray]:
    """Right-pad id lists into ``(input_ids, attention_mask, token_type_ids)`` int64 arrays."""
    width = max((len(row) for row in ids), default=0)
    input_ids = np.full((len(ids), width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(ids), width), dtype=np.int64)
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = row
        attention_mask[i, : len(row)] = 1
    # Single-segment input: every token is segment 0.
    token_type_ids = np.zeros((len(ids), width), dtype=np.int64)
    return input_ids, attention_mask, token_type_ids


def adds_up(count: Callable[[str], int]) -> bool:
    """Whether ``count`` is a :meth:`Tokenizer.count`, whose counts add up over whitespace: the
    BERT pre-tokenizer splits at every space and newline before WordPiece sees a word, so lines
    joined by newlines (or whole words) count what their counts add up to. The chunker then
    need not count a chunk again (``chunk_markdown(additive=True)``)."""
    return isinstance(getattr(count, "__self__", None), Tokenizer) and (
        getattr(count, "__func__", None) is Tokenizer.count
    )


@lru_cache(maxsize=1)
def default_tokenizer() -> Tokenizer:
    """The process-wide tokenizer built from the bundled vocab (loaded once)."""
    return Tokenizer.load()
