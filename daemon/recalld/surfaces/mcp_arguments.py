"""The arguments of ``recalld mcp``'s two tools, checked and turned into client keyword arguments.

Agents send common misspellings (``max_results``, ``from_line``): they are accepted rather than
bounced. Anything else that does not fit the schema is a :class:`ToolError` the agent reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recalld.surfaces.filter_options import mcp_filter_params
from recalld.surfaces.mcp_schemas import GET_SCHEMA, KINDS, MAX_RESULTS_CAP, SEARCH_SCHEMA
from recalld_client.citation import parse_citation

# Spellings agents commonly send instead of the schema's; accepted rather than bounced.
_ALIASES = {
    "max_results": "maxResults",
    "min_score": "minScore",
    "path_prefix": "pathPrefix",
    "max_tokens": "maxTokens",
    "sources": "source",
    "from_line": "from",
    "fromLine": "from",
    "kind": "kinds",
    "tag": "tags",
}


class ToolError(Exception):
    """A failure to report to the agent as a tool error (the message is what it reads)."""


def _normalise(args: Mapping[str, Any] | None, schema: Mapping[str, Any]) -> dict[str, Any]:
    allowed = schema["properties"].keys()
    out: dict[str, Any] = {}
    for key, value in (args or {}).items():
        name = _ALIASES.get(key, key)
        if name not in allowed:
            raise ToolError(
                f"unknown argument {key!r}; this tool takes {', '.join(sorted(allowed))}"
            )
        out[name] = value
    for name in schema["required"]:
        if name not in out:
            raise ToolError(f"missing required argument {name!r}")
    return out


def _int(name: str, value: Any, low: int, high: int | None = None) -> int:
    # bool is an int subclass; a JSON float with no fraction (3.0) is accepted as an int.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"{name} must be an integer, not {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ToolError(f"{name} must be {bound}, not {value}")
    return value


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{name} must be a non-empty string")
    return value.strip()


def search_params(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of :meth:`Client.search` from ``memory_search`` arguments."""
    a = _normalise(args, SEARCH_SCHEMA)
    out: dict[str, Any] = {"query": _str("query", a["query"])}
    if a.get("maxResults") is not None:
        out["max_results"] = _int("maxResults", a["maxResults"], 1, MAX_RESULTS_CAP)
    if a.get("minScore") is not None:
        score = a["minScore"]
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise ToolError(f"minScore must be a number between 0 and 1, not {score!r}")
        out["min_score"] = float(score)
    source = a.get("source")
    if isinstance(source, list) and len(source) == 1:
        source = source[0]
    if source is not None:
        if source not in ("memory", "sessions"):
            raise ToolError(f"source must be 'memory' or 'sessions', not {source!r}")
        out["sources"] = source
    if a.get("pathPrefix") is not None:
        out["path_prefix"] = _str("pathPrefix", a["pathPrefix"])
    if a.get("maxTokens") is not None:
        out["max_tokens"] = _int("maxTokens", a["maxTokens"], 100, 1_000_000)
    kinds = a.get("kinds")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not isinstance(kinds, list) or not kinds or not all(k in KINDS for k in kinds):
            raise ToolError(f"kinds must be a list of {', '.join(KINDS)}, not {kinds!r}")
        out["kinds"] = list(kinds)
    out.update(mcp_filter_params(a, ToolError))
    return out


def get_params(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of :meth:`Client.get` from ``memory_get`` arguments."""
    a = _normalise(args, GET_SCHEMA)
    path = _str("path", a["path"])
    first: int | None = None
    count: int | None = None
    try:
        cited = parse_citation(path)
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    if cited is not None:
        # A whole citation: its range applies unless from/lines are given explicitly.
        path, first, count = cited.path, cited.first, cited.lines
    if a.get("from") is not None:
        first = _int("from", a["from"], 1)
    if a.get("lines") is not None:
        count = _int("lines", a["lines"], 1)
    out: dict[str, Any] = {"path": path, "from_line": first or 1}
    if count is not None:
        out["lines"] = count
    decoded = a.get("decoded")
    if decoded is not None:
        if not isinstance(decoded, bool):
            raise ToolError(f"decoded must be true or false, not {decoded!r}")
        if decoded:
            out["decoded"] = True
    return out
