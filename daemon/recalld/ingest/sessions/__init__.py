"""Agent session transcripts: parse, redact, tail and chunk them. Pure functions, no I/O but files.

One transcript file goes through the parts like this (what the indexer does on a change)::

    delta = read_delta(path, state)                  # tail: complete new lines only
    if delta.reset:                                  # replaced, truncated or rewritten
        drop the file's chunks; parser.reset(); chunker = SessionChunker(count)
    messages = parser.feed(delta.lines)              # formats: TranscriptParser, redacted text
    final = chunker.feed(messages)                   # chunking: chunks that will not change
    tail = chunker.pending()                         # open last chunk(s), replaced as it grows
    state = replace(delta.state, messages=delta.state.messages + len(messages))

Persist ``state.to_dict()`` and ``chunker.save()`` with the file's row to resume after a restart
without re-reading the transcript. Raw lines that ``get`` returns go through :func:`redact_line`.
"""

from recalld.ingest.sessions.chunking import SessionChunk, SessionChunker, chunk_messages
from recalld.ingest.sessions.formats import (
    CLAUDE_CODE,
    CODEX,
    FORMATS,
    GENERIC,
    OPENCLAW,
    UNKNOWN,
    Message,
    ParseStats,
    TranscriptParser,
    detect_format,
    parse_file,
    parse_lines,
    tool_line,
)
from recalld.ingest.sessions.redaction import redact, redact_line
from recalld.ingest.sessions.tail import Delta, TailState, read_delta, split_lines

__all__ = [
    "CLAUDE_CODE",
    "CODEX",
    "FORMATS",
    "GENERIC",
    "OPENCLAW",
    "UNKNOWN",
    "Delta",
    "Message",
    "ParseStats",
    "SessionChunk",
    "SessionChunker",
    "TailState",
    "TranscriptParser",
    "chunk_messages",
    "detect_format",
    "parse_file",
    "parse_lines",
    "read_delta",
    "redact",
    "redact_line",
    "split_lines",
    "tool_line",
]
