"""Transcript parsers: Claude Code (real sessions), Codex, OpenClaw, generic; malformed input."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import BENCH, needs_bench
from recalld.ingest.sessions.formats import (
    CLAUDE_CODE,
    CODEX,
    GENERIC,
    OPENCLAW,
    UNKNOWN,
    Message,
    TranscriptParser,
    detect_format,
    parse_file,
    parse_lines,
    tool_line,
)

SPOTTER = BENCH / "transcripts" / "spotter"
SIMONW = BENCH / "transcripts" / "simonw-claude-code-transcripts"
LOCOMO = BENCH / "locomo-transcripts" / "corpus"
MAIN_SESSIONS = sorted(p for p in SPOTTER.glob("*.jsonl") if re.match(r"[0-9a-f]{8}-", p.name))

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


# --- Claude Code: real sessions ------------------------------------------------------------------


def _claude_blocks(path: Path) -> dict[str, int]:
    counts = {"tool_use": 0, "thinking": 0, "text": 0}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") in ("user", "assistant") and not rec.get("isMeta"):
            content = rec["message"]["content"]
            for block in content if isinstance(content, list) else []:
                if block["type"] in counts:
                    counts[block["type"]] += 1
    return counts


@needs_spotter
@pytest.mark.parametrize("path", MAIN_SESSIONS, ids=lambda p: p.name[:8])
def test_spotter_sessions(path: Path) -> None:
    messages, stats, fmt = parse_file(path)
    blocks = _claude_blocks(path)
    assert fmt == CLAUDE_CODE
    assert stats.lines == len(path.read_bytes().splitlines())
    assert stats.skipped_invalid == stats.skipped_unknown == stats.skipped_huge == 0
    assert stats.skipped_meta > 0  # progress, system, file-history-snapshot records
    assert stats.messages == len(messages)
    assert 100 < len(messages) < stats.lines
    # One tool line per tool_use block, nothing thought aloud, lines in file order.
    calls = [m for m in messages if m.kind == "tool_call"]
    assert len(calls) == blocks["tool_use"]
    assert not [m for m in messages if m.kind == "thinking"]
    assert stats.dropped_thinking == blocks["thinking"]
    assert [m.line for m in messages] == sorted(m.line for m in messages)
    for m in calls:
        summary = m.text.split("\n")[0]
        assert re.fullmatch(r"tool: [A-Za-z]\w* ?.*", summary) and len(summary) < 300
        assert m.role == "assistant" and m.tool == summary.split()[1]
    for m in messages:
        if m.kind == "tool_result":
            assert m.role == "tool"
            assert " more chars)" not in m.text  # whole: nothing cut
        assert m.text.strip() == m.text and m.text
        assert "<system-reminder>" not in m.text
        assert m.timestamp.startswith("2026-")
    assert {m.role for m in messages} <= {"user", "assistant", "tool", "system"}
    for m in messages:  # "system": the summary a compacted session went on from
        assert m.role != "system" or m.text.startswith("This session is being continued")
    assert any(m.role == "user" and m.kind == "text" for m in messages)


@needs_spotter
def test_spotter_tool_lines_look_right() -> None:
    messages, _, _ = parse_file(SPOTTER / "tool_heavy.jsonl")
    calls = [m.text.split("\n")[0] for m in messages if m.kind == "tool_call"]
    assert calls
    for text in calls:
        name = text.split()[1]
        if name == "Bash":
            assert re.fullmatch(r"tool: Bash `.+`", text)
        if name in ("Read", "Write", "Edit"):
            assert re.fullmatch(r"tool: \w+ /\S+", text)
    # Each message's line really holds a user/assistant record.
    raw = (SPOTTER / "tool_heavy.jsonl").read_text().splitlines()
    for m in messages:
        assert json.loads(raw[m.line - 1])["type"] in ("user", "assistant")


@needs_spotter
def test_spotter_thinking_on_request() -> None:
    path = MAIN_SESSIONS[0]
    messages, stats, _ = parse_file(path, include_thinking=True)
    thinking = [m for m in messages if m.kind == "thinking"]
    assert thinking and stats.dropped_thinking == 0
    assert all(m.role == "assistant" for m in thinking)


@needs_spotter
def test_simonw_claude_sample_exact() -> None:
    messages, stats, fmt = parse_file(SIMONW / "sample_session.jsonl")
    assert fmt == CLAUDE_CODE
    assert stats.skipped_meta == 0  # the summary record is the session's title: kept
    assert texts(messages) == [
        (1, "system", "text", "Test session for JSONL parsing"),
        (2, "user", "text", "Create a hello world function"),
        (3, "assistant", "text", "I'll create that function for you."),
        (3, "assistant", "tool_call", "tool: Write /project/hello.py"),
        (4, "tool", "tool_result", "File written successfully"),
        (
            5,
            "assistant",
            "tool_call",
            "tool: Bash `git add . && git commit -m 'Add hello function'`",
        ),
        (6, "tool", "tool_result", "[main abc1234] Add hello function\n 1 file changed"),
        (7, "user", "text", "Now add a goodbye function"),
        (8, "assistant", "text", "Done! The hello function is ready."),
    ]
    assert messages[1].timestamp == "2025-12-24T10:00:00.000Z"


def test_claude_inline_details() -> None:
    long_output = "\n".join(f"{i:6d}\u2192line {i}" for i in range(1, 200))
    records = [
        {"type": "summary", "summary": "Earlier work", "leafUuid": "x"},
        {
            "type": "user",
            "isMeta": True,
            "message": {"role": "user", "content": "<local-command-caveat>x"},
        },
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": "<command-name>/compact</command-name>\n"
                "<command-message>compact</command-message>\n"
                "<command-args>keep API notes</command-args>",
            },
        },
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": "<local-command-stdout>Compacted</local-command-stdout>",
            },
        },
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Reading.\x1b[1m bold\x1b[0m"},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Read",
                        "input": {"file_path": "/a/b.py"},
                    },
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "Grep",
                        "input": {"pattern": "def main", "path": "src"},
                    },
                ],
            },
        },
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": long_output},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "is_error": True,
                        "content": [
                            {
                                "type": "text",
                                "text": "no matches<system-reminder>ignore</system-reminder>",
                            }
                        ],
                    },
                ],
            },
        },
        {"type": "progress", "data": {"type": "hook_progress"}},
        {"type": "user", "message": {"role": "user", "content": "<bash-input>ls -la</bash-input>"}},
        {"type": "brand-new-record-type", "x": 1},
    ]
    messages, stats, fmt = parse_lines(numbered(records), tool_result_chars=400)
    assert fmt == CLAUDE_CODE
    assert stats.skipped_meta == 3 and stats.skipped_unknown == 1 and stats.dropped_thinking == 1
    got = texts(messages)
    assert got.pop(0) == (1, "system", "text", "Earlier work")  # the summary record
    assert got[0] == (3, "user", "text", "/compact keep API notes")
    assert got[1] == (5, "assistant", "text", "Reading. bold")
    assert got[2] == (5, "assistant", "tool_call", "tool: Read /a/b.py")
    assert got[3] == (5, "assistant", "tool_call", "tool: Grep `def main` in src")
    line, role, kind, text = got[4]
    assert (line, role, kind) == (6, "tool", "tool_result")
    assert text.startswith("line 1\nline 2\n") and "\u2192" not in text
    assert re.search(r" … \(\d+ more chars\)$", text) and len(text) < 430
    assert got[5] == (6, "tool", "tool_result", "error: no matches")
    assert got[6] == (8, "user", "tool_call", "tool: Bash `ls -la`")
    assert len(got) == 7
    # include_meta keeps the caveat's text
    meta, _, _ = parse_lines(numbered(records), include_meta=True)
    assert (2, "system", "meta", "<local-command-caveat>x") in texts(meta)


# --- Codex ---------------------------------------------------------------------------------------


@needs_spotter
def test_simonw_codex_sample() -> None:
    messages, stats, fmt = parse_file(SIMONW / "sample_codex_session.jsonl")
    assert fmt == CODEX
    assert texts(messages) == [
        (2, "user", "text", "Write a hello world function"),
        (3, "assistant", "text", "Here is a simple hello world function."),
    ]
    assert stats.skipped_meta == 1 and stats.dropped_thinking == 1
    messages, _, _ = parse_file(SIMONW / "sample_codex_session.jsonl", include_thinking=True)
    assert texts(messages)[1][:3] == (3, "assistant", "thinking")


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


def test_codex_envelope() -> None:
    messages, stats, fmt = parse_lines(numbered(CODEX_RECORDS))
    assert fmt == CODEX
    assert texts(messages) == [
        (5, "user", "text", "Fix the flaky test in tests/test_io.py"),
        (8, "assistant", "tool_call", "tool: shell `pytest -x tests/test_io.py`"),
        (9, "tool", "tool_result", "1 failed, 3 passed"),
        (10, "assistant", "tool_call", "tool: exec_command `rg -n sleep tests`"),
        (11, "tool", "tool_result", "tests/test_io.py:12: time.sleep(0.1)"),
        (12, "assistant", "tool_call", "tool: apply_patch tests/test_io.py"),
        (13, "tool", "tool_result", "Success."),
        (16, "assistant", "text", "Removed the sleep; the test passes now."),
        (17, "system", "text", "Summary of the work so far"),  # what the session went on from
    ]
    # session_meta, turn_context, 2 injected context messages, 2 event_msg, ghost
    assert stats.skipped_meta == 7
    assert stats.dropped_thinking == 1 and stats.skipped_unknown == 0
    assert messages[0].timestamp == "2025-12-08T00:39:54.852Z"
    with_thinking, _, _ = parse_lines(numbered(CODEX_RECORDS), include_thinking=True)
    assert (7, "assistant", "thinking", "**Looking at the test**") in texts(with_thinking)


def test_codex_calls_whole_and_results_named() -> None:
    messages, _, _ = parse_lines(numbered(CODEX_RECORDS))
    by_line = {m.line: m for m in messages}
    patch = by_line[12]
    assert patch.tool == "apply_patch" and "-    time.sleep(0.1)" in patch.text  # the whole patch
    assert by_line[10].text.endswith("cmd: rg -n sleep tests") or "rg -n sleep" in by_line[10].text
    assert [(m.line, m.tool) for m in messages if m.kind == "tool_result"] == [
        (9, "shell"),
        (11, "exec_command"),
        (13, "apply_patch"),
    ]


def test_tool_call_arguments_are_decoded_and_whole() -> None:
    new = "def set_span_attributes(span):\n    return span  # \u00e9t\u00e9"
    args = {"file_path": "lib/app/router.ex", "old_string": "pass", "new_string": new}
    block = {"type": "tool_use", "id": "e1", "name": "Edit", "input": args}
    record = {"type": "assistant", "message": {"role": "assistant", "content": [block]}}
    raw = json.dumps(record).replace("lib/app/router.ex", "lib\\/app\\/router.ex")
    assert "lib\\/app" in raw  # JSON's escaped slash, as some writers emit it
    (message,), _, _ = parse_lines([(1, raw)])
    assert message.text.split("\n")[0] == "tool: Edit lib/app/router.ex"
    assert "new_string: def set_span_attributes(span):\n    return span  # \u00e9t\u00e9" in (
        message.text
    )
    assert "old_string: pass" in message.text and message.tool == "Edit"


def test_openclaw_and_generic_results_are_named() -> None:
    records = [
        {"type": "session", "version": 3, "id": "x", "timestamp": "2026-01-01T00:00:00Z"},
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "k1", "name": "read", "arguments": {}}],
            },
        },
        {
            "type": "message",
            "message": {"role": "toolResult", "toolCallId": "k1", "content": "file body"},
        },
    ]
    messages, _, _ = parse_lines(numbered(records))
    assert [(m.kind, m.tool) for m in messages] == [("tool_call", "read"), ("tool_result", "read")]
    generic = [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "g1", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "g1", "content": "sunny"},
    ]  # fmt: skip
    messages, _, _ = parse_lines(numbered(generic))
    assert [m.tool for m in messages] == ["get_weather", "get_weather"]


def test_a_late_result_is_named_across_feeds() -> None:
    parser = TranscriptParser()
    call = {"type": "tool_use", "id": "t1", "name": "Grep", "input": {"pattern": "x"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "hit"}
    first = {"type": "assistant", "message": {"role": "assistant", "content": [call]}}
    second = {"type": "user", "message": {"role": "user", "content": [result]}}
    parser.feed([(1, json.dumps(first))])
    assert parser.calls == {"t1": "Grep"}
    (message,) = parser.feed([(2, json.dumps(second))])
    assert (message.kind, message.tool) == ("tool_result", "Grep") and parser.calls == {}


def test_codex_legacy_without_envelope() -> None:
    records = [
        {"id": "c27a914d", "timestamp": "2025-08-20T13:20:47.060Z", "instructions": None},
        {"record_type": "state"},
        {
            "type": "message",
            "id": None,
            "role": "user",
            "content": [{"type": "input_text", "text": "list the files"}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {
            "type": "function_call",
            "name": "shell",
            "arguments": '{"command":["ls"]}',
            "call_id": "c1",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "README.md"},
        {
            "type": "local_shell_call",
            "status": "completed",
            "action": {"type": "exec", "command": ["git", "status"]},
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "One file."}],
        },
        {"record_type": "state"},
    ]
    messages, stats, fmt = parse_lines(numbered(records))
    assert fmt == CODEX
    assert texts(messages) == [
        (3, "user", "text", "list the files"),
        (5, "assistant", "tool_call", "tool: shell `ls`"),
        (6, "tool", "tool_result", "README.md"),
        (7, "assistant", "tool_call", "tool: shell `git status`"),
        (8, "assistant", "text", "One file."),
    ]
    assert stats.skipped_meta == 3 and stats.dropped_thinking == 1


# --- OpenClaw ------------------------------------------------------------------------------------

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


def test_openclaw() -> None:
    messages, stats, fmt = parse_lines(numbered(OPENCLAW_RECORDS))
    assert fmt == OPENCLAW
    assert texts(messages) == [
        (3, "user", "text", "What is in notes.md?"),
        (4, "assistant", "text", "Let me look."),
        (4, "assistant", "tool_call", "tool: read notes.md"),
        (5, "tool", "tool_result", "# Notes\nbuy milk"),
        (6, "user", "tool_call", "tool: bash `date`"),
        (6, "tool", "tool_result", "Fri Feb  6"),
        (7, "system", "text", "User asked about notes."),  # the compaction summary
        (9, "assistant", "text", "It says: buy milk."),
    ]
    assert stats.skipped_meta == 3 and stats.dropped_thinking == 1 and stats.skipped_unknown == 0
    assert messages[0].timestamp == "2026-02-06T07:49:01.000Z"
    # A record with only the message's epoch-ms timestamp still gets an ISO time.
    assert messages[4].timestamp.startswith("2026-02-06T")
    assert messages[6].timestamp == ""


# --- generic -------------------------------------------------------------------------------------


@needs_spotter
def test_locomo_generic() -> None:
    path = LOCOMO / "conv-26" / "session_01.jsonl"
    messages, stats, fmt = parse_file(path)
    lines = path.read_text().splitlines()
    assert fmt == GENERIC
    assert len(messages) == len(lines) == stats.lines
    first = json.loads(lines[0])
    assert messages[0] == Message(
        1, first["role"], first["content"], "text", first["timestamp"], first["speaker"]
    )
    assert [m.line for m in messages] == list(range(1, len(lines) + 1))


def test_generic_inline() -> None:
    records = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": [{"type": "text", "text": "weather?"}, {"type": "image_url"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"query": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "sunny"},
        {"role": "Human", "name": "ann", "content": "thanks"},
    ]
    messages, stats, fmt = parse_lines(numbered(records))
    assert fmt == GENERIC
    assert texts(messages) == [
        (2, "user", "text", "weather?"),
        (3, "assistant", "tool_call", "tool: get_weather Paris"),
        (4, "tool", "tool_result", "sunny"),
        (5, "user", "text", "thanks"),
    ]
    assert messages[-1].name == "ann" and stats.skipped_meta == 1


# --- detection -----------------------------------------------------------------------------------


def test_detect_format() -> None:
    assert detect_format([]) == UNKNOWN
    assert detect_format([{"foo": 1}, {"bar": 2}]) == UNKNOWN
    assert detect_format(CODEX_RECORDS) == CODEX
    assert detect_format(OPENCLAW_RECORDS) == OPENCLAW
    assert detect_format([{"role": "user", "content": "hi"}]) == GENERIC
    claude = {"type": "user", "message": {"role": "user", "content": "hi"}}
    assert detect_format([{"type": "file-history-snapshot"}, claude]) == CLAUDE_CODE
    assert detect_format([{"id": "x", "timestamp": "t", "instructions": None}]) == CODEX


def test_explicit_format_and_bad_name() -> None:
    records = [{"role": "user", "content": "hi"}]
    messages, stats, fmt = parse_lines(numbered(records), fmt=CODEX)
    assert fmt == CODEX and messages == [] and stats.skipped_unknown == 1
    with pytest.raises(ValueError):
        TranscriptParser("nope")


# --- malformed input -----------------------------------------------------------------------------


def test_malformed_lines_are_counted_and_neighbours_kept() -> None:
    good = {"type": "user", "message": {"role": "user", "content": "hello"}}
    lines = [
        (1, b"not json at all"),
        (2, json.dumps(good).encode()),
        (3, b'{"type": "user", "message": {"role": "user", "content": "trunc'),
        (4, b"[1, 2, 3]"),
        (5, b"42"),
        (6, b""),
        (7, b"   \r"),
        (8, b'{"type": "user", "message": {"content": "\xff\xfe bad utf-8"}}'),
        (9, b"[" * 900),
        (
            10,
            json.dumps(
                {"type": "user", "message": {"role": "user", "content": "x" * 2000}}
            ).encode(),
        ),
        (11, json.dumps({"type": "user", "message": "not a dict"}).encode()),
        (
            12,
            json.dumps(
                {
                    "type": "assistant",
                    "message": {"content": [{"type": "text", "text": 5}, 7, None]},
                }
            ).encode(),
        ),
        (13, json.dumps({"type": "user", "message": {"role": "user", "content": "bye"}}).encode()),
    ]
    parser = TranscriptParser(max_line_bytes=1000)
    messages = parser.feed(lines)
    stats = parser.stats
    assert texts(messages) == [(2, "user", "text", "hello"), (13, "user", "text", "bye")]
    assert parser.fmt == CLAUDE_CODE
    assert stats.lines == 13 and stats.blank == 2 and stats.skipped_huge == 1
    assert stats.skipped_invalid == 6  # 1, 3, 4, 5, 8 (bad UTF-8), 9 (nesting)
    assert stats.skipped_unknown == 1  # 11; 12 is known but holds nothing usable
    assert stats.messages == 2


def test_parser_keeps_format_across_calls() -> None:
    lines = numbered(OPENCLAW_RECORDS)
    whole, _, _ = parse_lines(lines)
    parser = TranscriptParser()
    first = parser.feed(lines[:1])  # just the session header
    assert parser.fmt == OPENCLAW and first == []
    rest = parser.feed(lines[1:5]) + parser.feed(lines[5:])
    assert rest == whole
    assert parser.stats.lines == len(lines) and parser.stats.messages == len(whole)
    parser.reset()
    assert parser.fmt == UNKNOWN and parser.stats.lines == 0


def test_unknown_until_identified() -> None:
    parser = TranscriptParser()
    assert parser.feed([(1, b'{"foo": 1}')]) == []
    assert parser.fmt == UNKNOWN and parser.stats.skipped_unknown == 1
    assert texts(parser.feed([(2, b'{"role": "user", "content": "hi"}')])) == [
        (2, "user", "text", "hi")
    ]
    assert parser.fmt == GENERIC


# --- redaction and tool results ------------------------------------------------------------------


def test_secrets_are_redacted_in_messages() -> None:
    key = "sk-proj-" + "Ab1" * 15
    records = [
        {"role": "user", "content": f"my key is {key}"},
        {"role": "tool", "content": "x" * 385 + " password=hunter2hunter2 " + "y" * 500},
    ]
    messages, _, _ = parse_lines(numbered(records), tool_result_chars=400)
    assert key not in messages[0].text and "[REDACTED:openai_key]" in messages[0].text
    assert "hunter2" not in messages[1].text
    assert messages[1].text.endswith("more chars)")
    assert "[REDACTED:password]" in messages[1].text  # the token is never cut in half
    plain, _, _ = parse_lines(numbered(records), redact=False)
    assert key in plain[0].text


def test_tool_result_chars() -> None:
    records = [{"role": "tool", "content": "abcdefghij" * 100}]
    (message,), _, _ = parse_lines(numbered(records), tool_result_chars=50)
    assert message.text == "abcdefghij" * 5 + " … (950 more chars)"
    assert parse_lines(numbered(records), tool_result_chars=0)[0] == []


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("Bash", {"command": "git status", "description": "x"}, "tool: Bash `git status`"),
        ("Read", {"file_path": "src/app.py", "limit": 5}, "tool: Read src/app.py"),
        ("Glob", {"pattern": "**/*.md"}, "tool: Glob `**/*.md`"),
        ("WebFetch", {"url": "https://x.org", "prompt": "p"}, "tool: WebFetch https://x.org"),
        ("WebSearch", {"query": "xterm tmux"}, "tool: WebSearch xterm tmux"),
        ("Task", {"description": "Explore", "prompt": "long"}, "tool: Task Explore"),
        ("TodoWrite", {"todos": [{"content": "a"}]}, "tool: TodoWrite"),
        ("shell", '{"command": ["bash", "-lc", "ls\\n  -la"]}', "tool: shell `ls -la`"),
        (
            "shell",
            {"command": ["apply_patch", "*** Begin Patch\n*** Add File: a.py\n"]},
            "tool: shell `a.py`",
        ),
        ("custom", "free form\nsecond line", "tool: custom free form"),
        (None, None, "tool: tool"),
    ],
)
def test_tool_line(name: Any, args: Any, expected: str) -> None:
    assert tool_line(name, args) == expected


def test_secret_cut_by_the_tool_line_limit_is_still_redacted() -> None:
    token = "ghp_" + "a1B2" * 9
    command = "echo " + "x" * 180 + f" && git push https://{token}@github.com/a/b"
    records = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"function": {"name": "Bash", "arguments": json.dumps({"command": command})}}
            ],
        }
    ]
    (message,), _, _ = parse_lines(numbered(records))
    assert message.kind == "tool_call" and message.text.split("\n")[0].endswith("…`")
    assert "ghp_" not in message.text and "a1B2" not in message.text
    assert "github.com/a/b" in message.text  # the full command follows the summary


def test_tool_line_is_bounded() -> None:
    text = tool_line("Bash", {"command": "echo " + "word " * 200})
    assert len(text) <= len("tool: Bash ``") + 200 and text.endswith("…`")


def _mutate(value: Any, rng: random.Random) -> Any:
    if rng.random() < 0.15:
        return rng.choice([None, 0, -1.5, True, "", "x", [], {}, [None], {"type": None}])
    if isinstance(value, dict):
        return {k: _mutate(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        return [_mutate(v, rng) for v in value]
    return value


def test_parsers_never_raise_on_odd_shapes() -> None:
    rng = random.Random(3)
    sources = [CODEX_RECORDS, OPENCLAW_RECORDS, [{"role": "user", "content": [{"type": "text"}]}]]
    claude = SIMONW / "sample_session.jsonl"
    if claude.exists():
        sources.append([json.loads(line) for line in claude.read_text().splitlines()])
    for records in sources:
        fmt = detect_format(records)
        for _ in range(100):
            mutated = [_mutate(r, rng) for r in records]
            for forced in (fmt, None):
                messages, stats, _ = parse_lines(numbered(mutated), fmt=forced)
                assert stats.lines == len(records)
                assert all(isinstance(m.text, str) and m.text for m in messages)


# --- Claude Code: compaction summaries, fuller tool output, hook reminders (issue 13) ----------


def _user(content: Any, **flags: Any) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": content}, **flags}


def test_claude_compact_summary_is_indexed() -> None:
    summary = "This session is being continued from a previous conversation.\n\nrender_pane_grid"
    records = [
        _user(summary, isCompactSummary=True, isVisibleInTranscriptOnly=True),
        {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"},
    ]
    messages, stats, _ = parse_lines(numbered(records))
    assert texts(messages) == [(1, "system", "text", summary)]
    assert stats.skipped_meta == 1  # the boundary marker


def _bash_result(shown: str, stdout: str, stderr: str = "") -> dict[str, Any]:
    block = {"tool_use_id": "t1", "type": "tool_result", "content": shown, "is_error": False}
    return {
        "type": "user",
        "message": {"role": "user", "content": [block]},
        "toolUseResult": {"stdout": stdout, "stderr": stderr, "interrupted": False},
    }


def _bash_call() -> dict[str, Any]:
    call = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "npm test"}}
    return {"type": "assistant", "message": {"role": "assistant", "content": [call]}}


def test_claude_persisted_output_indexes_the_whole_stdout_once() -> None:
    stdout = "\x1b[1m RUN \x1b[22m v4\n" + "ok line\n" * 400 + "tail_only_identifier passed\n"
    shown = (
        "<persisted-output>\nOutput too large (3KB). Full output saved to: "
        "/home/u/.claude/projects/p/s/tool-results/toolu_1.txt\n\n"
        f"Preview (first 2KB):\n{stdout[:2048]}\n...\n</persisted-output>"
    )
    messages, _, _ = parse_lines(numbered([_bash_call(), _bash_result(shown, stdout)]))
    (result,) = [m for m in messages if m.kind == "tool_result"]
    assert result.tool == "Bash" and "tail_only_identifier" in result.text
    assert result.text.startswith("Output too large (3KB). Full output saved to: /home/u/")
    assert result.text.count("RUN") == 1 and "Preview (first" not in result.text  # once
    assert "\x1b" not in result.text


def test_claude_tool_use_result_not_longer_changes_nothing() -> None:
    same_text = "3 passed"
    messages, _, _ = parse_lines(numbered([_bash_call(), _bash_result(same_text, "3 passed\n")]))
    assert [m.text for m in messages if m.kind == "tool_result"] == ["3 passed"]
    # An edit's echo (originalFile, the whole file before it) is not what the tool returned.
    edit = _bash_result("The file a.py has been updated.", "")
    edit["toolUseResult"] = {"filePath": "a.py", "originalFile": "x = 1\n" * 500}
    messages, _, _ = parse_lines(numbered([_bash_call(), edit]))
    assert [m.text for m in messages if m.kind == "tool_result"] == [
        "The file a.py has been updated."
    ]


def test_claude_meta_records_hooks_kept_skills_and_caveats_out() -> None:
    hook = (
        "<system-reminder>\nPostToolUse:Edit hook additional context: [COMPILE ERROR]\n"
        "    error: undefined function find_transcript_rows/2\n</system-reminder>"
    )
    skill = [{"type": "text", "text": "Base directory for this skill: /x/skills/s\n\n# Skill"}]
    records = [
        _user(hook, isMeta=True),
        _user(skill, isMeta=True),
        _user("<local-command-caveat>Caveat: do not respond</local-command-caveat>", isMeta=True),
        _user(hook.replace("PostToolUse:Edit", "PreToolUse:Bash")),  # unflagged: the same
    ]
    messages, stats, _ = parse_lines(numbered(records))
    assert [(m.line, m.kind, m.tool) for m in messages] == [
        (1, "tool_result", "hook"),
        (4, "tool_result", "hook"),
    ]
    assert messages[0].text.startswith("PostToolUse:Edit hook additional context")
    assert messages[0].text.endswith("find_transcript_rows/2")
    assert stats.skipped_meta == 2
