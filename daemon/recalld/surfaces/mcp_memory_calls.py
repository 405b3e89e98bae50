"""``memory_write`` and ``memory_forget`` in the MCP server: their tool objects and their calls.

What the tools accept and answer is in :mod:`recalld.surfaces.mcp_memory_tools`; here they are
declared to MCP and run through the daemon link like the read tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recalld.surfaces import mcp_memory_tools as memory_tools
from recalld.surfaces.mcp_arguments import ToolError
from recalld.surfaces.mcp_daemon_link import DaemonLink
from recalld.surfaces.mcp_results import ToolOutput

NAMES = (memory_tools.WRITE_TOOL, memory_tools.FORGET_TOOL)


def tool_definitions() -> list[Any]:
    """The two writing tools as MCP ``Tool`` objects."""
    from mcp import types

    return [
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


def run(link: DaemonLink, name: str, args: Mapping[str, Any] | None) -> ToolOutput:
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
