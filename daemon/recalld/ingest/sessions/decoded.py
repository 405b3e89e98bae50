"""``get`` with ``decoded``: the readable text of transcript lines instead of their raw JSON.

An agent that found a hit in a 2 MB tool result wants to read the result, not a JSON string full
of ``\\n`` and ``\\u2192`` escapes. Each JSONL line becomes the text the index saw for it, whole
and redacted: ``user: ...`` / ``assistant: ...`` messages, a tool call's summary line followed by
its arguments, a tool result's output. A line that is not valid JSON (cut by the get size limit,
or corrupt) is returned raw, redacted as ``get`` always does.
"""

from __future__ import annotations

from recalld.ingest.sessions.formats import Message, TranscriptParser
from recalld.ingest.sessions.redaction import redact_line
from recalld.ingest.sessions.redaction_tally import served_here

__all__ = ["decode_line", "render"]


def render(message: Message) -> str:
    """One decoded message as text (tool content as is: it says what it is)."""
    if message.kind == "tool_call":
        return message.text
    if message.kind == "tool_result":
        head = f"tool output ({message.tool}):" if message.tool else "tool output:"
        return f"{head}\n{message.text}"
    return f"{message.name or message.role}: {message.text}"


def decode_line(raw: str) -> str:
    """The decoded, redacted text of one raw transcript line (see the module docstring)."""
    parser = TranscriptParser(include_thinking=True, include_meta=True, redact=True)
    with served_here():  # the indexing parser, but these lines are served
        messages = parser.feed([(1, raw)])
    if not messages:
        if parser.stats.skipped_invalid or parser.stats.skipped_huge:
            return redact_line(raw)
        return ""  # a record without text (progress, file snapshots...)
    return "\n".join(render(m) for m in messages)
