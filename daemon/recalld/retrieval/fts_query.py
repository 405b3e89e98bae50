"""Safe FTS5 MATCH expressions from user text.

The index tokenizes with ``porter unicode61 remove_diacritics 2``: letters, digits and private-use
characters are token characters, everything else separates, and tokens are case-folded. User
text is cut the same way here, but every term is emitted as a double-quoted FTS5 string, so
nothing the user types (``AND``, ``NEAR(``, ``*``, ``^``, ``col:``, quotes, parentheses) is ever
FTS5 syntax.

A whitespace-separated word with several tokens (``snake_case``, ``foo.bar()``, ``E-1234``,
``v1.2.3``, ``path/to/file.md``) becomes one quoted phrase of its tokens (``"snake case"``), which
matches the indexed token sequence. When non-ASCII characters sit between the tokens, the original
span is quoted instead and FTS5's own tokenizer splits it: unicode61 folds combining accents into
the letter before them and knows only Unicode 6.1, where Python's ``re`` knows a newer Unicode, so
only FTS5 can say for sure where such a word splits. ``camelCase`` stays one token, as in the
index (``useState`` matches ``usestate``).

Limitation: a character that Python calls a letter but Unicode 6.1 did not know (a recent script)
gives a term that FTS5 reads as an empty phrase. That never errors; it matches nothing, which in
``and`` mode empties the result.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from recalld.index.ident_tokens import cjk_bigrams, is_cjk, split_word

__all__ = ["MAX_TERMS", "STOPWORDS", "build_match", "match_terms", "or_terms", "query_terms"]

#: Most terms (words or phrases) in one MATCH expression.
MAX_TERMS = 64
#: Longest phrase; a longer compound (minified code, a long path) is cut into several phrases.
MAX_PHRASE_TOKENS = 8
#: Longer tokens are dropped: nobody types them, and they bloat the expression.
MAX_TOKEN_CHARS = 100
#: Upper bound on the length of the returned expression.
MAX_MATCH_CHARS = 8192
# The index's columns of real text (the third, ``ident``, holds derived tokens).
_TEXT_COLUMNS = "text context"

# Token characters of unicode61's default categories "L* N* Co": [^\W_] is Python's letters and
# digits, the ranges are the private-use planes.
_TOKEN = re.compile(r"(?:[^\W_]|[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd])+")
_WORD = re.compile(r"\S+")
# NUL ends the FTS5 string early ("unterminated string"); surrogates cannot be bound as UTF-8.
# Both, like all control characters, are separators to unicode61, so a space is equivalent.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")

_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
#: English stopwords (the OR query drops them; query_shape does not count them as content).
STOPWORDS = _STOPWORDS
# What an apostrophe joins to a word in English: ``James's``, ``don't``, ``we've``, ``I'm``.
_CLITICS = frozenset({"s", "t", "d", "m", "ll", "re", "ve"})
# Auxiliaries as they read before ``n't``: ``don't`` is "do not", stopwords both.
_NEGATED_TEXT = "ain aren couldn didn doesn don hadn hasn haven isn mightn mustn needn shan "
_NEGATED = frozenset((_NEGATED_TEXT + "shouldn wasn weren won wouldn").split())
# Apostrophes as typed: ASCII, the typographic right and left quotes, the modifier letter.
_APOSTROPHES = frozenset({"'", "\u2019", "\u2018", "\u02bc"})
# Hyphens as typed: ASCII, Unicode's hyphen and its non-breaking form.
_HYPHENS = frozenset({"-", "\u2010", "\u2011"})


@dataclass(frozen=True)
class _Term:
    source: str  # the query text spanning the term's tokens
    parts: tuple[str, ...]  # its tokens, case-folded
    joined: bool = False  # the tokens were joined by "_" and "." only (``git_show``, ``a.b``)
    elided: bool = False  # the tokens were joined by apostrophes only (``James's``, ``that's``)
    hyphened: bool = False  # the tokens were joined by hyphens only (``middle-aged``, ``HHV-8``)

    @property
    def stopword(self) -> bool:
        """A stopword, or one with its clitic (``that's``, ``I'm``, ``don't``; not ``Don's``)."""
        if len(self.parts) == 1:
            return self.parts[0] in _STOPWORDS
        if not self.elided:
            return False
        head, *rest = self.parts
        if rest == ["t"] and head in _NEGATED:
            return True  # ``don't``, ``won't``
        return head in _STOPWORDS and all(p in _CLITICS for p in rest)

    def quoted(self) -> str:
        return '"' + _UNSAFE.sub(" ", self.source).replace('"', '""') + '"'

    def expression(self, partial: bool) -> str:
        """The term's MATCH expression; with ``partial``, also its identifier/CJK variants.

        ``ConnReset`` and ``conn_reset`` become ``NEAR("conn"* "reset"*, 3)`` besides the exact
        phrase, which finds ``ERR_CONN_RESET`` and ``connection_reset()``; a CJK word becomes the
        phrase of its bigrams, which the ident column holds (see recalld.index.ident_tokens).
        """
        exact = self.quoted()
        if not partial or self.elided:
            # Prose joined by apostrophes is no identifier: ``NEAR("that"* "s", 3)`` only added
            # rows where the parts sit near each other (2,424 against the phrase's 2,055 at 100k
            # chunks) and cost the most of any term there (9 ms).
            return exact
        tokens = _TOKEN.findall(self.source)
        if self.hyphened and all(len(split_word(t)) == 1 for t in tokens):
            # Words joined by hyphens (``middle-aged``, ``list-unit-files``): the exact phrase
            # already finds them joined by anything and split in the ident column
            # (``ListUnitFiles``); the NEAR of prefixes added only scattered or longer words,
            # at the highest cost of the 1M tail (``"list"* "unit"* "files"*``: every token
            # starting so, read twice).
            return exact
        alts: list[str] = []
        cjk = [t for t in tokens if is_cjk(t)]
        if cjk:
            for tok in cjk:
                grams = cjk_bigrams(tok)
                phrase = '"' + " ".join(grams) + '"'
                alts.append(phrase + ("*" if len(grams) == 1 else ""))
        else:
            sub = [p for t in tokens for p in split_word(t)]
            if len(sub) >= 2:
                # The identifier as typed counts twice (BM25 sums the phrases that match): the
                # exact token sequence in the text beats its parts scattered or re-cased.
                alts.append(f"{{{_TEXT_COLUMNS}}} : {exact}")
                if self.joined:
                    # ``git_show``'s squashed form: in the ident column of ``git_show`` and
                    # ``Git_Show`` only, not of the prose "git show" that shares its tokens
                    # (the same for ``tool.call``).
                    alts.append('"' + "".join(self.parts) + '"')
                if all(len(p) < 3 for p in sub):
                    # Parts too short to be prefixes (``CD4``, ``P38``): their exact sequence
                    # (none when it is the exact phrase's own, ``a_b``). A NEAR of them matched
                    # ``p = 0.38`` and made FTS5's bm25 walk ``"p"``'s and ``"4"``'s doclists.
                    if sub != list(self.parts):
                        alts.append('"' + " ".join(sub) + '"')
                else:
                    near = " ".join(f'"{p}"' + ("*" if len(p) >= 3 else "") for p in sub)
                    alts.append(f"NEAR({near}, {len(sub) + 1})")
        if not alts:
            return exact
        return "(" + " OR ".join([exact, *alts]) + ")"


def _source(word: str, piece: list[re.Match[str]]) -> str:
    """The text to quote for tokens ``piece`` of ``word``: ``snake case`` for ``snake_case``.

    Tokens are re-joined by spaces when only ASCII separates them (where unicode61 and ``re``
    agree on what a separator is); otherwise the original span is kept for FTS5 to split.
    """
    gaps = (word[a.end() : b.start()] for a, b in itertools.pairwise(piece))
    if all(g.isascii() for g in gaps):
        return " ".join(m.group() for m in piece)
    return word[piece[0].start() : piece[-1].end()]


@functools.lru_cache(maxsize=256)
def _scan(query: str) -> tuple[_Term, ...]:
    """Distinct terms of ``query`` in order, up to MAX_TERMS that are not stopwords.

    Stopwords need no cap of their own: there are few distinct ones. Kept for the last queries:
    one search asks for its terms three times (the MATCH, coordination, the snippets).
    """
    terms: list[_Term] = []
    seen: set[tuple[str, ...]] = set()
    content = 0
    for wm in _WORD.finditer(query):
        word = wm.group()
        # Runs of consecutive usable tokens; an over-long token breaks a compound in two.
        groups: list[list[re.Match[str]]] = [[]]
        for tm in _TOKEN.finditer(word):
            if len(tm.group()) > MAX_TOKEN_CHARS:
                groups.append([])
            else:
                groups[-1].append(tm)
        for group in groups:
            for i in range(0, len(group), MAX_PHRASE_TOKENS):
                piece = group[i : i + MAX_PHRASE_TOKENS]
                parts = tuple(m.group().casefold() for m in piece)
                if parts in seen:
                    continue
                seen.add(parts)
                gaps = {word[a.end() : b.start()] for a, b in itertools.pairwise(piece)}
                joined = bool(gaps) and gaps <= {"_", "."}
                term = _Term(
                    _source(word, piece),
                    parts,
                    joined,
                    bool(gaps) and gaps <= _APOSTROPHES,
                    bool(gaps) and gaps <= _HYPHENS,
                )
                terms.append(term)
                content += not term.stopword
                if content >= MAX_TERMS:
                    return tuple(terms)
    return tuple(terms)


def _select(
    query: str,
    mode: str,
    partial: bool = False,
    common: Callable[[tuple[str, ...]], bool] | None = None,
) -> list[tuple[_Term, str]]:
    terms = list(_scan(query))
    if mode == "or":
        terms = [t for t in terms if not t.stopword] or terms
        if common is not None:  # too common to rank by (recalld.retrieval.common_terms)
            terms = [t for t in terms if not common(t.parts)] or terms
    # (AND keeps stopwords: the index has them, and dropping one would widen the query.)
    out: list[tuple[_Term, str]] = []
    size = 0
    for t in terms[:MAX_TERMS]:
        expr = t.expression(partial)
        size += len(expr) + 5  # 5 = len(" AND ")
        if size > MAX_MATCH_CHARS:
            break
        out.append((t, expr))
    return out


def build_match(
    query: str,
    *,
    mode: Literal["or", "and"] = "or",
    partial: bool = False,
    common: Callable[[tuple[str, ...]], bool] | None = None,
) -> str | None:
    """An FTS5 MATCH expression for ``query``, or None when it has no searchable term.

    ``mode="or"`` ranks any-term matches (BM25 does the rest) and drops English stopwords
    unless nothing else is left; ``mode="and"`` requires every term. ``partial`` adds each
    term's identifier-part and CJK-bigram variants (``search.partial_identifiers``).
    ``common`` tells a term too common to rank by, which ``"or"`` drops like a stopword.
    """
    if mode not in ("or", "and"):
        raise ValueError(f"mode must be 'or' or 'and', not {mode!r}")
    terms = _select(query, mode, partial, common)
    if not terms:
        return None
    return (" AND " if mode == "and" else " OR ").join(expr for _, expr in terms)


def match_terms(
    query: str,
    *,
    partial: bool = False,
    common: Callable[[tuple[str, ...]], bool] | None = None,
) -> list[str]:
    """The expressions that ``build_match(query, mode="or")`` ORs together, one per term."""
    return [expr for _, expr in _select(query, "or", partial, common)]


def or_terms(query: str) -> list[str]:
    """The quoted terms (no identifier variants) that ``build_match(query)`` ORs together."""
    return [t.quoted() for t, _ in _select(query, "or")]


def query_terms(query: str) -> list[str]:
    """The distinct case-folded tokens that ``build_match(query)`` searches, in query order.

    Meant for highlighting snippets: phrases are flattened into their tokens.
    """
    out: dict[str, None] = {}
    for t, _ in _select(query, "or"):
        for p in t.parts:
            out.setdefault(p)
    return list(out)
