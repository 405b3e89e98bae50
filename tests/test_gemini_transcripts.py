"""Gemini CLI transcripts (``~/.gemini/tmp/*/chats/session-*.jsonl``), written the way Gemini CLI
0.61's ChatRecordingService writes them: a header, messages appended again as they change
(tokens, a tool call's result), ``$set`` updates."""

from __future__ import annotations

import json
from pathlib import Path

from recalld.ingest.sessions.formats import GEMINI_CLI, TranscriptParser, detect_format, parse_file

HEADER = {
    "sessionId": "0f3c2a9e-5d1b-4c7e-9a43-2b8e61d0c5f7",
    "projectHash": "9b1d" * 16,
    "startTime": "2026-11-30T09:12:03.114Z",
    "lastUpdated": "2026-11-30T09:12:03.114Z",
    "kind": "main",
}
USER = {
    "id": "b6b0e0f2-1",
    "timestamp": "2026-11-30T09:12:10.020Z",
    "type": "user",
    "content": [{"text": "Why does the tern importer drop rows with a NULL region?"}],
}
ANSWER = {
    "id": "c1d2-2",
    "timestamp": "2026-11-30T09:12:14.500Z",
    "type": "gemini",
    "content": "The importer filters NULL regions in load_rows(); I will check it.",
    "thoughts": [
        {
            "subject": "Reading the importer",
            "description": "look at load_rows",
            "timestamp": "2026-11-30T09:12:12.000Z",
        }
    ],
    "tokens": None,
    "model": "gemini-2.5-pro",
}
CALL = {
    "id": "read_file-1764493935-0",
    "name": "read_file",
    "args": {"absolute_path": "/src/tern/importer.py"},
    "status": "executing",
    "timestamp": "2026-11-30T09:12:15.000Z",
    "displayName": "ReadFile",
    "description": "Reads a file",
    "renderOutputAsMarkdown": True,
}
RESULT = [
    {
        "functionResponse": {
            "id": "read_file-1764493935-0",
            "name": "read_file",
            "response": {
                "output": "def load_rows(rows):\n    return [r for r in rows if r.region]"
            },
        }
    }
]


def session_lines() -> list[str]:
    """The records in the order Gemini CLI appends them for one question and one tool call."""
    tokens = {"input": 812, "output": 41, "cached": 0, "thoughts": 12, "tool": 0, "total": 865}
    tool_msg = {
        "id": "d3e4-3",
        "timestamp": "2026-11-30T09:12:15.000Z",
        "type": "gemini",
        "content": "",
        "toolCalls": [CALL],
        "thoughts": [],
        "model": "gemini-2.5-pro",
    }
    done_call = {**CALL, "status": "success", "result": RESULT, "resultDisplay": "Read 2 lines"}
    records = [
        HEADER,
        USER,
        {"$set": {"lastUpdated": "2026-11-30T09:12:10.021Z"}},
        ANSWER,
        {"$set": {"lastUpdated": "2026-11-30T09:12:14.501Z"}},
        {**ANSWER, "tokens": tokens},  # the same message again, now with its tokens
        tool_msg,
        {**tool_msg, "toolCalls": [done_call]},  # again, with the call's result
        {
            "id": "e5-4",
            "timestamp": "2026-11-30T09:12:20.000Z",
            "type": "info",
            "content": "Request cancelled.",
        },
        {"$set": {"summary": "tern importer NULL regions"}},
    ]
    return [json.dumps(r) for r in records]


def test_gemini_cli_session_is_read_once_per_message(tmp_path: Path) -> None:
    path = tmp_path / "session-2026-11-30T09-12-0f3c2a9e.jsonl"
    path.write_text("\n".join(session_lines()) + "\n")
    messages, stats, fmt = parse_file(path)
    assert fmt == GEMINI_CLI
    got = [(m.role, m.kind, m.text) for m in messages]
    assert got == [
        ("user", "text", "Why does the tern importer drop rows with a NULL region?"),
        ("assistant", "text", "The importer filters NULL regions in load_rows(); I will check it."),
        ("assistant", "tool_call", got[2][2]),
        ("tool", "tool_result", "def load_rows(rows):\n    return [r for r in rows if r.region]"),
    ]
    assert "read_file" in got[2][2] and "/src/tern/importer.py" in got[2][2]
    assert messages[3].tool == "read_file"
    assert messages[0].line == 2 and messages[3].line == 8  # the JSONL's own line numbers
    assert stats.skipped_unknown == 0 and stats.dropped_thinking == 1


def test_gemini_cli_repeats_across_delta_syncs_are_not_indexed_twice() -> None:
    lines = list(enumerate(session_lines(), start=1))
    parser = TranscriptParser()
    first = parser.feed(lines[:5])  # up to the answer's first copy
    calls = dict(parser.calls)  # what the sync saves with the file's state...
    later = TranscriptParser(parser.fmt)
    later.calls = calls  # ...and gives the next delta's parser
    rest = later.feed(lines[5:])
    assert [m.kind for m in first] == ["text", "text"]
    assert [m.kind for m in rest] == ["tool_call", "tool_result"]


def test_detection_does_not_take_other_formats_for_gemini() -> None:
    claude = {"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}}
    assert detect_format([claude]) == "claude_code"
    assert detect_format([{"role": "user", "content": "hi"}]) == "generic"
    assert detect_format([json.loads(x) for x in session_lines()[:2]]) == GEMINI_CLI
