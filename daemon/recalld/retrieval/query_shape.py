"""What kind of query this is, and what that means for fusion (``search.query_shape``).

The rule, in full (docs/DECISIONS.md has the measurements behind the numbers):

- A word is an *identifier* when it looks like code, not prose: it has ``_`` inside
  (``snake_case``), a lower-to-upper case change (``useState``), letters and digits together
  (``E1234``, ``sha512sum``), a ``.``, ``/``, ``\\``, ``::`` or ``->`` between letters
  (``src/app.py``, ``foo.bar()``), is a flag, variable or reference (``--dns``, ``$HOME``,
  ``#4521``), or is an acronym of three or more capitals (``HTTP``). A quoted phrase counts as one
  identifier: the user wants those exact words.
- The query is an *identifier* query when at least half of its content words (stopwords aside)
  are identifiers. Otherwise it is a *question* when it reads as one (a question mark, or a
  question word first), a *statement* when it is prose with four content words or more that are
  not identifiers (a claim, a description of the passage wanted), and *mixed* when it is neither
  (a few keywords).
- Each kind has its own vector weight (``search.identifier_vector_weight``,
  ``search.question_vector_weight``, ``search.statement_vector_weight``; mixed keeps
  ``search.vector_weight``), keyword weight being the rest. Questions and statements differ
  because a statement reads like the passage it looks for (what a sentence embedding compares
  well), while an answer rarely paraphrases its question (where the names and rare words that
  BM25 matches carry more). Identifier literals found verbatim in a chunk raise its score
  (``search.literal_boost``), and so does a file whose name or title is the query itself
  (``search.name_boost``): someone who types a note's name wants that note.
- A *long prose* query (:func:`is_long_prose`) is a question or statement with no literal and at
  least ``search.long_query_words`` (9) prose words. It describes the passage wanted, as a
  statement does, so it takes ``search.long_query_vector_weight`` (0.5) in place of its kind's:
  a long question is weighed like a statement, a short one keeps 0.2
  (``search.long_query_blend``, the RRF blend for these queries, is off; docs/DECISIONS.md,
  "Fusion by query shape").
- A query *names* something (a person, place or product, which BM25 matches exactly) when a word
  inside a sentence is typed with a capital (:func:`names_one`), or, however it is typed, when
  the index writes one of its terms capitalised inside sentences (:func:`index_names`, read from
  the keyword channel's best hits): ``when did caroline go ...`` names Caroline as much as
  ``When did Caroline go ...`` does.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from recalld.retrieval.fts_query import STOPWORDS

__all__ = [
    "QueryShape",
    "analyze",
    "boosted",
    "index_names",
    "is_long_prose",
    "literal_share",
    "normalise_name",
]

_QUOTED = re.compile(r'"([^"]{2,200})"|“([^”]{2,200})”')
_STRIP = "\"'`,;:!?()[]{}<>“”‘’"
_IDENT_PATTERNS = (
    re.compile(r"[^\W_]_+[^\W_]"),  # snake_case, ERR_CONN_RESET
    re.compile(r"[a-z][A-Z]"),  # useState, GetHelpCmd
    re.compile(r"(?=.*[A-Za-z])(?=.*\d)^[\w.-]+$"),  # E1234, sha512sum, v1.2.3, 2to3
    re.compile(r"\w(?:\.|/|\\|::|->)\w"),  # src/app.py, foo.bar, a::b
    re.compile(r"^(?:--?[A-Za-z]|\$[A-Za-z_{]|#\d|@\w)"),  # --dns, $HOME, #4521, @user
    re.compile(r"^[A-Z]{3,}s?$"),  # HTTP, APIs
    re.compile(r"\w\(\)?$"),  # call()
)
_QUESTION_WORDS = frozenset(
    [
        "who",
        "whom",
        "whose",
        "what",
        "which",
        "when",
        "where",
        "why",
        "how",
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "will",
        "has",
        "have",
        "had",
    ]
)
_NAME_SEP = re.compile(r"[\W_]+")
_TERM = re.compile(r"[^\W_]+")
#: Mentions of a term read at most (a name's or a word's casing shows in a sample; a common word
#: in a chat of one person's turns is everywhere).
_MENTIONS = 24
# What may stand between a sentence's end (or a line's start) and its first word: spaces,
# Markdown marks and opening quotes ("**Nate**: Hey" starts a sentence at "Hey").
_LEAD = " \t*_>\"'(\u201c\u2018[-"


@dataclass(frozen=True)
class QueryShape:
    """The kind of a query and the literals it asks for."""

    kind: str  # "identifier" | "question" | "statement" | "mixed"
    literals: tuple[str, ...]  # identifiers and quoted phrases as typed (for the literal boost)
    name: str  # the query as a file name or title would read (normalise_name)
    prose: int = 0  # content words that are not identifiers
    named: bool = False  # a capitalised word inside a sentence (a person, place or product)
    terms: tuple[str, ...] = ()  # content words after the first, folded (for index_names)


def is_identifier(word: str) -> bool:
    """Whether one whitespace-separated word looks like code rather than prose."""
    core = word.strip(_STRIP)
    if word.endswith("()"):
        return bool(core)
    if len(core) < 2:
        return False
    return any(p.search(core) for p in _IDENT_PATTERNS)


def normalise_name(text: str) -> str:
    """``Fossil-Commit``, ``fossil_commit`` and ``fossil commit`` all read ``fossil commit``."""
    folded = _NAME_SEP.sub(" ", text.casefold()).strip()
    return folded or text.casefold().strip()


def analyze(query: str) -> QueryShape:
    """Classify ``query`` by the rule in this module's docstring."""
    literals: list[str] = []
    for m in _QUOTED.finditer(query):
        literals.append((m.group(1) or m.group(2)).strip())
    rest = _QUOTED.sub(" ", query)
    words = rest.split()
    content = [w for w in words if w.strip(_STRIP).casefold() not in STOPWORDS]
    idents = [w.strip(_STRIP) for w in words if is_identifier(w)]
    literals.extend(i for i in idents if i)
    n_ident = len(literals)
    n_content = len(content) + len(literals) - len(idents)
    prose = len(content) - len(idents)  # content words that are not identifiers
    if n_ident and n_ident * 2 >= max(n_content, 1):
        kind = "identifier"
    elif query.rstrip().endswith("?") or (
        bool(words) and words[0].casefold().strip(_STRIP) in _QUESTION_WORDS
    ):
        kind = "question"
    elif prose >= 4:
        kind = "statement"
    else:
        kind = "mixed"
    name = normalise_name(query)
    terms = _terms(words[1:])
    named = names_one(words)
    return QueryShape(kind, tuple(dict.fromkeys(literals)), name, max(prose, 0), named, terms)


def _terms(words: list[str]) -> tuple[str, ...]:
    """The folded word pieces of ``words`` that could be a name: not stopwords, three letters or
    more, not numbers (``caroline's`` gives ``caroline``)."""
    pieces = (t.lower() for w in words for t in _TERM.findall(w))
    return tuple(
        dict.fromkeys(t for t in pieces if len(t) > 2 and not t.isdigit() and t not in STOPWORDS)
    )


def names_one(words: list[str]) -> bool:
    """Whether a word inside a sentence (not its first, not "I") starts with a capital: a
    person, place or product named, which the keyword channel matches exactly."""
    for prev, word in itertools.pairwise(words):
        core = word.strip(_STRIP)
        if core and core != "I" and core[0].isupper() and not prev.endswith((".", "?", "!")):
            return True
    return False


def index_names(terms: tuple[str, ...], texts: Iterable[str], min_mentions: int = 2) -> bool:
    """Whether the documents write a term of the query as a name: of its mentions inside a
    sentence in ``texts`` (at least ``min_mentions``; the first ``_MENTIONS`` decide), more
    than half start with a capital.

    Mentions that start a sentence, a line or a heading (Title Case) say nothing either way.
    """
    inside: Counter[str] = Counter()
    capital: Counter[str] = Counter()
    looked: Counter[str] = Counter()
    for text in texts:
        low = text.lower()
        if len(low) != len(text):
            continue  # a letter that lower-cases to two: positions would not line up
        for term in terms:
            # str.find, not one regex over the text: this runs on every question (~4x faster).
            at = low.find(term)
            while at >= 0 and looked[term] < _MENTIONS:
                end = at + len(term)
                if _whole_word(low, at, end):
                    looked[term] += 1
                    if not _starts_sentence(text, at):
                        inside[term] += 1
                        capital[term] += text[at].isupper()
                at = low.find(term, end)
    return any(n >= min_mentions and capital[t] * 2 > n for t, n in inside.items())


def _whole_word(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is not part of a longer word."""
    before = start == 0 or not text[start - 1].isalnum()
    return before and (end == len(text) or not text[end].isalnum())


def _starts_sentence(text: str, at: int) -> bool:
    """Whether the word at ``at`` starts a sentence, a line or sits in a heading line."""
    line = text.rfind("\n", 0, at) + 1
    if text.startswith("#", line):
        return True
    at -= 1
    while at >= line and text[at] in _LEAD:
        at -= 1
    return at < line or text[at] in ".?!:"


def is_long_prose(shape: QueryShape | None, min_words: int) -> bool:
    """Whether ``shape`` is a question or statement of ``min_words`` prose words or more with no
    identifier or quoted phrase (``min_words`` <= 0: never)."""
    if shape is None or min_words <= 0 or shape.literals:
        return False
    return shape.kind in ("question", "statement") and shape.prose >= min_words


def literal_share(literals: tuple[str, ...], text: str) -> float:
    """Share of ``literals`` that occur verbatim (case-insensitively) in ``text``."""
    if not literals:
        return 0.0
    folded = text.casefold()
    return sum(1 for lit in literals if lit.casefold() in folded) / len(literals)


def boosted(score: float, boost: float) -> float:
    """Raise a [0, 1] score toward 1 by ``boost`` of the remaining distance (stays in [0, 1])."""
    return score + max(min(boost, 1.0), 0.0) * (1.0 - score)
