"""Agent transcript formats: detection, and parsers from JSONL lines to :class:`Message` records.

Formats (detected per file from its first records, see :func:`detect_format`):

- ``claude_code``: ``~/.claude/projects/**/*.jsonl``. ``user``/``assistant`` records whose
  ``message.content`` is a string or a list of text / tool_use / tool_result / thinking blocks;
  ``summary``, ``system``, ``progress``, ``file-history-snapshot``... records are metadata.
- ``codex``: ``~/.codex/sessions/**/rollout-*.jsonl``. ``session_meta``, ``turn_context``,
  ``event_msg`` and ``response_item`` envelopes (payload ``message``, ``function_call``,
  ``function_call_output``, ``reasoning``...), and the older rollouts with bare items, a header
  line and ``{"record_type": "state"}`` markers. ``event_msg`` records repeat what the
  ``response_item`` records say and are skipped as metadata.
- ``openclaw``: OpenClaw / pi-coding-agent sessions. ``session`` header, ``message`` entries whose
  ``message.role`` is user / assistant (text, thinking, toolCall blocks) / toolResult /
  bashExecution, and ``compaction``, ``model_change``, ``custom``... entries.
- ``gemini_cli``: Gemini CLI's ``~/.gemini/tmp/*/chats/session-*.jsonl`` (header, messages
  appended again as they change, ``$set`` updates): :mod:`recalld.ingest.sessions.gemini_reader`.
- ``generic``: one ``{"role", "content"}`` object a line, content a string or a list of
  ``{"type": "text", "text"}`` blocks; ``speaker``/``name`` kept as :attr:`Message.name`.

Kept: user and assistant text; every tool call whole (a one-line summary such as
``tool: Bash `git status``` followed by every argument in full: commands, paths, edit strings,
written files, patches); every tool result whole up to ``tool_result_chars``, with the name of
the tool that produced it; thinking only on request. Dropped and counted: metadata records,
invalid / unknown / huge lines. Parsing never raises on file content.

Compaction summaries (Claude Code ``isCompactSummary`` and ``summary`` records, Codex
``compacted``, OpenClaw ``compaction`` / ``branch_summary``) are kept as ``system`` text: they are
what the agent knew from then on. Of Claude Code's ``isMeta`` records only a hook's reminder is
kept, as a ``hook`` tool result: it is the output of a command run on the agent's work (compile
errors, lint findings), different each time. Injected skill text and caveats stay out: fixed
text (a skill is a file on disk) repeated in every session that loads it, which would crowd
every search for its words with copies. A result whose ``toolUseResult`` holds more output
than the model's preview is indexed from ``toolUseResult`` (:func:`content.fuller_result`).

The message builder is in :mod:`recalld.ingest.sessions.messages`, one reader per format in
:mod:`recalld.ingest.sessions.readers`; this module detects the format and drives the readers.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from recalld.ingest.sessions.content import call_text, record_time, tool_line
from recalld.ingest.sessions.gemini_reader import GEMINI_CLI, is_gemini
from recalld.ingest.sessions.messages import (
    KINDS,
    MAX_LINE_BYTES,
    META,
    TOOL_RESULT_CHARS,
    UNKNOWN_RECORD,
    Message,
    MessageBuilder,
    ParseStats,
)
from recalld.ingest.sessions.readers import (
    CLAUDE_CODE,
    CLAUDE_META,
    CODEX,
    CODEX_ITEMS,
    CODEX_META,
    GENERIC,
    OPENCLAW,
    OPENCLAW_META,
    READERS,
)

__all__ = [
    "CLAUDE_CODE",
    "CODEX",
    "FORMATS",
    "GEMINI_CLI",
    "GENERIC",
    "KINDS",
    "OPENCLAW",
    "TOOL_RESULT_CHARS",
    "UNKNOWN",
    "Message",
    "ParseStats",
    "TranscriptParser",
    "call_text",
    "detect_format",
    "parse_file",
    "parse_lines",
    "tool_line",
]  # fmt: skip

UNKNOWN = "unknown"
#: Known formats, in the order that breaks ties in :func:`detect_format`.
FORMATS = (CLAUDE_CODE, CODEX, OPENCLAW, GEMINI_CLI, GENERIC)
#: Valid records :func:`detect_format` looks at.
DETECT_RECORDS = 20


# --- detection -----------------------------------------------------------------------------------


def _classify(rec: Mapping[str, Any]) -> str | None:
    """The format one record is evidence for, or None."""
    kind = rec.get("type")
    if not isinstance(kind, str | None):
        return None
    if is_gemini(rec):
        return GEMINI_CLI
    nested = isinstance(rec.get("message"), Mapping)
    if kind in ("user", "assistant") and nested:
        return CLAUDE_CODE
    if kind in CLAUDE_META and kind not in ("result", "attachment"):
        return CLAUDE_CODE
    if kind in CODEX_META or kind == "response_item" or "record_type" in rec:
        return CODEX
    if kind in OPENCLAW_META or (kind == "message" and nested):
        return OPENCLAW
    if kind in CODEX_ITEMS:
        return CODEX
    if kind is None:
        if isinstance(rec.get("role"), str) and ("content" in rec or "tool_calls" in rec):
            return GENERIC
        if "id" in rec and "timestamp" in rec and "instructions" in rec:
            return CODEX
    return None


def detect_format(records: Iterable[Mapping[str, Any]]) -> str:
    """The format of a file from its first records (parsed JSON objects), or :data:`UNKNOWN`.

    Each of the first :data:`DETECT_RECORDS` records votes for the format its shape belongs to;
    the most votes win, ties go to the earlier entry of :data:`FORMATS`.
    """
    votes: Counter[str] = Counter()
    for i, rec in enumerate(records):
        if i >= DETECT_RECORDS:
            break
        if isinstance(rec, Mapping) and (fmt := _classify(rec)) is not None:
            votes[fmt] += 1
    if not votes:
        return UNKNOWN
    return max(FORMATS, key=lambda f: (votes[f], -FORMATS.index(f)))


# --- parsing -------------------------------------------------------------------------------------


class TranscriptParser:
    """Parses a transcript in pieces, keeping its format across calls (for delta sync).

    The format is detected from the first records fed unless given; while it is unknown, each
    record is tried on its own and the first one that identifies a format fixes it. ``stats``
    accumulates over all calls.
    """

    def __init__(
        self,
        fmt: str | None = None,
        *,
        include_thinking: bool = False,
        tool_result_chars: int = TOOL_RESULT_CHARS,
        redact: bool = True,
        include_meta: bool = False,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        if fmt is not None and fmt not in READERS and fmt != UNKNOWN:
            raise ValueError(f"unknown transcript format {fmt!r}; known: {', '.join(FORMATS)}")
        self.fmt = fmt or UNKNOWN
        self.stats = ParseStats()
        #: Open tool calls (id -> tool name): save it with the format to name later results.
        self.calls: dict[str, str] = {}
        self._options = (include_thinking, tool_result_chars, redact, include_meta)
        self._max_line_bytes = max_line_bytes

    def feed(self, lines: Iterable[tuple[int, bytes | str]]) -> list[Message]:
        """Parse ``(line_number, raw_line)`` pairs; returns their messages in order."""
        stats = ParseStats()
        records: list[tuple[int, Mapping[str, Any]]] = []
        for number, raw in lines:
            stats.lines += 1
            if len(raw) > self._max_line_bytes:
                stats.skipped_huge += 1
                continue
            if not raw.strip():
                stats.blank += 1
                continue
            try:
                rec = json.loads(raw)
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                stats.skipped_invalid += 1
                continue
            if isinstance(rec, dict):
                records.append((number, rec))
            else:
                stats.skipped_invalid += 1
        if self.fmt == UNKNOWN:
            self.fmt = detect_format(rec for _, rec in records)
        out = MessageBuilder(*self._options, stats=stats, calls=self.calls)
        for number, rec in records:
            fmt = self.fmt
            if fmt == UNKNOWN:
                fmt = self.fmt = _classify(rec) or UNKNOWN
                if fmt == UNKNOWN:
                    stats.skipped_unknown += 1
                    continue
            out.line, out.timestamp = number, record_time(rec)
            kept = len(out.messages)
            try:
                status = READERS[fmt](rec, out)
            except Exception:  # noqa: BLE001 - file content must never stop a sync: a record of a known type
                del out.messages[kept:]  # with fields of an unexpected shape counts as unknown
                status = UNKNOWN_RECORD
            if status == META:
                stats.skipped_meta += 1
            elif status == UNKNOWN_RECORD:
                stats.skipped_unknown += 1
        stats.messages = len(out.messages)
        self.stats.add(stats)
        return out.messages

    def reset(self) -> None:
        """Forget the format and the counts (the file was rewritten)."""
        self.fmt, self.stats, self.calls = UNKNOWN, ParseStats(), {}


def parse_lines(
    lines: Iterable[tuple[int, bytes | str]],
    *,
    fmt: str | None = None,
    include_thinking: bool = False,
    tool_result_chars: int = TOOL_RESULT_CHARS,
    redact: bool = True,
    include_meta: bool = False,
) -> tuple[list[Message], ParseStats, str]:
    """Parse numbered JSONL lines; returns ``(messages, stats, format)``.

    ``fmt`` forces a format (default: detected). ``tool_result_chars`` bounds the kept head of a
    tool result (0 drops results). ``redact`` replaces secrets in the kept text.
    ``include_meta`` keeps the text of metadata records (summaries...) as ``meta`` messages.
    """
    parser = TranscriptParser(
        fmt,
        include_thinking=include_thinking,
        tool_result_chars=tool_result_chars,
        redact=redact,
        include_meta=include_meta,
    )
    messages = parser.feed(lines)
    return messages, parser.stats, parser.fmt


def parse_file(path: str | Path, **options: Any) -> tuple[list[Message], ParseStats, str]:
    """:func:`parse_lines` over a whole file (tests, tools; the daemon reads deltas)."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the empty string after the final newline is not a line
    return parse_lines(enumerate(lines, start=1), **options)
