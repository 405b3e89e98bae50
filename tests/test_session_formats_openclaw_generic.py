"""OpenClaw transcripts and the generic role/content format (LoCoMo sessions, inline
records)."""

from __future__ import annotations

import json

from conftest import BENCH
from recalld.ingest.sessions.formats import GENERIC, OPENCLAW, Message, parse_file, parse_lines
from session_formats_support import OPENCLAW_RECORDS, needs_spotter, numbered, texts

LOCOMO = BENCH / "locomo-transcripts" / "corpus"


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
