"""What ``recalld mcp``'s tools answer: the text block, its structured twin, and error messages."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from recalld.surfaces.cli_output import pending_note
from recalld.surfaces.filter_options import STALE_NOTE
from recalld.surfaces.mcp_arguments import ToolError
from recalld.surfaces.mcp_memory_tools import FORGET_TOOL, WRITE_TOOL
from recalld.surfaces.mcp_schemas import GET_TOOL, SEARCH_TOOL


class ToolOutput(NamedTuple):
    """A tool's answer: the text block, and the same answer as structured content."""

    text: str
    structured: dict[str, Any]


def format_search(res: Mapping[str, Any]) -> str:
    """Compact JSON for the agent: citation, source, score and snippet per hit, plus notes."""
    return json.dumps(search_payload(res), ensure_ascii=False, separators=(",", ":"))


def search_payload(res: Mapping[str, Any], *, dated: bool = True) -> dict[str, Any]:
    """The search answer as sent (SEARCH_OUTPUT_SCHEMA); the text block is it serialized.

    ``dated``: each hit's content day; left out of an answer fitted to a token budget (the
    smallest budget holds one hit with a short snippet, and a date is not what it is for)."""
    results = [
        {
            "citation": r["citation"],
            "source": r.get("source"),
            **({"kind": r["kind"]} if r.get("kind") else {}),
            **({"tool": r["tool"]} if r.get("tool") else {}),
            "score": round(float(r["score"]), 3),
            "snippet": r.get("snippet", ""),
            **({"also": [p["citation"] for p in r["also"]]} if r.get("also") else {}),
            **({"date": str(r["date"])[:10]} if dated and r.get("date") else {}),
            **({"changed": STALE_NOTE} if r.get("stale") else {}),
        }
        for r in res.get("results", [])
    ]
    out: dict[str, Any] = {"results": results, "mode": res.get("mode")}
    if res.get("degraded"):
        out["degraded"] = res["degraded"]
    if note := pending_note(res):
        out["vectors_pending"] = note
    budget = res.get("budget")
    if budget and (budget.get("snippets_trimmed") or budget.get("dropped")):
        out["budget"] = (
            f"{budget['snippets_trimmed']} snippets trimmed, {budget['dropped']} results "
            f"dropped to fit {budget['max_tokens']} tokens"
        )
    index = res.get("index") or {}
    if index.get("state") not in (None, "idle", "paused"):
        # Without this an empty answer during the first sync would read as "memory has nothing".
        out["index"] = (
            f"{index['state']}, {index.get('pending', 0)} files pending: results may be "
            "incomplete, search again shortly"
        )
    if not results and (floor := res.get("under_floor")):
        out["note"] = f"nothing reached the score floor: {floor['hint']}"
    elif not results:
        out["note"] = "no matching memory"
    return out


#: Most characters of one ``memory_get`` answer (~10k tokens): the agent's context pays for it,
#: and a transcript read to its end, or one minified line, can be megabytes.
GET_CHARS = 40_000


def cap_get(res: Mapping[str, Any], limit: int = GET_CHARS) -> dict[str, Any]:
    """``res`` with its text cut to ``limit`` characters at a line's end (inside the first line
    when that line alone is longer), ``end_line`` the last line shown and ``truncated`` saying
    what was left out and how to read on."""
    text = str(res.get("text", ""))
    if len(text) <= limit:
        return dict(res)
    start, end = int(res["start_line"]), int(res["end_line"])
    cut = text.rfind("\n", 0, limit + 1)
    if cut > 0:
        last = start + text.count("\n", 0, cut)
        note = (
            f"cut at {limit:,} characters: lines {start}-{last} of {start}-{end}; "
            f"call memory_get with from {last + 1} for the rest"
        )
        return {**res, "text": text[:cut], "end_line": last, "truncated": note}
    first = text.find("\n")
    size = len(text) if first < 0 else first
    note = (
        f"cut at {limit:,} characters: line {start} alone is {size:,} characters long "
        f"(`recalld get` prints it whole)"
    )
    return {**res, "text": text[:limit], "end_line": start, "truncated": note}


def format_get(res: Mapping[str, Any]) -> str:
    """A citation header, then the lines as they are (capped: :func:`cap_get`)."""
    res = cap_get(res)
    header = (
        f"{res['path']}#L{res['start_line']}-L{res['end_line']} "
        f"(of {res.get('total_lines', '?')} lines)"
    )
    if res.get("truncated"):
        header += f" [{res['truncated']}]"
    return f"{header}\n{res.get('text', '')}"


def get_payload(res: Mapping[str, Any]) -> dict[str, Any]:
    """The get answer as structured content (GET_OUTPUT_SCHEMA; capped: :func:`cap_get`)."""
    res = cap_get(res)
    start, end = int(res["start_line"]), int(res["end_line"])
    return {
        "path": res["path"],
        "startLine": start,
        "endLine": end,
        "totalLines": int(res.get("total_lines", end)),
        "citation": f"{res['path']}#L{start}-L{end}",
        "text": res.get("text", ""),
        **({"truncated": res["truncated"]} if res.get("truncated") else {}),
    }


#: What each tool may touch, said after a "forbidden" error of that tool.
_FORBIDDEN_HINTS = {
    GET_TOOL: f"{GET_TOOL} only reads files inside recalld's memory and session folders: use "
    f"a path from a {SEARCH_TOOL} citation",
    WRITE_TOOL: f"{WRITE_TOOL} writes notes only inside recalld's memory folders: give a note "
    "name such as MEMORY.md or projects/billing.md (no '..', no symbolic links), or leave "
    "note out for today's daily note",
    FORGET_TOOL: f"{FORGET_TOOL} removes lines only from recalld's memory notes: use a "
    f"citation from a {SEARCH_TOOL} or {WRITE_TOOL} answer",
    SEARCH_TOOL: f"{SEARCH_TOOL} only searches recalld's memory and session folders",
}


def describe_error(exc: BaseException, tool: str | None = None) -> str:
    """A message the agent can act on, for any failure of a tool call (of ``tool``)."""
    from recalld_client import errors

    text = str(exc) or type(exc).__name__
    if isinstance(exc, ToolError):
        return text
    if isinstance(exc, errors.Forbidden):
        hint = _FORBIDDEN_HINTS.get(tool or GET_TOOL)
        return f"forbidden: {text}. {hint}" if hint else f"forbidden: {text}"
    if isinstance(exc, errors.NotFound):
        return f"not found: {text}"
    if isinstance(exc, errors.BadRequest):
        return f"invalid arguments: {text}"
    if isinstance(exc, errors.Timeout):
        return f"the recalld daemon did not answer in time ({text}); try again"
    if isinstance(exc, errors.DaemonNotRunning | errors.ConnectionLost | errors.Unavailable):
        return f"the recalld daemon is unavailable: {text}"
    if isinstance(exc, errors.RecalldClientError):
        return f"recalld error ({exc.code}): {text}"
    return f"internal error in recalld mcp: {type(exc).__name__}: {text}"
