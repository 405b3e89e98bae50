"""Pseudo-relevance feedback for the keyword channel on prose queries (``search.prf``).

A question rarely uses the words of its answer ("What does Melanie do to destress?" vs "running
clears my head"), and a claim paraphrases its abstract. The keyword channel's first hits are
mostly on topic, so their distinctive words are likely words of the answer too. The rule:

1. take the texts of the first ``DOCS`` keyword hits;
2. candidate words: tokens of at least three letters, not stopwords, numbers or query words,
   found in at least two of those texts (in the only one when there is one);
3. weigh each by (texts holding it) x idf over the whole index, drop words that half the index
   holds, keep the best ``TERMS``;
4. search again with the query's terms OR these words, and mix the two keyword scores:
   ``(first + weight * second) / (1 + weight)``, each rescaled so its best hit scores 1.

Only prose queries (questions and statements) are expanded: an identifier or a few keywords
say exactly what they want.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

from recalld.retrieval.fts_query import STOPWORDS
from recalld.retrieval.fusion import bm25_scores
from recalld.retrieval.term_stats import TermCounts

__all__ = ["DOCS", "TERMS", "expansion_terms", "feedback"]

DOCS = 3
TERMS = 5
_WORD = re.compile(r"[^\W\d_]{3,}")
Hits = list[tuple[int, float]]


def expansion_terms(counts: TermCounts, query: str, texts: Sequence[str]) -> list[str]:
    """The quoted feedback words of ``texts`` for ``query`` (rule steps 2 and 3)."""
    asked = {w.casefold() for w in re.findall(r"[^\W_]+", query)}
    held: Counter[str] = Counter()
    for text in texts:
        held.update({w.casefold() for w in _WORD.findall(text)})
    need = 2 if len(texts) >= 2 else 1
    pool = [(n, w) for w, n in held.items() if n >= need and w not in STOPWORDS and w not in asked]
    pool.sort(key=lambda p: (-p[0], p[1]))
    total = counts.total()
    scored: list[tuple[float, str]] = []
    for n, word in pool[: TERMS * 4]:
        quoted = f'"{word}"'
        df = counts.df(quoted)
        if not df or df * 2 > total:
            continue
        scored.append((n * math.log((total - df + 0.5) / (df + 0.5) + 1.0), quoted))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [q for _, q in scored[:TERMS]]


def feedback(
    counts: TermCounts,
    query: str,
    hits: Hits,
    text_of: Callable[[Sequence[int]], Sequence[str]],
    search: Callable[[Sequence[str]], Hits],
    weight: float,
) -> Hits:
    """``hits`` re-ranked with the feedback search mixed in (FTS5's convention: lower first).

    ``text_of`` gives the texts of chunk ids; ``search`` runs the keyword query with extra
    quoted terms ORed in. Unchanged when the weight is 0 or no word qualifies.
    """
    if weight <= 0 or not hits:
        return hits
    extra = expansion_terms(counts, query, text_of([cid for cid, _ in hits[:DOCS]]))
    if not extra:
        return hits
    again = search(extra)
    first, second = bm25_scores(hits), bm25_scores(again)
    mixed = {
        cid: (first.get(cid, 0.0) + weight * second.get(cid, 0.0)) / (1.0 + weight)
        for cid in set(first) | set(second)
    }
    ranked = sorted(mixed.items(), key=lambda p: (-p[1], p[0]))[: max(len(hits), len(again))]
    return [(cid, -score) for cid, score in ranked]
