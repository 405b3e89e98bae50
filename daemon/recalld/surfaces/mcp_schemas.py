"""The JSON schemas of ``recalld mcp``'s two tools: their arguments and their structured output.

The argument names (``from``, camelCase) are part of the contract, so the schemas are written
out by hand. Each tool answers with a text block for the model and, beside it, the same answer
as ``structuredContent`` that validates against the tool's output schema (MCP 2025-06-18): the
search text block is that object serialized, the get text block a citation header and the lines.
"""

from __future__ import annotations

from typing import Any

SEARCH_TOOL = "memory_search"
GET_TOOL = "memory_get"

KINDS = ("note", "message", "tool_call", "tool_output")
MAX_RESULTS_CAP = 50

_WHEN = "an ISO date or time ('2026-03-14', '2026-03-14T09:30Z') or a span back ('12h', '7d')"

#: The search filters (recalld.retrieval.filters), applied before ranking.
FILTER_PROPERTIES: dict[str, Any] = {
    "tags": {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "description": "Only notes with one of these tags (front matter 'tags' or inline "
        "#tag), e.g. ['decision'].",
    },
    "since": {
        "type": "string",
        "description": f"Only content dated from then on: {_WHEN}. A note's date is its front "
        "matter date, its daily-note name or its mtime; a message's is its own time.",
    },
    "until": {
        "type": "string",
        "description": f"Only content dated before then: {_WHEN}; a bare date includes that day.",
    },
    "project": {
        "type": "string",
        "description": "Only this project: a session's working folder (name or path) or a "
        "note's top folder.",
    },
    "session": {"type": "string", "description": "Only this session transcript (its id)."},
}

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "description": "What to look for: a question, keywords, names, identifiers.",
        },
        "maxResults": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_RESULTS_CAP,
            "description": "Most results to return (default 6).",
        },
        "minScore": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "Drop results scoring below this (default 0.35).",
        },
        "source": {
            "type": "string",
            "enum": ["memory", "sessions"],
            "description": "Only notes ('memory') or only past session transcripts ('sessions').",
        },
        "pathPrefix": {
            "type": "string",
            "description": "Only files under this folder (relative to the memory folder, or "
            "absolute).",
        },
        "maxTokens": {
            "type": "integer",
            "minimum": 100,
            "description": "Fit the whole answer in about this many tokens (snippets are "
            "trimmed, the lowest results dropped).",
        },
        "kinds": {
            "type": "array",
            "items": {"type": "string", "enum": list(KINDS)},
            "description": "Only these kinds of content: 'note' (memory), 'message' (what the "
            "user or agent said), 'tool_call' (commands run, files edited or written), "
            "'tool_output' (what tools printed or read).",
        },
        **FILTER_PROPERTIES,
    },
    "required": ["query"],
    "additionalProperties": False,
}

GET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "A path from a search citation, or the citation itself 'path#Lx-Ly'.",
        },
        "from": {
            "type": "integer",
            "minimum": 1,
            "description": "First line to read, 1-based (default 1).",
        },
        "lines": {
            "type": "integer",
            "minimum": 1,
            "description": "How many lines to read (default: to the end of the file; one answer "
            "stops at 40,000 characters and says where to read on).",
        },
        "decoded": {
            "type": "boolean",
            "description": "Transcripts: the readable text of each line (message, tool call "
            "arguments, tool output) instead of its raw JSON.",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}

_STRING: dict[str, Any] = {"type": "string"}

SEARCH_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "description": "Hits, best first.",
            "items": {
                "type": "object",
                "properties": {
                    "citation": {
                        "type": "string",
                        "description": "path#Lx-Ly: pass it to memory_get, cite it in answers.",
                    },
                    "source": {"type": "string", "enum": ["memory", "sessions"]},
                    "kind": {"type": "string", "enum": list(KINDS)},
                    "tool": {"type": "string", "description": "The tool, for tool content."},
                    "score": {"type": "number", "minimum": 0, "maximum": 1},
                    "snippet": {"type": "string", "description": "A preview of the lines."},
                    "also": {
                        "type": "array",
                        "items": _STRING,
                        "description": "Citations of the same passage elsewhere.",
                    },
                    "date": {
                        "type": "string",
                        "description": "When the content is from (ISO 8601): the note's date "
                        "or the message's time.",
                    },
                    "changed": {
                        "type": "string",
                        "description": "Present when the file changed since it was indexed: "
                        "read the lines with memory_get before relying on the snippet.",
                    },
                },
                "required": ["citation", "source", "score", "snippet"],
                "additionalProperties": False,
            },
        },
        "mode": {"type": "string", "enum": ["hybrid", "keyword", "vector"]},
        "degraded": {"type": "string", "description": "Why semantic search is off."},
        "vectors_pending": {
            "type": "string",
            "description": "Set while chunks still wait for vectors (matched by keyword only).",
        },
        "budget": {"type": "string", "description": "What maxTokens trimmed or dropped."},
        "index": {"type": "string", "description": "The index is still syncing."},
        "note": {"type": "string", "description": "Present when nothing matched."},
    },
    "required": ["results", "mode"],
    "additionalProperties": False,
}

GET_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "startLine": {"type": "integer", "minimum": 1},
        "endLine": {"type": "integer", "minimum": 0},
        "totalLines": {"type": "integer", "minimum": 0},
        "citation": {"type": "string", "description": "path#Lx-Ly of the lines returned."},
        "text": {"type": "string", "description": "The lines, as they are in the file."},
        "truncated": {
            "type": "string",
            "description": "Set when the answer was cut to fit: what was left out, how to read on.",
        },
    },
    "required": ["path", "startLine", "endLine", "totalLines", "citation", "text"],
    "additionalProperties": False,
}
