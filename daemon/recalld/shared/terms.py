"""Keyword terms for the shared store, made by recalld's own tokenizer so both stores agree.

PostgreSQL's text search configurations split and stem words their own way (``snake_case`` or
``E-1234`` would not be the terms FTS5 indexed). So recalld makes the terms itself: the casefolded
words of the text (as FTS5's unicode61 splits them) plus the identifier parts and compounds of
:func:`recalld.index.ident_tokens.ident_text`, stored as a ``tsvector`` with the ``simple``
configuration, which keeps each term as it is.
"""

from __future__ import annotations

import re

from recalld.index.ident_tokens import ident_text
from recalld.retrieval.fts_query import STOPWORDS

_WORD = re.compile(r"[^\W_]+")
#: A chunk's terms are capped: a tsvector holds at most 1 MB, and long tool output adds little.
MAX_TERMS_CHARS = 200_000
#: A query with more terms than this keeps its first ones.
MAX_QUERY_TERMS = 32


def terms_text(text: str) -> str:
    """The space-separated terms of a chunk (its words, then its identifier tokens)."""
    words = [w.casefold() for w in _WORD.findall(text)]
    return (" ".join(words) + " " + ident_text(text))[:MAX_TERMS_CHARS]


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in order: only letters and digits, so safe in a tsquery.

    Stopwords are left out (unless the query has nothing else): an OR of "the" and "we"
    matches half of any store, and ranking those rows is most of a search's cost there.
    """
    seen: dict[str, None] = {}
    for term in terms_text(query).split():
        if _WORD.fullmatch(term):
            seen.setdefault(term, None)
    content = [t for t in seen if t not in STOPWORDS]
    return (content or list(seen))[:MAX_QUERY_TERMS]
