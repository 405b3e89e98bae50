"""A search request, validated, and what a search needs besides it (its context).

Kept apart from :mod:`recalld.retrieval.search` so that the pipeline's stages (channels,
results, path queries) can name these types without importing the pipeline that calls them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from recalld.config import Config
from recalld.embedding.base import Embedder
from recalld.errors import BadRequest
from recalld.index.chunk_facts import FactFilter
from recalld.index.store import Store
from recalld.index.vector_index import VectorIndex
from recalld.ingest import session_ids
from recalld.retrieval.answer_budget import MIN_BUDGET_TOKENS
from recalld.retrieval.filters import parse_filters
from recalld.retrieval.keyword_postings import PostingsCache
from recalld.retrieval.keyword_scoring import Beside
from recalld.retrieval.term_stats import TermCounts

MODES = ("hybrid", "keyword", "vector")
SOURCES = ("memory", "sessions")
KINDS = ("note", "message", "tool_call", "tool_output")
MAX_QUERY_BYTES = 100_000


@dataclass(frozen=True)
class SearchRequest:
    """A validated search request."""

    query: str
    max_results: int
    min_score: float
    sources: tuple[str, ...] | None
    path_prefix: str | None
    mode: str
    max_tokens: int = 0  # 0: no budget
    explain: bool = False
    kinds: tuple[str, ...] | None = None
    facts: FactFilter | None = None  # tags, since, until, project, session (filters.py)

    @property
    def filtered(self) -> bool:
        """Whether any filter narrows the chunks both channels may return."""
        return bool(self.sources or self.path_prefix or self.kinds or self.facts)


def parse_request(params: Mapping[str, Any], config: Config) -> SearchRequest:
    """Validate wire parameters (BadRequest with a clear message on anything wrong)."""
    query = _query(params, config)
    max_results = _int_param(
        params, "max_results", config.int("search.max_results"), lambda n: 1 <= n <= 1000,
        "an integer from 1 to 1000",
    )  # fmt: skip
    min_score = _min_score(params, config)
    sources = _choices(params, "sources", SOURCES)
    path_prefix = _path_prefix(params)
    kinds = _choices(params, "kinds", KINDS)
    mode = params.get("mode") or "hybrid"
    if mode not in MODES:
        raise BadRequest(f"mode must be one of {MODES}, got {mode!r}")
    max_tokens = _int_param(
        params, "max_tokens", config.int("search.max_tokens"),
        lambda n: n == 0 or MIN_BUDGET_TOKENS <= n <= 1_000_000,
        f"0 (no budget) or an integer from {MIN_BUDGET_TOKENS} to 1000000",
    )  # fmt: skip
    explain = params.get("explain", False)
    if not isinstance(explain, bool):
        raise BadRequest(f"explain must be true or false, got {explain!r}")
    return SearchRequest(
        query,
        max_results,
        min_score,
        sources,
        path_prefix or None,
        mode,
        max_tokens,
        explain,
        kinds,
        parse_filters(params, config),
    )


def _query(params: Mapping[str, Any], config: Config) -> str:
    """The query: a string within the byte cap, NULs blanked, cut to ``search.max_query_chars``."""
    query = params.get("query")
    if not isinstance(query, str):
        raise BadRequest("search needs a 'query' string")
    if len(query.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
        raise BadRequest(
            f"query is {len(query)} characters; the limit is {MAX_QUERY_BYTES} bytes: "
            "search for a shorter passage"
        )
    query = query.replace("\x00", " ").strip()
    if not query:
        raise BadRequest("the query is empty: give a few words or an identifier to search for")
    return query[: config.int("search.max_query_chars")]


def _min_score(params: Mapping[str, Any], config: Config) -> float:
    """The score floor: a number from 0 to 1 (default ``search.min_score``)."""
    min_score = params.get("min_score")
    if min_score is None:
        min_score = config.float("search.min_score")
    if (
        not isinstance(min_score, int | float)
        or isinstance(min_score, bool)
        or not (0.0 <= float(min_score) <= 1.0)
    ):
        raise BadRequest(f"min_score must be a number from 0 to 1, got {min_score!r}")
    return float(min_score)


def _path_prefix(params: Mapping[str, Any]) -> str | None:
    """The path prefix, if any: a string without NUL bytes."""
    path_prefix = params.get("path_prefix")
    if path_prefix is not None and not isinstance(path_prefix, str):
        raise BadRequest(f"path_prefix must be a string, got {path_prefix!r}")
    if path_prefix is not None and "\x00" in path_prefix:
        raise BadRequest("path_prefix contains a NUL byte")
    return path_prefix


def _choices(
    params: Mapping[str, Any], name: str, allowed: tuple[str, ...]
) -> tuple[str, ...] | None:
    """A filter parameter: one value or a list of ``allowed`` ones (None or empty: no filter)."""
    value = params.get(name)
    if isinstance(value, str):
        value = [value]
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(v in allowed for v in value):
        raise BadRequest(f"{name} must be a list of {allowed}, got {value!r}")
    return tuple(dict.fromkeys(value)) or None


def _int_param(
    params: Mapping[str, Any], name: str, default: int, ok: Callable[[int], bool], expect: str
) -> int:
    """An integer parameter (``default`` when absent); BadRequest naming what was expected."""
    value = params.get(name)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
        raise BadRequest(f"{name} must be {expect}, got {value!r}")
    return value


@dataclass
class SearchContext:
    """What a search needs besides the request."""

    store: Store
    config: Config
    embedder: Embedder | None
    vectors: VectorIndex | None
    degraded: str | None  # why vector search is off, if it is
    executor: Executor | None = None
    reranker: Any = None  # recalld.retrieval.rerank.Reranker, optional
    index_info: Callable[[], dict[str, Any]] | None = None
    counts: TermCounts | None = None  # term frequencies, shared by an engine's searches
    postings: PostingsCache | None = None  # held postings (the writer's engine only)
    beside: Beside | None = None  # another connection's read on another thread, when free

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = TermCounts(self.store.conn)  # counted every time: no cache

    @property
    def terms(self) -> TermCounts:
        """The term counts of this search (``recalld.retrieval.term_stats``)."""
        assert self.counts is not None
        return self.counts


def absolute_prefix(request: SearchRequest, roots: list[Path]) -> SearchRequest:
    """A relative ``path_prefix`` is taken relative to the first memory root."""
    prefix = request.path_prefix
    if prefix and not os.path.isabs(os.path.expanduser(prefix)) and roots:
        prefix = str(roots[0] / prefix) + (os.sep if prefix.endswith(("/", os.sep)) else "")
    elif prefix:
        prefix = os.path.expanduser(prefix)
    return replace(request, path_prefix=prefix)


def full_session(request: SearchRequest, conn: Any) -> SearchRequest:
    """A ``session`` filter given as the start of an id is taken as the one session it begins
    (:mod:`recalld.ingest.session_ids`; BadRequest when it begins several)."""
    facts = request.facts
    if facts is None or not facts.session:
        return request
    session = session_ids.resolve(conn, facts.session)
    if session == facts.session:
        return request
    return replace(request, facts=replace(facts, session=session))
