"""Claude Code transcripts: real sessions from the benchmark data, inline records, and
compaction summaries, fuller tool output and hook reminders (issue 13)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import BENCH
from recalld.ingest.sessions.formats import CLAUDE_CODE, parse_file, parse_lines
from session_formats_support import SIMONW, needs_spotter, numbered, texts

SPOTTER = BENCH / "transcripts" / "spotter"
MAIN_SESSIONS = sorted(p for p in SPOTTER.glob("*.jsonl") if re.match(r"[0-9a-f]{8}-", p.name))


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
