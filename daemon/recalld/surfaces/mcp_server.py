"""``recalld mcp``: an MCP server over stdio that forwards two tools to the daemon.

    memory_search(query, maxResults?, minScore?, source?, pathPrefix?)   ranked hits with citations
    memory_get(path, from?, lines?, decoded?)                            exact lines of a hit

It is a shim: every call goes through :class:`recalld_client.Client`, and the daemon is started
(detached, logging to ``logs/daemon.log`` in the data dir) when none runs for this home, so that
an agent host can simply list ``recalld mcp`` as a server. Built on the low-level server of the
official ``mcp`` SDK (v2) because the tools' argument names (``from``, camelCase) are part of the
contract and a hand-written JSON schema states them exactly.

Each answer is a text block and, beside it, the same answer as ``structuredContent`` that
validates against the tool's ``outputSchema`` (:mod:`recalld.surfaces.mcp_schemas`).

Tool failures (a daemon error, a forbidden path, bad arguments, a daemon that will not start) are
returned as tool results with ``isError`` and a readable message, so the agent can correct itself;
the server itself never dies of them. Stdout carries only the protocol; logs go to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from recalld import __version__, paths
from recalld.surfaces import mcp_memory_tools as memory_tools
from recalld.surfaces.cli_output import pending_note
from recalld.surfaces.filter_options import STALE_NOTE, mcp_filter_params
from recalld.surfaces.mcp_schemas import (
    GET_OUTPUT_SCHEMA,
    GET_SCHEMA,
    KINDS,
    MAX_RESULTS_CAP,
    SEARCH_OUTPUT_SCHEMA,
    SEARCH_SCHEMA,
)
from recalld_client.citation import parse_citation

log = logging.getLogger(__name__)

SEARCH_TOOL = "memory_search"
GET_TOOL = "memory_get"
START_TIMEOUT_S = 60.0

_WHEN = (
    "prior work, past decisions and their reasons, dates, people, preferences, to-dos, "
    "or anything the user or earlier sessions may have written down"
)

INSTRUCTIONS = (
    "recalld is the user's long-term memory (Markdown notes and past agent sessions). Before "
    f"answering anything about {_WHEN}, call {SEARCH_TOOL} first; then call {GET_TOOL} for the "
    "exact lines of the hits you use, and cite them as path#Lx-Ly. When you learn a decision, "
    f"a preference or a fact a later session will need, save it with {memory_tools.WRITE_TOOL}."
)

SEARCH_DESCRIPTION = (
    "Search the user's memory (Markdown notes) and past agent session transcripts with hybrid "
    f"keyword + semantic search. Call this BEFORE answering anything about {_WHEN}; do not guess "
    "from your own context when memory may know. Returns JSON: results ranked by score, each "
    "with a citation 'path#Lx-Ly', its source, kind (note, message, tool_call, tool_output; "
    "tool content names its tool), score (0-1) and a short snippet; plus a "
    "'degraded' note when semantic search is off (keyword-only). Narrow it with tags, since / "
    "until ('7d', '2026-03-14'), project or session when the question is about a time, a topic "
    "or a project; each hit has its date, and 'changed' when its file changed since it was "
    "indexed. Snippets are previews: call "
    f"{GET_TOOL} with the citation to read the exact lines before relying on them, and cite "
    "sources in your answer as path#Lx-Ly. No results means memory holds nothing on it: say so."
)

GET_DESCRIPTION = (
    f"Read exact lines of a file that {SEARCH_TOOL} returned (memory notes or session "
    "transcripts; other paths are refused). Pass the citation's path with from = first line "
    "and lines = how many, or the whole citation 'path#Lx-Ly' as path. Use it after "
    f"{SEARCH_TOOL} to quote or check what memory says, and cite what you use as path#Lx-Ly. "
    "For a transcript hit, decoded = true returns the readable text of the cited line (the "
    "message, the tool call's arguments or the tool's output) instead of raw JSON. "
    "Returns a header line 'path#Lx-Ly (of N lines)' followed by the text."
)

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


# arguments ----------------------------------------------------------------------------------------


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


# results ------------------------------------------------------------------------------------------


class ToolOutput(NamedTuple):
    """A tool's answer: the text block, and the same answer as structured content."""

    text: str
    structured: dict[str, Any]


def format_search(res: Mapping[str, Any]) -> str:
    """Compact JSON for the agent: citation, source, score and snippet per hit, plus notes."""
    return json.dumps(search_payload(res), ensure_ascii=False, separators=(",", ":"))


def search_payload(res: Mapping[str, Any]) -> dict[str, Any]:
    """The search answer as sent (SEARCH_OUTPUT_SCHEMA); the text block is it serialized."""
    results = [
        {
            "citation": r["citation"],
            "source": r.get("source"),
            **({"kind": r["kind"]} if r.get("kind") else {}),
            **({"tool": r["tool"]} if r.get("tool") else {}),
            "score": round(float(r["score"]), 3),
            "snippet": r.get("snippet", ""),
            **({"also": [p["citation"] for p in r["also"]]} if r.get("also") else {}),
            **({"date": r["date"]} if r.get("date") else {}),
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


def format_get(res: Mapping[str, Any]) -> str:
    """A citation header, then the lines as they are."""
    header = (
        f"{res['path']}#L{res['start_line']}-L{res['end_line']} "
        f"(of {res.get('total_lines', '?')} lines)"
    )
    return f"{header}\n{res.get('text', '')}"


def get_payload(res: Mapping[str, Any]) -> dict[str, Any]:
    """The get answer as structured content (GET_OUTPUT_SCHEMA)."""
    start, end = int(res["start_line"]), int(res["end_line"])
    return {
        "path": res["path"],
        "startLine": start,
        "endLine": end,
        "totalLines": int(res.get("total_lines", end)),
        "citation": f"{res['path']}#L{start}-L{end}",
        "text": res.get("text", ""),
    }


def describe_error(exc: BaseException) -> str:
    """A message the agent can act on, for any failure of a tool call."""
    from recalld_client import errors

    text = str(exc) or type(exc).__name__
    if isinstance(exc, ToolError):
        return text
    if isinstance(exc, errors.Forbidden):
        return (
            f"forbidden: {text}. {GET_TOOL} only reads files inside recalld's memory and "
            f"session folders: use a path from a {SEARCH_TOOL} citation"
        )
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


# the daemon ---------------------------------------------------------------------------------------

T = TypeVar("T")


class DaemonLink:
    """A client of this home's daemon that starts the daemon when nothing answers."""

    def __init__(
        self,
        *,
        start_timeout: float = START_TIMEOUT_S,
        spawn: Callable[[Path], subprocess.Popen[bytes]] | None = None,
    ) -> None:
        from recalld_client import Client

        self.socket = paths.socket_path()
        self.client = Client(self.socket, timeout=60.0)
        self.start_timeout = start_timeout
        self.log_path = paths.log_dir() / "daemon.log"
        self._spawn = spawn or spawn_daemon
        self._lock = threading.Lock()

    def call(self, fn: Callable[[Any], T]) -> T:
        """``fn(client)``, starting the daemon first if it is not running (once per call)."""
        from recalld_client import ConnectionLost, DaemonNotRunning

        try:
            return fn(self.client)
        except (DaemonNotRunning, ConnectionLost):
            self.ensure_running()
            return fn(self.client)

    def ensure_running(self) -> None:
        """Start the daemon unless one answers; wait until it does (or raise ToolError)."""
        from recalld_client import is_running

        with self._lock:  # concurrent tool calls must not start two daemons
            if is_running(self.socket, timeout=1.0):
                return
            log.info("no recalld daemon at %s: starting one (log: %s)", self.socket, self.log_path)
            proc = self._spawn(self.log_path)
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline:
                if is_running(self.socket, timeout=1.0):
                    return
                if proc.poll() is not None and not is_running(self.socket, timeout=1.0):
                    raise ToolError(
                        f"the recalld daemon exited with code {proc.returncode} while starting: "
                        f"{self._log_tail()} (full log: {self.log_path})"
                    )
                time.sleep(0.1)
            raise ToolError(
                f"the recalld daemon did not start within {self.start_timeout:.0f} s "
                f"(log: {self.log_path}); run `recalld serve` to see why"
            )

    def _log_tail(self, lines: int = 5) -> str:
        from recalld.ingest.redactor import redact  # lines written before the log was scrubbed

        try:
            with self.log_path.open("rb") as fh:
                fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65_536))  # a key's block is in there whole
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return "no log written"
        tail = [line for line in redact(text, "served")[0].splitlines() if line.strip()]
        return " | ".join(tail[-lines:]) or "empty log"

    def close(self) -> None:
        """Close the connection (the daemon keeps running for other tools)."""
        self.client.close()


def spawn_daemon(log_path: Path) -> subprocess.Popen[bytes]:
    """``recalld serve`` detached, marked as started on demand (it stops when long idle)."""
    from recalld.surfaces.lifecycle import spawn_daemon as spawn

    return spawn(log_path, "mcp")


# the MCP server -----------------------------------------------------------------------------------


def tool_definitions() -> list[Any]:
    """The two tools as MCP ``Tool`` objects."""
    from mcp import types

    return [
        types.Tool(
            name=SEARCH_TOOL,
            title="Search memory",
            description=SEARCH_DESCRIPTION,
            input_schema=SEARCH_SCHEMA,
            output_schema=SEARCH_OUTPUT_SCHEMA,
            annotations=types.ToolAnnotations(
                read_only_hint=True, idempotent_hint=True, open_world_hint=False
            ),
        ),
        types.Tool(
            name=GET_TOOL,
            title="Read memory lines",
            description=GET_DESCRIPTION,
            input_schema=GET_SCHEMA,
            output_schema=GET_OUTPUT_SCHEMA,
            annotations=types.ToolAnnotations(
                read_only_hint=True, idempotent_hint=True, open_world_hint=False
            ),
        ),
        types.Tool(
            name=memory_tools.WRITE_TOOL,
            title="Write to memory",
            description=memory_tools.WRITE_DESCRIPTION,
            input_schema=memory_tools.WRITE_SCHEMA,
            output_schema=memory_tools.WRITE_OUTPUT_SCHEMA,
            annotations=types.ToolAnnotations(
                read_only_hint=False,
                destructive_hint=False,
                idempotent_hint=True,  # an exact repeat is not written twice
                open_world_hint=False,
            ),
        ),
        types.Tool(
            name=memory_tools.FORGET_TOOL,
            title="Forget from memory",
            description=memory_tools.FORGET_DESCRIPTION,
            input_schema=memory_tools.FORGET_SCHEMA,
            output_schema=memory_tools.FORGET_OUTPUT_SCHEMA,
            annotations=types.ToolAnnotations(
                read_only_hint=False,
                destructive_hint=True,
                idempotent_hint=False,
                open_world_hint=False,
            ),
        ),
    ]


def run_tool(link: DaemonLink, name: str, args: Mapping[str, Any] | None) -> ToolOutput:
    """Run one tool call to its result (blocking; raises on failure)."""
    if name == SEARCH_TOOL:
        params = search_params(args)
        query = params.pop("query")
        # The budget is fitted here, on the text the agent gets, not on the daemon's answer.
        max_tokens = params.pop("max_tokens", None)
        res = dict(link.call(lambda c: c.search(query, **params)))
        if max_tokens is not None:
            from recalld.retrieval.answer_budget import fit_rendered

            res["budget"] = fit_rendered(
                res["results"],
                max_tokens,
                lambda results, report: format_search(
                    {**res, "results": results, "budget": report}
                ),
            )
        payload = search_payload(res)
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return ToolOutput(text, payload)
    if name == GET_TOOL:
        params = get_params(args)
        got = link.call(lambda c: c.get(**params))
        return ToolOutput(format_get(got), get_payload(got))
    if name in (memory_tools.WRITE_TOOL, memory_tools.FORGET_TOOL):
        return _memory_tool(link, name, args)
    raise ToolError(
        f"unknown tool {name!r}; this server has {SEARCH_TOOL}, {GET_TOOL}, "
        f"{memory_tools.WRITE_TOOL} and {memory_tools.FORGET_TOOL}"
    )


def _memory_tool(link: DaemonLink, name: str, args: Mapping[str, Any] | None) -> ToolOutput:
    """``memory_write`` or ``memory_forget`` through the daemon."""
    try:
        if name == memory_tools.WRITE_TOOL:
            params = memory_tools.write_params(args)
        else:
            params = memory_tools.forget_params(args)
    except memory_tools.ArgumentError as exc:
        raise ToolError(str(exc)) from None
    if name == memory_tools.WRITE_TOOL:
        res = link.call(lambda c: c.remember(**params))
        return ToolOutput(memory_tools.write_text(res), memory_tools.write_payload(res))
    res = link.call(lambda c: c.forget(**params))
    return ToolOutput(memory_tools.forget_text(res), memory_tools.forget_payload(res))


def build_server(link: DaemonLink) -> Any:
    """The low-level MCP server with the two tools bound to ``link``."""
    import anyio.to_thread
    from mcp import types
    from mcp.server import Server, ServerRequestContext

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_definitions())

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            # The client blocks on a socket (and may wait for the daemon to start): off the loop.
            out = await anyio.to_thread.run_sync(run_tool, link, params.name, params.arguments)
        except Exception as exc:  # every failure becomes a tool error, never a crash
            if not isinstance(exc, ToolError):
                log.warning("%s failed: %s", params.name, exc, exc_info=log.isEnabledFor(10))
            return types.CallToolResult(
                content=[types.TextContent(text=describe_error(exc))], is_error=True
            )
        # The text for models, the same answer typed for clients that read structured output.
        return types.CallToolResult(
            content=[types.TextContent(text=out.text)], structured_content=out.structured
        )

    return Server(
        "recalld",
        version=__version__,
        title="recalld memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(link: DaemonLink) -> None:
    """Serve MCP on stdin/stdout until the host closes stdin."""
    from mcp.server.stdio import stdio_server

    server = build_server(link)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> int:
    """Entry point of ``recalld mcp``."""
    try:
        import anyio
        import mcp  # noqa: F401
    except ImportError:
        print(
            "recalld mcp needs the MCP SDK: install recalld[mcp] (pip install 'recalld[mcp]')",
            file=sys.stderr,
        )
        return 1
    # The CLI configured logging to stderr already; stdout is reserved for the protocol.
    link = DaemonLink()
    try:
        anyio.run(serve, link)
    finally:
        link.close()
    return 0
