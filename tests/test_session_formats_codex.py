"""Codex transcripts: the sample session, the response_item envelope, whole calls with
named results, and the legacy format without an envelope."""

from __future__ import annotations

from recalld.ingest.sessions.formats import CODEX, parse_file, parse_lines
from session_formats_support import CODEX_RECORDS, SIMONW, needs_spotter, numbered, texts


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
