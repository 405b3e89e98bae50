"""Telling transcript formats apart, and malformed input: bad lines counted with their
neighbours kept, a parser fed in pieces, and no odd shape that makes a parser raise."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from recalld.ingest.sessions.formats import (
    CLAUDE_CODE,
    CODEX,
    GENERIC,
    OPENCLAW,
    UNKNOWN,
    TranscriptParser,
    detect_format,
    parse_lines,
)
from session_formats_support import CODEX_RECORDS, OPENCLAW_RECORDS, SIMONW, numbered, texts


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
