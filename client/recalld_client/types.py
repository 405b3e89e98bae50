"""Typed shapes of the daemon's answers (TypedDicts: they are plain dicts on the wire).

``total=False`` marks shapes whose keys depend on the daemon's state; readers should use
``.get`` for those.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Source = Literal["memory", "sessions"]
Mode = Literal["hybrid", "keyword", "vector"]
Kind = Literal["note", "message", "tool_call", "tool_output"]


class Scores(TypedDict):
    """Per-channel scores of a result (None: that channel did not return the chunk)."""

    vector: float | None
    keyword: float | None


class Place(TypedDict):
    """Another place a collapsed duplicate passage was found."""

    path: str
    source: Source
    start_line: int
    end_line: int
    citation: str


class _SearchResultBase(TypedDict):
    """The fields every search result has."""

    path: str
    source: Source
    start_line: int
    end_line: int
    score: float
    snippet: str  # at most 700 characters
    citation: str  # "path#L12-L30"
    kind: Kind  # note (memory), message, tool_call, tool_output (transcripts)
    scores: Scores
    modified: str | None  # the file's mtime on disk (ISO 8601, UTC)
    indexed: str | None  # when the file was last indexed (ISO 8601, UTC)
    date: str | None  # the content's date: a note's, or the message's own time (ISO 8601)
    stale: bool  # the file on disk changed after it was indexed (or is gone)


class SearchResult(_SearchResultBase, total=False):
    """One hit: enough to judge relevance, then ``get`` the lines."""

    tool: str  # tool calls and outputs: the tool's name
    also: list[Place]  # the same passage elsewhere (near-duplicate collapse)
    truncated: bool  # the snippet was cut to fit max_tokens
    explain: dict[str, Any]  # with explain=True: channel ranks/scores, boosts, recency, floor


class IndexInfo(TypedDict):
    """The index's sync state as seen by a search."""

    state: str  # e.g. "idle", "syncing", "reindexing"
    pending: int  # files waiting to be indexed
    last_sync: float | None  # Unix time the last sync finished (None: not since start)


class _SearchResponseBase(TypedDict):
    """The fields every search answer has."""

    results: list[SearchResult]
    mode: Mode
    degraded: str | None  # why vector search is off, None when it is on
    provider: str  # e.g. "local/all-MiniLM-L6-v2", "none"
    index: IndexInfo
    took_ms: float


class SearchResponse(_SearchResponseBase, total=False):
    """The answer to ``search``."""

    budget: dict[str, int]  # with max_tokens: max_tokens, used_tokens, snippets_trimmed, dropped
    explain: dict[str, Any]  # with explain=True: query shape, weights, match expression
    vectors_pending: int  # chunks found by keyword only until their vectors are filled in
    # When candidates were found but none reached min_score: candidates, best_score, min_score,
    # see_with (a min_score that shows them), hint (one sentence saying so).
    under_floor: dict[str, Any]


class GetResponse(TypedDict):
    """The answer to ``get``: exactly the lines asked for."""

    path: str
    start_line: int
    end_line: int
    text: str
    total_lines: int


class StatusResponse(TypedDict, total=False):
    """The answer to ``status``; keys typed loosely where the engine reports free-form blocks."""

    version: str
    state: str
    provider: str
    provider_reason: str
    degraded: str | None
    identity: dict[str, Any] | None  # provider, model, dims, chunking of the index
    counts: dict[str, Any]  # files, chunks, ...
    progress: dict[str, Any]
    vectors: dict[str, int]  # vectors_pending, vectors_total: keyword first, vectors behind
    last_sync: float | None
    last_report: dict[str, Any] | None
    last_error: str | None
    index_path: str
    memory_roots: list[str]
    session_globs: list[str]
    config_path: str | None
    daemon: dict[str, Any]  # pid, uptime_s, socket, watching, paused, pending, retry_in_s
    sessions: dict[str, Any]
    warnings: list[str]  # e.g. a config file holding keys that others can read
    provider_health: dict[str, Any]  # the remote provider's circuit breaker (up/down, since)
    missing_roots: list[dict[str, Any]]  # memory folders gone or unmounted (rows kept)
    skipped_files: list[dict[str, str]]  # {"path", "reason"}: files that could not be indexed
    skipped_total: int
    redactions: dict[str, Any]  # {"indexed"|"served": {"total", "by_kind"}} since the daemon began
    vector_matrix: dict[str, Any] | None  # rows, storage ("file"|"memory"), loaded_from, load_s
    # words held, bytes, failed (searches sent to FTS5), preloaded (common words read ahead),
    # preloading (reading ahead now), preload_failed
    keyword_postings: dict[str, int | bool] | None


class Hello(TypedDict):
    """The answer to ``hello``."""

    protocol: int  # the daemon's protocol version
    version: str  # the daemon's package version
    pid: int
    capabilities: list[str]  # the methods it serves
    max_request: NotRequired[int]  # largest request frame the daemon accepts, in bytes
    config: NotRequired[str]  # the config file the daemon serves (resolved; may not exist)
    data_dir: NotRequired[str]  # its data folder: index, logs, the default memory folder
