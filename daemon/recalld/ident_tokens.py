"""Extra keyword tokens for identifiers and CJK text (the FTS5 ``ident`` column).

The main FTS5 columns use ``unicode61``, which keeps ``useState`` and ``ERRConnReset`` as one token
each and reads a run of Chinese or Japanese characters without spaces as a single token. So a
query for ``use_state``, ``ConnReset`` or one word inside a Japanese sentence would find nothing.
Each chunk therefore gets a third column of derived tokens, computed here at index time:

- the parts of every mixed-case or letter/digit word (``useState`` -> ``use state``,
  ``sha512sum`` -> ``sha 512 sum``, ``HTTPServer`` -> ``http server``);
- the squashed form of every ``_``-joined compound (``ERR_CONN_RESET`` -> ``errconnreset``), so
  that ``ErrConnReset`` matches it as one token;
- overlapping character bigrams of every CJK run (``東京タワー`` -> ``東京 京タ タワ ワー``), the
  classic way to give CJK text a keyword index without a dictionary; a one-character run is
  kept as itself.

The query side (:mod:`recalld.fts_query`) cuts query words the same way, so both meet in the
middle. Nothing here is FTS5 syntax: the output is plain space-separated words.
"""

from __future__ import annotations

import re

__all__ = ["cjk_bigrams", "ident_text", "is_cjk", "split_word"]

#: Longest derived text per chunk; a pathological chunk (minified code) cannot bloat the index.
MAX_IDENT_CHARS = 20_000

# unicode61's token characters (letters, digits; "_" separates) and a compound joined by "_".
_TOKEN = re.compile(r"[^\W_]+")
_UNDERSCORE_COMPOUND = re.compile(r"[^\W_]+(?:_+[^\W_]+)+")
# Boundaries inside one token: lower->Upper, UPPER->Upper+lower (HTTPServer), letter<->digit.
_CAMEL_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CJK = re.compile(
    "["
    "\u3040-\u309f"  # hiragana
    "\u30a0-\u30ff"  # katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0002fa1f"  # extensions B-F, compatibility supplement
    "]+"
)


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


def ident_text(text: str) -> str:
    """The derived tokens of a chunk's text (empty when it has none)."""
    out: list[str] = []
    size = 0
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if _CJK.search(tok):
            for run in _CJK.findall(tok):
                for gram in cjk_bigrams(run):
                    out.append(gram)
                    size += len(gram) + 1
        else:
            parts = split_word(tok)
            if len(parts) > 1:
                out.extend(parts)
                size += len(tok) + len(parts)
        if size > MAX_IDENT_CHARS:
            break
    for m in _UNDERSCORE_COMPOUND.finditer(text):
        if size > MAX_IDENT_CHARS:
            break
        squashed = m.group().replace("_", "").casefold()
        if not _CJK.search(squashed):
            out.append(squashed)
            size += len(squashed) + 1
    return " ".join(out)[:MAX_IDENT_CHARS]
