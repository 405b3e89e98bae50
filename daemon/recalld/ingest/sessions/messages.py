"""What a transcript parse yields (:class:`Message`, :class:`ParseStats`) and the builder that
every format's record reader fills (:class:`MessageBuilder`): text, whole tool calls, tool results
cut at ``tool_result_chars``, thinking on request, and redaction of what is kept."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from recalld.ingest.sessions.content import (
    EXEC_HEADER,
    LINENO,
    call_text,
    clean,
    plain,
    same,
    short,
)
from recalld.ingest.sessions.redaction import redact

KINDS = ("text", "tool_call", "tool_result", "thinking", "meta")

#: Lines longer than this are skipped unparsed (a pasted image, a runaway tool output).
MAX_LINE_BYTES = 5 * 1024 * 1024
#: Default cap on the kept text of one tool result: whole, up to the longest line parsed.
TOOL_RESULT_CHARS = MAX_LINE_BYTES
#: Tool calls remembered for naming the results that arrive later (delta sync keeps them).
MAX_OPEN_CALLS = 256
# Redaction runs on a window a bit larger than the kept head so that a secret cut by the head is
# still recognised whole (a PEM block is ~3 KB).
_REDACT_MARGIN = 4096
# A result at most this much over the limit is kept whole: cutting it would save less than the
# "… (N more chars)" marker costs.
_TRUNCATE_SLACK = 40


@dataclass(frozen=True, slots=True)
class Message:
    """One indexed unit of a transcript.

    ``line`` is the 1-based JSONL line the message came from (one line can yield several
    messages: text plus tool calls). ``role``: ``user``, ``assistant``, ``tool`` (tool results)
    or ``system`` (meta). ``kind``: one of :data:`KINDS`. ``timestamp``: the record's ISO time,
    or ``""``. ``name``: the speaker's name when the format has one (generic ``speaker``).
    ``tool``: the tool's name for tool calls and results (``""`` when a result's call is unknown).
    """

    line: int
    role: str
    text: str
    kind: str
    timestamp: str = ""
    name: str = ""
    tool: str = ""  # tool calls and results: the tool's name


@dataclass(slots=True)
class ParseStats:
    """Counts of what a parse saw; ``lines`` counts every line fed, blank ones included."""

    lines: int = 0
    messages: int = 0
    blank: int = 0
    skipped_invalid: int = 0  # not JSON, or not a JSON object
    skipped_unknown: int = 0  # valid JSON the format does not know
    skipped_huge: int = 0  # longer than max_line_bytes
    skipped_meta: int = 0  # metadata records (summaries, system, progress, session headers...)
    dropped_thinking: int = 0  # thinking blocks left out (include_thinking=False)

    def add(self, other: ParseStats) -> None:
        """Add ``other``'s counts to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(slots=True)
class MessageBuilder:
    """Collects the messages of the records fed to a format reader, with their line and time."""

    include_thinking: bool
    tool_result_chars: int
    redact: bool
    include_meta: bool
    stats: ParseStats
    calls: dict[str, str] = field(default_factory=dict)  # call id -> tool name
    messages: list[Message] = field(default_factory=list)
    line: int = 0
    timestamp: str = ""

    def _add(self, role: str, text: str, kind: str, name: str = "") -> None:
        if self.redact:
            text = redact(text)
        self.messages.append(Message(self.line, role, text, kind, self.timestamp, name))

    def tool_of(self, call_id: Any) -> str:
        """The name of the tool whose call had this id ("" when unknown)."""
        return self.calls.pop(call_id, "") if isinstance(call_id, str) else ""

    def text(self, role: str, content: Any, name: str = "") -> None:
        text = clean(plain(content))
        if text:
            self._add(role, text, "text", name)

    def call(self, name: Any, args: Any, role: str = "assistant", call_id: Any = None) -> None:
        text = call_text(name, args, redact if self.redact else same)
        tool = short(str(name), 60) if name else "tool"
        if isinstance(call_id, str) and call_id:
            self.calls[call_id] = tool
            while len(self.calls) > MAX_OPEN_CALLS:  # calls whose result never came
                del self.calls[next(iter(self.calls))]
        self.messages.append(Message(self.line, role, text, "tool_call", self.timestamp, tool=tool))

    def result(self, content: Any, error: bool = False, tool: str = "") -> None:
        limit = self.tool_result_chars
        if limit <= 0:
            return
        text = plain(content)
        if text.startswith('{"output":'):
            with contextlib.suppress(ValueError):  # older Codex: {"output": ..., "metadata": ...}
                text = plain(json.loads(text))
        if (header := EXEC_HEADER.match(text)) is not None:
            code = header.group(1)
            text = (
                text[header.end() :] if code == "0" else f"exit code {code}\n{text[header.end() :]}"
            )
        text = clean(LINENO.sub("", text) if "\u2192" in text else text)
        if error:
            text = f"error: {text}"
        if not text:
            return
        head = text[: limit + _REDACT_MARGIN]
        if self.redact:
            head = redact(head)
        if len(text) > limit + _TRUNCATE_SLACK:
            cut = head[:limit]
            token = head.rfind("[REDACTED:", 0, limit + len("[REDACTED:"))
            if 0 <= token < limit and (end := head.find("]", token)) >= limit:
                cut = head[: end + 1]  # never cut a redaction token in half
            head = f"{cut.rstrip()} … ({len(text) - limit} more chars)"
        self.messages.append(
            Message(self.line, "tool", head, "tool_result", self.timestamp, tool=tool)
        )

    def thinking(self, content: Any) -> None:
        text = clean(plain(content))
        if not self.include_thinking:
            self.stats.dropped_thinking += 1
        elif text:
            self._add("assistant", text, "thinking")

    def meta(self, content: Any = None) -> None:
        if self.include_meta and (text := clean(plain(content))):
            self._add("system", text, "meta")

    def blocks(self, content: Any, role: str, name: str = "") -> None:
        """Walk a content value: a string, or a list of typed blocks of any known vocabulary."""
        if not isinstance(content, list):
            self.text(role, content, name)
            return
        for block in content:
            if isinstance(block, str):
                self.text(role, block, name)
                continue
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind in ("text", "input_text", "output_text"):
                if isinstance(text := block.get("text"), str):
                    self.text(role, text, name)
            elif kind in ("tool_use", "server_tool_use", "toolCall", "function_call"):
                args = block.get("input", block.get("arguments"))
                self.call(block.get("name"), args, role, block.get("id", block.get("call_id")))
            elif kind == "tool_result":
                tool = self.tool_of(block.get("tool_use_id"))
                self.result(block.get("content"), bool(block.get("is_error")), tool)
            elif kind in ("thinking", "reasoning", "redacted_thinking"):
                self.thinking(block.get("thinking", block.get("text")))


# Parsers return one of these; records yielding no message (a dropped thinking block) are _OK.
OK, META, UNKNOWN_RECORD = 0, 1, 2
Reader = Callable[[Mapping[str, Any], MessageBuilder], int]
