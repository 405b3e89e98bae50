"""Tool calls and results in transcripts: summary lines, decoded arguments, results
named after their call, truncated output, and secrets redacted in messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from recalld.ingest.sessions.formats import TranscriptParser, parse_lines, tool_line
from session_formats_support import numbered


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
