"""The retrieval stage: answers from the index, ``search`` and ``get``.

The hybrid search pipeline (safe FTS5 queries, the query's shape, both channels, fusion,
coordination, document evidence, pseudo-relevance feedback, recency, diversity, the optional
reranker in ``rerank``, the token budget of an answer) and ``get``'s line ranges of indexed
files, refused outside what recalld indexes.
"""
