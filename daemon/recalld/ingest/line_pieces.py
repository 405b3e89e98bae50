"""Pieces of over-long lines for the Markdown chunker (a minified file, a note without breaks).

A line over the token cap is cut into pieces that each fit: groups of words, content-defined
segments of a word over the cap, runs of chars as a last resort. Work is linear in the line:
no tokenizer pass over the whole line, one call per distinct word (memoised), and words are
grouped so that a multi-megabyte line makes a few atoms per chunk instead of one per word.
"""

from __future__ import annotations

import itertools
import re
import weakref
import zlib
from collections.abc import Callable, Iterable

__all__ = ["WORD", "LinePieces", "char_runs", "more_words_than", "segment_cuts"]

Counter = Callable[[str], int]

WORD = re.compile(r"\S+\s*")
_CUT_CHAR = re.compile(r"[\W_]")
_SEGMENT = 48  # longest segment of an over-long word, in chars
# Words of an over-long line are grouped into atoms: a group ends after about 1 word in
# _GROUP_WORDS (by content) and holds at most limit / _GROUP_DIV tokens.
_GROUP_WORDS, _GROUP_DIV = 8, 8
_MEMO_WORDS = 200_000  # distinct words whose counts a chunker remembers


def more_words_than(line: str, n: int) -> bool:
    """Whether ``line`` has more than ``n`` whitespace-separated words (stops early).

    ``WORD``'s matches are the runs of non-space chars (its ``\\s`` and str.split() agree on
    what a space is), so this is str.split()'s count, without a match object per word."""
    return n >= 0 and len(line.split(None, n)) > n


def char_runs(s: str, start: int, end: int, fits: Callable[[str], bool]) -> list[tuple[int, int]]:
    """Cut ``s[start:end]`` into consecutive runs that each fit, each as long as possible.

    Only for pieces that are short already (a word segment, a chunk that a non-additive counter
    rejected), so a plain binary search is fine. A char that does not fit alone is dropped.
    """
    runs: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        if fits(s[pos:end]):
            runs.append((pos, end))
            break
        lo, hi = pos, end  # s[pos:lo] fits (or is empty), s[pos:hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(s[pos:mid]):
                lo = mid
            else:
                hi = mid
        if lo > pos:
            runs.append((pos, lo))
        pos = max(lo, pos + 1)
    return runs


def segment_cuts(s: str, start: int, end: int) -> list[int]:
    """Content-defined cut offsets inside the over-long word ``s[start:end]`` (minified code,
    base64, a long URL): after a non-alphanumeric char whose 3-char window hashes to 0 mod 4,
    and every ``_SEGMENT`` chars where no such cut comes. Counting segments costs one pass
    over the word, where searching for the longest prefix that fits costs several.
    """
    cuts: list[int] = []
    last = start
    for m in _CUT_CHAR.finditer(s, start, end):
        i = m.end()
        while i - last > _SEGMENT:
            last += _SEGMENT
            cuts.append(last)
        window = s[max(start, i - 3) : i].encode("utf-8", "surrogatepass")
        if i > last and i < end and zlib.crc32(window) & 3 == 0:
            cuts.append(i)
            last = i
    while end - last > _SEGMENT:
        last += _SEGMENT
        cuts.append(last)
    return cuts


# Word -> (tokens, ends a group) of each bound counter (a tokenizer's count), shared by the
# chunking runs of a process: notes repeat the words of their long lines (a word's count and
# hash do not depend on the note), so a run need not count them again.
_SHARED: weakref.WeakKeyDictionary[object, dict[object, dict[str, tuple[int, bool]]]] = (
    weakref.WeakKeyDictionary()
)


def _memo_of(count: Counter) -> dict[str, tuple[int, bool]]:
    """The words remembered for ``count``: shared when it is a bound method, else a new dict."""
    owner, func = getattr(count, "__self__", None), getattr(count, "__func__", None)
    if owner is None or func is None:
        return {}
    try:
        return _SHARED.setdefault(owner, {}).setdefault(func, {})
    except TypeError:  # an owner that takes no weak reference
        return {}


class LinePieces:
    """Cuts over-long lines for one chunking run (remembers its word counts)."""

    def __init__(self, count: Counter, cap: int, limit: int) -> None:
        self.count = count
        self.cap = cap
        self.limit = limit
        self._words = _memo_of(count)  # word -> (tokens, ends a group)

    def fits(self, s: str) -> bool:
        return self.count(s) <= self.cap

    def line_tokens(self, line: str) -> int:
        """Tokens of a line, or just ``cap + 1`` for a line of more than ``cap`` words.

        Every word is at least one token, so such a line is over the cap whatever its exact
        count; it is cut into pieces that are counted one by one anyway. Not counting it whole
        saves a pass of the tokenizer over a multi-megabyte line.
        """
        if len(line) > 2 * self.cap and more_words_than(line, self.cap):
            return self.cap + 1
        return self.count(line)

    def word(self, word: str) -> tuple[int, bool]:
        """Token count of a word and whether a group of words ends after it (memoised: a long
        line repeats its words, and each tokenizer call has a fixed cost)."""
        known = self._words.get(word)
        if known is None:
            crc = zlib.crc32(word.rstrip().encode("utf-8", "surrogatepass"))
            known = (self.count(word), crc % _GROUP_WORDS == 0)
            if len(self._words) >= _MEMO_WORDS:
                self._words.clear()  # start over: a word that comes back is counted again
            self._words[word] = known
        return known

    def split(self, line: str, total: int) -> list[tuple[int, int, int]]:
        """Pieces of an over-long line with their counts: groups of words, or segments of
        long words.

        Words are grouped by content (a group ends after a word whose hash is 0 mod
        ``_GROUP_WORDS``, or before it would pass ``limit / _GROUP_DIV`` tokens), so a
        multi-megabyte line makes a few atoms per chunk rather than one per word, and an edit
        still moves only the groups around it.
        """
        pieces: list[tuple[int, int, int]] = []
        words = WORD.finditer(line)
        first = next(words, None)
        if first is None:
            return pieces
        if first.end() == len(line):  # a single word: its count is the line's
            spans: Iterable[tuple[int, int]] = [(0, len(line))]
        else:
            # Leading indentation rides with the first word.
            spans = itertools.chain([(0, first.end())], (m.span() for m in words))
        group_cap = max(1, min(self.cap, self.limit // _GROUP_DIV))
        g0 = g1 = gtok = 0
        size, known = len(line), self._words.get  # a remembered word without a method call
        for a, b in spans:
            if b - a == size:
                t, ends = total, True
            else:
                w = line[a:b]
                t, ends = known(w) or self.word(w)
            if t > self.cap:
                if g1 > g0:
                    pieces.append((g0, g1, gtok))
                pieces.extend(self.word_segments(line, a, b))
                g0 = g1 = b
                gtok = 0
                continue
            if g1 > g0 and gtok + t > group_cap:
                pieces.append((g0, g1, gtok))
                g0, gtok = a, 0
            g1, gtok = b, gtok + t
            if ends:
                pieces.append((g0, g1, gtok))
                g0, gtok = b, 0
        if g1 > g0:
            pieces.append((g0, g1, gtok))
        return pieces

    def word_segments(self, line: str, a: int, b: int) -> list[tuple[int, int, int]]:
        """Pieces of one word over the cap: content-defined segments, chars as a last resort."""
        pieces: list[tuple[int, int, int]] = []
        for s0, s1 in itertools.pairwise([a, *segment_cuts(line, a, b), b]):
            t = self.count(line[s0:s1])
            if t <= self.cap:
                pieces.append((s0, s1, t))
            else:  # only with a tiny cap: a segment is at most _SEGMENT chars
                for c0, c1 in char_runs(line, s0, s1, self.fits):
                    pieces.append((c0, c1, self.count(line[c0:c1])))
        return pieces
