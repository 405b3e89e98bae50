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

Here: the tools' descriptions, running a call, and the stdio session. The arguments are checked in
:mod:`recalld.surfaces.mcp_arguments`, answers shaped in :mod:`recalld.surfaces.mcp_results`, and
the daemon reached (and started) by :mod:`recalld.surfaces.mcp_daemon_link`.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

from recalld import __version__
from recalld.surfaces import mcp_memory_calls as memory_calls
from recalld.surfaces import mcp_memory_tools as memory_tools
from recalld.surfaces.cli_paths import with_cwd_fallback
from recalld.surfaces.mcp_arguments import ToolError, get_params, search_params
from recalld.surfaces.mcp_daemon_link import START_TIMEOUT_S, DaemonLink, spawn_daemon
from recalld.surfaces.mcp_results import (
    GET_CHARS,
    ToolOutput,
    describe_error,
    format_get,
    format_search,
    get_payload,
    search_payload,
)
from recalld.surfaces.mcp_schemas import (
    GET_OUTPUT_SCHEMA,
    GET_SCHEMA,
    GET_TOOL,
    SEARCH_OUTPUT_SCHEMA,
    SEARCH_SCHEMA,
    SEARCH_TOOL,
)

# Public names of the tools' parts, importable from here as before the split.
__all__ = [
    "GET_CHARS",
    "GET_TOOL",
    "SEARCH_TOOL",
    "START_TIMEOUT_S",
    "DaemonLink",
    "ToolError",
    "ToolOutput",
    "describe_error",
    "format_get",
    "format_search",
    "get_params",
    "get_payload",
    "main",
    "run_tool",
    "search_params",
    "search_payload",
    "serve",
    "spawn_daemon",
    "tool_definitions",
]

log = logging.getLogger(__name__)


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

# the MCP server -----------------------------------------------------------------------------------


def tool_definitions() -> list[Any]:
    """The four tools as MCP ``Tool`` objects (the writing ones: mcp_memory_calls)."""
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
        *memory_calls.tool_definitions(),
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
                # Fitted on the very text returned below (the JSON of the payload).
                lambda results, report: _search_text(
                    search_payload({**res, "results": results, "budget": report}, dated=False)
                ),
            )
        payload = search_payload(res, dated=max_tokens is None)
        return ToolOutput(_search_text(payload), payload)
    if name == GET_TOOL:
        params = get_params(args)
        # A relative path the memory folders do not have is tried in the agent's folder too.
        got = link.call(
            lambda c: with_cwd_fallback(lambda p: c.get(**{**params, "path": p}), params["path"])
        )
        return ToolOutput(format_get(got), get_payload(got))
    if name in memory_calls.NAMES:
        return memory_calls.run(link, name, args)
    raise ToolError(
        f"unknown tool {name!r}; this server has {SEARCH_TOOL}, {GET_TOOL}, "
        f"{memory_tools.WRITE_TOOL} and {memory_tools.FORGET_TOOL}"
    )


def _search_text(payload: Mapping[str, Any]) -> str:
    """What ``memory_search`` returns as text: its payload as compact JSON."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


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
                content=[types.TextContent(text=describe_error(exc, params.name))], is_error=True
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

    from recalld.surfaces.mcp_drain import draining  # anyio: the mcp extra's

    server = build_server(link)
    options = server.create_initialization_options()

    async def run(read: Any, write: Any) -> None:
        await server.run(read, write, options)

    async with stdio_server() as (read_stream, write_stream):
        # stdin's end waits for the answers to what it brought (recalld.surfaces.mcp_drain)
        await draining(read_stream, write_stream, run)


def main() -> int:
    """Entry point of ``recalld mcp``."""
    try:
        import anyio
        import mcp  # noqa: F401
    except ImportError:
        from recalld.surfaces.mcp_sdk import not_installed

        print(f"recalld mcp: {not_installed()}", file=sys.stderr)
        return 1
    # The CLI configured logging to stderr already; stdout is reserved for the protocol.
    link = DaemonLink()
    try:
        anyio.run(serve, link)
    finally:
        link.close()
    return 0
