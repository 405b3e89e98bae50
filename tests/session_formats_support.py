"""Shared by the test_session_formats_* modules: sample transcript folders, JSONL line
helpers, and the Codex and OpenClaw records several of them parse."""

from __future__ import annotations

import json
from typing import Any

from conftest import BENCH, needs_bench
from recalld.ingest.sessions.formats import Message

SIMONW = BENCH / "transcripts" / "simonw-claude-code-transcripts"

needs_spotter = needs_bench("transcripts", "spotter")


def numbered(records: list[Any]) -> list[tuple[int, bytes]]:
    """JSONL lines for records; str items are taken as raw lines."""
    return [
        (i, r.encode() if isinstance(r, str) else json.dumps(r).encode())
        for i, r in enumerate(records, start=1)
    ]


def texts(messages: list[Message]) -> list[tuple[int, str, str, str]]:
    """(line, role, kind, text); a tool call by its summary line (its arguments follow it)."""
    return [
        (m.line, m.role, m.kind, m.text.split("\n")[0] if m.kind == "tool_call" else m.text)
        for m in messages
    ]


def _envelope(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2025-12-08T00:39:54.852Z", "type": kind, "payload": payload}


CODEX_RECORDS = [
    _envelope("session_meta", {"id": "s1", "cwd": "/repo", "cli_version": "0.77.0"}),
    _envelope("turn_context", {"cwd": "/repo", "model": "gpt-5"}),
    _envelope(
        "response_item",
        {
            "type": "message",
            "role": "user",
            "content": [
                {
                    "type": "input_text",
                    "text": "<environment_context>\n<cwd>/repo</cwd>\n</environment_context>",
                }
            ],
        },
    ),
    _envelope(
        "response_item",
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "<permissions instructions>..."}],
        },
    ),
    _envelope(
        "response_item",
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Fix the flaky test in tests/test_io.py"}],
        },
    ),
    _envelope(
        "event_msg", {"type": "user_message", "message": "Fix the flaky test in tests/test_io.py"}
    ),
    _envelope(
        "response_item",
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "**Looking at the test**"}],
            "encrypted_content": "gAAA",
        },
    ),
    _envelope(
        "response_item",
        {
            "type": "function_call",
            "name": "shell",
            "call_id": "c1",
            "arguments": json.dumps(
                {"command": ["bash", "-lc", "pytest -x tests/test_io.py"], "workdir": "/repo"}
            ),
        },
    ),
    _envelope(
        "response_item",
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": json.dumps({"output": "1 failed, 3 passed", "metadata": {"exit_code": 1}}),
        },
    ),
    _envelope(
        "response_item",
        {
            "type": "function_call",
            "name": "exec_command",
            "call_id": "c2",
            "arguments": json.dumps({"cmd": "rg -n sleep tests"}),
        },
    ),
    _envelope(
        "response_item",
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": "Exit code: 0\nWall time: 0.1 seconds\nOutput:\n"
            "tests/test_io.py:12: time.sleep(0.1)\n",
        },
    ),
    _envelope(
        "response_item",
        {
            "type": "custom_tool_call",
            "name": "apply_patch",
            "call_id": "c3",
            "input": "*** Begin Patch\n*** Update File: tests/test_io.py\n@@\n"
            "-    time.sleep(0.1)\n*** End Patch",
        },
    ),
    _envelope(
        "response_item", {"type": "custom_tool_call_output", "call_id": "c3", "output": "Success."}
    ),
    _envelope("response_item", {"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}}),
    _envelope("event_msg", {"type": "token_count", "info": None}),
    _envelope(
        "response_item",
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Removed the sleep; the test passes now."}],
        },
    ),
    _envelope("compacted", {"message": "Summary of the work so far"}),
]


OPENCLAW_RECORDS = [
    {
        "type": "session",
        "version": 3,
        "id": "u-1",
        "timestamp": "2026-02-06T07:49:00.000Z",
        "cwd": "/w",
    },
    {
        "type": "model_change",
        "id": "a0",
        "parentId": None,
        "provider": "anthropic",
        "modelId": "claude",
    },
    {
        "type": "message",
        "id": "a1",
        "parentId": "a0",
        "timestamp": "2026-02-06T07:49:01.000Z",
        "message": {"role": "user", "content": "What is in notes.md?", "timestamp": 1770364141000},
    },
    {
        "type": "message",
        "id": "a2",
        "parentId": "a1",
        "timestamp": "2026-02-06T07:49:02.000Z",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "read it"},
                {"type": "text", "text": "Let me look."},
                {
                    "type": "toolCall",
                    "id": "call_1",
                    "name": "read",
                    "arguments": {"path": "notes.md"},
                },
            ],
            "provider": "anthropic",
            "model": "claude",
            "usage": {},
            "stopReason": "toolUse",
        },
    },
    {
        "type": "message",
        "id": "a3",
        "parentId": "a2",
        "timestamp": "2026-02-06T07:49:03.000Z",
        "message": {
            "role": "toolResult",
            "toolCallId": "call_1",
            "toolName": "read",
            "content": [{"type": "text", "text": "# Notes\nbuy milk"}],
            "isError": False,
        },
    },
    {
        "type": "message",
        "id": "a4",
        "parentId": "a3",
        "message": {
            "role": "bashExecution",
            "command": "date",
            "output": "Fri Feb  6",
            "exitCode": 0,
            "cancelled": False,
            "truncated": False,
            "timestamp": 1770364144000,
        },
    },
    {
        "type": "compaction",
        "id": "a5",
        "parentId": "a4",
        "summary": "User asked about notes.",
        "firstKeptEntryId": "a3",
        "tokensBefore": 5000,
    },
    {"type": "custom", "id": "a6", "parentId": "a5", "customType": "ext", "data": {"n": 1}},
    {
        "type": "message",
        "id": "a7",
        "parentId": "a6",
        "timestamp": "2026-02-06T07:49:09.000Z",
        "message": {
            "role": "assistant",
            "content": [{"type": "text", "text": "It says: buy milk."}],
        },
    },
]
