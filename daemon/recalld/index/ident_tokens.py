"""Extra keyword tokens for identifiers and CJK text (the FTS5 ``ident`` column).

The main FTS5 columns use ``unicode61``, which keeps ``useState`` and ``ERRConnReset`` as one token
each and reads a run of Chinese or Japanese characters without spaces as a single token. So a
query for ``use_state``, ``ConnReset`` or one word inside a Japanese sentence would find nothing.
Each chunk therefore gets a third column of derived tokens, computed here at index time:

- the parts of every mixed-case or letter/digit word (``useState`` -> ``use state``,
  ``sha512sum`` -> ``sha 512 sum``, ``HTTPServer`` -> ``http server``);
- the squashed form of every ``_``-joined compound (``ERR_CONN_RESET`` -> ``errconnreset``), so
  that ``ErrConnReset`` matches it as one token, and of every ``.``-joined one
  (``SpotterWeb.Router`` -> ``spotterwebrouter``), so that ``tool.call`` can outrank the prose
  "tool call" that has the same tokens;
- overlapping character bigrams of every CJK run (``東京タワー`` -> ``東京 京タ タワ ワー``), the
  classic way to give CJK text a keyword index without a dictionary; a one-character run is
  kept as itself;
- the tokens of every word that holds JSON escapes or terminal colour codes, decoded and stripped
  (``lib\\/spotter_web\\/router.ex`` -> ``lib spotter web router ex``,
  ``\\x1b[31mfoo_bar`` -> ``foo bar``): tool output often is JSON or coloured terminal text,
  and unicode61 would read ``\\nadd_item`` as ``nadd item`` and ``\\x1b[31mfoo`` as ``31mfoo``.

The query side (:mod:`recalld.retrieval.fts_query`) cuts query words the same way, so both meet in
the middle. Nothing here is FTS5 syntax: the output is plain space-separated words. The work is
linear in the text (a megabyte-long minified or base64 line included) and the output bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["cjk_bigrams", "decode_escapes", "ident_text", "is_cjk", "split_word"]

#: Longest derived text per chunk; a pathological chunk (minified code) cannot bloat the index.
MAX_IDENT_CHARS = 20_000
#: Longer tokens are not split: nobody types a part of them (fts_query drops such query tokens).
MAX_SPLIT_CHARS = 100

# unicode61's token characters (letters, digits; "_" separates) and a compound joined by "_".
_TOKEN = re.compile(r"[^\W_]+")
_SEPARATORS = re.compile(r"[._]+")
# The separators of those compounds when a token follows (``[^\W_]`` is ``str.isalnum``).
_UNDERSCORE_LINK = re.compile(r"_++(?=[^\W_])")
_DOTTED_LINK = re.compile(r"[._]++(?=[^\W_])")
# A whitespace-separated word that holds a JSON escape or a terminal control sequence. It starts
# only where a word starts: tried at every position, a long word would cost quadratic time.
_DIRTY_WORD = re.compile(r"(?<!\S)[^\s\\\x1b]*+[\\\x1b]\S*+")
# CSI (colours, cursor) and OSC (titles, links) sequences; any other ESC and the byte after it.
_ANSI = re.compile(r"\x1b\[[0-?]*+[ -/]*+[@-~]|\x1b\][^\x07\x1b]*+(?:\x07|\x1b\\)?|\x1b.?")
# JSON's escapes; \b and \f are left alone, as they are far likelier a Windows path's "\bin".
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|([nrt])|([/\"\\]))")
# Boundaries inside one token: lower->Upper, UPPER->Upper+lower (HTTPServer), letter<->digit.
_CAMEL_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CJK_CHARS = (
    "\u3040-\u309f"  # hiragana
    "\u30a0-\u30ff"  # katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0002fa1f"  # extensions B-F, compatibility supplement
)
_CJK = re.compile(f"[{_CJK_CHARS}]+")
# The tokens that _derive can get anything from: those with a CJK char, and those with a case or
# letter/digit boundary that _CAMEL_PARTS cuts at (any ASCII token of more than one part has one
# of these four pairs). The others, most words of prose, are not looked at one by one.
_RICH_TOKEN = re.compile(
    r"(?<![^\W_])(?=[^\W_]*?"
    rf"(?:[{_CJK_CHARS}]|[a-z][A-Z]|[A-Z]{{2}}[a-z]|[A-Za-z][0-9]|[0-9][A-Za-z]))[^\W_]+"
)

# ASCII chars by class for _rich_tokens: a lower, A upper, 0 digit, space anything else (also
# "_", which ends a token). The byte pairs that a _RICH_TOKEN's lookahead looks for.
_ASCII_CLASSES = bytes(
    ord("a") if 97 <= c <= 122 else ord("A") if 65 <= c <= 90 else ord("0") if 48 <= c <= 57
    else 32
    for c in range(256)
)  # fmt: skip
_RICH_PAIRS = (b"aA", b"AAa", b"a0", b"A0", b"0a", b"0A")


def is_cjk(text: str) -> bool:
    """Whether ``text`` holds any CJK character."""
    return _CJK.search(text) is not None


def split_word(token: str) -> list[str]:
    """Case and letter/digit parts of one token, case-folded (``useState`` -> use, state).

    Returns ``[token]`` (folded) when there is nothing to split. Only ASCII tokens are split:
    case boundaries in other scripts (``Ärger``) are rare in identifiers and common in words.
    """
    if not token.isascii():
        return [token.casefold()]
    parts = [p.casefold() for p in _CAMEL_PARTS.findall(token)]
    if len(parts) <= 1 or "".join(parts) != token.casefold():
        return [token.casefold()]
    return parts


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping bigrams of a CJK run; a single character stays itself."""
    if len(run) <= 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _unescape(m: re.Match[str]) -> str:
    code, control, char = m.groups()
    if code:
        ch = chr(int(code, 16))
        return " " if 0xD800 <= ord(ch) <= 0xDFFF else ch  # half a surrogate pair: no text
    return " " if control else char


def decode_escapes(text: str) -> str:
    """``text`` with JSON escapes decoded and terminal control sequences removed.

    Twice, for JSON inside a JSON string (``\\\\n``); anything undecodable is left as it is.
    """
    for _ in range(2):
        if "\\" not in text:
            break
        text = _ESCAPE.sub(_unescape, text)
    return _ANSI.sub("", text)  # after decoding: JSON holds ESC as "\\u001b"


class _Budget:
    """Derived words up to MAX_IDENT_CHARS; ``full`` once the budget is spent."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.size = 0

    @property
    def full(self) -> bool:
        return self.size > MAX_IDENT_CHARS

    def add(self, words: list[str]) -> None:
        self.words.extend(words)
        self.size += sum(map(len, words)) + len(words)


def _noise(parts: list[str]) -> bool:
    """Whether a token's parts look like base64 or a hash, not a name (they spend the budget).

    Names have a few parts of a few letters (``getExecutorFromAssigns``); ``iVBORw0KGgo`` has
    many, and single characters among them.
    """
    return len(parts) > 8 or sum(len(p) == 1 for p in parts) >= 3


def _derive(text: str, out: _Budget) -> None:
    """Identifier parts and CJK bigrams of the tokens, then squashed ``_`` compounds."""
    for tok in _rich_tokens(text):
        if out.full:
            return
        if _CJK.search(tok):
            out.add([g for run in _CJK.findall(tok) for g in cjk_bigrams(run)])
        else:
            parts = split_word(tok) if len(tok) <= MAX_SPLIT_CHARS else []
            if len(parts) > 1 and not _noise(parts):
                out.add(parts)
    for link, dotted in ((_UNDERSCORE_LINK, False), (_DOTTED_LINK, True)):
        if "_" not in text and (not dotted or "." not in text):
            continue  # no separator at all (a C scan, faster than the link pattern's)
        for a, b in _compounds(text, link):
            if out.full:
                return
            if dotted and "." not in text[a:b]:
                continue  # a "_" compound: squashed above
            squashed = _SEPARATORS.sub("", text[a:b]).casefold()
            if not _CJK.search(squashed):
                out.add([squashed])


def _rich_tokens(text: str) -> Iterator[str]:
    """The tokens ``_RICH_TOKEN`` matches, in order. In ASCII text they are found from their
    pairs (``bytes.find`` over the text with each char replaced by its class) instead of trying
    the pattern at every token: most chunks are prose and hold none. Lazy: a spent budget
    stops it (a chunk may hold a megabyte-long word)."""
    if not text.isascii():
        yield from (m.group() for m in _RICH_TOKEN.finditer(text))
        return
    classes = text.encode("ascii").translate(_ASCII_CLASSES)
    ahead = [classes.find(pair) for pair in _RICH_PAIRS]  # the next place of each pair
    while True:
        at = min((a for a in ahead if a >= 0), default=-1)
        if at < 0:
            return
        start = classes.rfind(b" ", 0, at) + 1
        end = classes.find(b" ", at)
        end = len(text) if end < 0 else end
        yield text[start:end]
        ahead = [
            a if a < 0 or a >= end else classes.find(p, end)
            for a, p in zip(ahead, _RICH_PAIRS, strict=True)
        ]


def _compounds(text: str, link: re.Pattern[str]) -> Iterator[tuple[int, int]]:
    r"""Spans of the tokens joined by ``link`` separators, in order: what
    ``(?<![^\W_])[^\W_]++(?:SEP++[^\W_]++)++`` matches, found from the separators (rare chars
    the regex engine skips to) instead of trying that pattern at every token."""
    span: tuple[int, int] | None = None
    for m in link.finditer(text):
        at = m.start()
        if at == 0 or not text[at - 1].isalnum():
            continue  # no token before the separators
        after = _TOKEN.match(text, m.end())
        assert after is not None  # the link's lookahead saw a token char
        if span is not None and span[1] == at:  # joins the compound before
            span = (span[0], after.end())
            continue
        if span is not None:
            yield span
        start = at - 1
        while start > 0 and text[start - 1].isalnum():
            start -= 1
        span = (start, after.end())
    if span is not None:
        yield span


def ident_text(text: str) -> str:
    """The derived tokens of a chunk's text (empty when it has none)."""
    out = _Budget()
    _derive(text, out)
    if "\\" in text or "\x1b" in text:
        for m in _DIRTY_WORD.finditer(text):
            if out.full:
                break
            clean = decode_escapes(m.group()[: 2 * MAX_IDENT_CHARS])
            # The decoded word's own tokens in order, so that a phrase query meets them.
            out.add([t.casefold() for t in _TOKEN.findall(clean)])
            _derive(clean, out)
    return " ".join(out.words)[:MAX_IDENT_CHARS]
