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
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from recalld.sessions.content import (
    EXEC_HEADER,
    LINENO,
    call_text,
    clean,
    fuller_result,
    plain,
    record_time,
    same,
    short,
    tool_line,
)
from recalld.sessions.redaction import redact

__all__ = [
    "CLAUDE_CODE",
    "CODEX",
    "FORMATS",
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

CLAUDE_CODE, CODEX, OPENCLAW, GENERIC, UNKNOWN = (
    "claude_code",
    "codex",
    "openclaw",
    "generic",
    "unknown",
)
#: Known formats, in the order that breaks ties in :func:`detect_format`.
FORMATS = (CLAUDE_CODE, CODEX, OPENCLAW, GENERIC)
KINDS = ("text", "tool_call", "tool_result", "thinking", "meta")

#: Lines longer than this are skipped unparsed (a pasted image, a runaway tool output).
MAX_LINE_BYTES = 5 * 1024 * 1024
#: Default cap on the kept text of one tool result: whole, up to the longest line parsed.
TOOL_RESULT_CHARS = MAX_LINE_BYTES
#: Tool calls remembered for naming the results that arrive later (delta sync keeps them).
MAX_OPEN_CALLS = 256
#: Valid records :func:`detect_format` looks at.
DETECT_RECORDS = 20
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


# --- the message builder shared by all formats ----------------------------------------------------


@dataclass(slots=True)
class _Out:
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
_OK, _META, _UNKNOWN = 0, 1, 2
_Parser = Callable[[Mapping[str, Any], _Out], int]

# --- Claude Code ---------------------------------------------------------------------------------

_CLAUDE_META = frozenset({"summary", "system", "progress", "file-history-snapshot",
                          "queue-operation", "custom-title", "result", "attachment"})  # fmt: skip
_CLAUDE_META_FLAGS = (
    "isMeta",
    "isCompactSummary",
    "isVisibleInTranscriptOnly",
    "isApiErrorMessage",
)
_TAG = re.compile(r"\s*<([a-z][a-z-]*)>")
# The reminder Claude Code injects with a hook's output: compile errors, lint findings.
_HOOK = re.compile(r"\s*<system-reminder>\s*[A-Z][A-Za-z]+(?::[\w.-]+)? hook \w")
_META_TAGS = frozenset(
    {"local-command-stdout", "local-command-stderr", "local-command-caveat",
     "task-notification", "system-reminder", "user-prompt-submit-hook"}
)  # fmt: skip


def _inner(text: str, tag: str) -> str:
    start = text.find(f"<{tag}>")
    end = text.find(f"</{tag}>", start)
    return text[start + len(tag) + 2 : end] if start != -1 and end != -1 else ""


def _claude_user_string(text: str, out: _Out) -> int:
    tag = m.group(1) if (m := _TAG.match(text)) is not None else ""
    if tag == "system-reminder" and _hook_output(text, out):
        return _OK
    if tag in _META_TAGS:
        out.meta(text)
        return _META
    if tag.startswith("command-"):  # a slash command: "/compact keep the API notes"
        out.text("user", f"{_inner(text, 'command-name')} {_inner(text, 'command-args')}")
    elif tag == "bash-input":  # "!" shell mode: the user ran a command
        out.call("Bash", {"command": _inner(text, "bash-input")}, "user")
    elif tag in ("bash-stdout", "bash-stderr"):
        out.result(f"{_inner(text, 'bash-stdout')}\n{_inner(text, 'bash-stderr')}", tool="Bash")
    else:
        out.text("user", text)
    return _OK


def _hook_output(text: str, out: _Out) -> bool:
    """Index a hook's reminder (``PostToolUse:Edit hook additional context: ...``) as its output."""
    if _HOOK.match(text) is None:
        return False
    out.result(_inner(text, "system-reminder") or text, tool="hook")
    return True


def _claude_flagged(rec: Mapping[str, Any], content: Any, out: _Out) -> int:
    """A record with a meta flag: a compaction summary or a hook's output is kept, not the rest."""
    if rec.get("isCompactSummary"):
        out.text("system", content)  # what the agent knew after compaction
        return _OK
    if rec.get("isMeta") and isinstance(content, str) and _hook_output(content, out):
        return _OK
    out.meta(content)
    return _META


def _claude(rec: Mapping[str, Any], out: _Out) -> int:
    kind = rec.get("type")
    if kind in ("user", "assistant"):
        message = rec.get("message")
        if not isinstance(message, Mapping):
            return _UNKNOWN
        content = message.get("content")
        if any(rec.get(flag) for flag in _CLAUDE_META_FLAGS):
            return _claude_flagged(rec, content, out)
        if kind == "user" and isinstance(content, str):
            return _claude_user_string(content, out)
        if kind == "user" and "toolUseResult" in rec:
            content = fuller_result(content, rec["toolUseResult"])
        out.blocks(content, kind)
        return _OK
    if kind == "summary":  # a session's title line
        out.text("system", rec.get("summary"))
        return _OK
    if kind in _CLAUDE_META:
        out.meta(None)
        return _META
    return _UNKNOWN


# --- Codex ---------------------------------------------------------------------------------------

_CODEX_META = frozenset({"session_meta", "turn_context", "event_msg", "compacted"})
_CODEX_ITEMS = frozenset({"message", "function_call", "function_call_output", "custom_tool_call",
                          "custom_tool_call_output", "local_shell_call", "web_search_call",
                          "reasoning", "ghost_snapshot"})  # fmt: skip
# Context Codex injects as "user" messages at the start of every session.
_CODEX_BOILERPLATE = ("<environment_context", "<user_instructions", "# AGENTS.md instructions",
                      "<permissions instructions", "<INSTRUCTIONS>")  # fmt: skip


def _codex_item(item: Mapping[str, Any], out: _Out) -> int:
    kind = item.get("type")
    if kind == "message":
        role, content = item.get("role"), item.get("content")
        if role == "user" and plain(content).lstrip().startswith(_CODEX_BOILERPLATE):
            role = "system"
        if role not in ("user", "assistant"):
            out.meta(content)
            return _META
        out.blocks(content, role)
    elif kind in ("function_call", "custom_tool_call"):
        args = item.get("arguments", item.get("input"))
        out.call(item.get("name"), args, call_id=item.get("call_id"))
    elif kind == "local_shell_call":
        out.call("shell", item.get("action"), call_id=item.get("call_id"))
    elif kind == "web_search_call":
        out.call("web_search", item.get("action"))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        out.result(item.get("output"), tool=out.tool_of(item.get("call_id")))
    elif kind == "reasoning":
        out.thinking(
            "\n".join(plain(item.get(k)) for k in ("summary", "content") if item.get(k)).strip()
        )
    elif kind == "ghost_snapshot":
        return _META
    else:
        return _UNKNOWN
    return _OK


def _codex(rec: Mapping[str, Any], out: _Out) -> int:
    kind = rec.get("type")
    if kind == "response_item":
        payload = rec.get("payload")
        return _codex_item(payload, out) if isinstance(payload, Mapping) else _UNKNOWN
    if kind in _CODEX_META:
        payload = rec.get("payload")
        if kind == "compacted" and isinstance(payload, Mapping):
            out.text("system", payload.get("message"))  # the summary the session went on from
            return _OK
        return _META
    if kind is None and ("record_type" in rec or ("id" in rec and "timestamp" in rec)):
        return _META  # legacy header line / state marker
    if kind in _CODEX_ITEMS and not isinstance(rec.get("message"), Mapping):
        return _codex_item(rec, out)  # legacy rollouts: bare items, no envelope
    return _UNKNOWN


# --- OpenClaw ------------------------------------------------------------------------------------

_OPENCLAW_META = frozenset(
    {"session", "model_change", "thinking_level_change", "compaction", "branch_summary",
     "custom", "custom_message", "label", "session_info"}
)  # fmt: skip


def _openclaw(rec: Mapping[str, Any], out: _Out) -> int:
    kind = rec.get("type")
    if kind in ("compaction", "branch_summary"):  # what the agent went on from
        out.text("system", rec.get("summary", rec.get("content")))
        return _OK
    if kind in _OPENCLAW_META:
        out.meta(rec.get("summary", rec.get("content")))
        return _META
    message = rec.get("message")
    if kind != "message" or not isinstance(message, Mapping):
        return _UNKNOWN
    role, content = message.get("role"), message.get("content")
    if role in ("user", "assistant"):
        out.blocks(content, role)
    elif role == "toolResult":
        tool = out.tool_of(message.get("toolCallId"))
        name = message.get("toolName")
        out.result(
            content, bool(message.get("isError")), tool or (name if isinstance(name, str) else "")
        )
    elif role == "bashExecution":  # the user ran a shell command ("!" prefix)
        out.call("bash", {"command": message.get("command")}, "user")
        out.result(message.get("output"), tool="bash")
    elif role in ("branchSummary", "compactionSummary"):
        out.text("system", message.get("summary", content))
    elif role in ("custom", "system"):
        out.meta(message.get("summary", content))
        return _META
    else:
        return _UNKNOWN
    return _OK


# --- generic {"role", "content"} -----------------------------------------------------------------

_ROLE_ALIASES = {"human": "user", "ai": "assistant", "model": "assistant", "bot": "assistant"}


def _generic(rec: Mapping[str, Any], out: _Out) -> int:
    role = rec.get("role")
    if not isinstance(role, str) or not ("content" in rec or "tool_calls" in rec):
        return _UNKNOWN
    role = _ROLE_ALIASES.get(role.lower(), role.lower())
    content = rec.get("content")
    if role in ("system", "developer"):
        out.meta(content)
        return _META
    if role in ("tool", "function", "toolresult"):
        tool = out.tool_of(rec.get("tool_call_id"))
        name = rec.get("name")
        out.result(content, tool=tool or (name if isinstance(name, str) else ""))
        return _OK
    name = next((v for k in ("speaker", "name") if isinstance(v := rec.get(k), str)), "")
    out.blocks(content, role, name)
    calls = rec.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():  # OpenAI chat format
        if isinstance(call, Mapping):
            fn = call.get("function", call)
            if isinstance(fn, Mapping):
                out.call(fn.get("name"), fn.get("arguments"), role, call.get("id"))
    return _OK


_PARSERS: dict[str, _Parser] = {
    CLAUDE_CODE: _claude,
    CODEX: _codex,
    OPENCLAW: _openclaw,
    GENERIC: _generic,
}


# --- detection -----------------------------------------------------------------------------------


def _classify(rec: Mapping[str, Any]) -> str | None:
    """The format one record is evidence for, or None."""
    kind = rec.get("type")
    if not isinstance(kind, str | None):
        return None
    nested = isinstance(rec.get("message"), Mapping)
    if kind in ("user", "assistant") and nested:
        return CLAUDE_CODE
    if kind in _CLAUDE_META and kind not in ("result", "attachment"):
        return CLAUDE_CODE
    if kind in _CODEX_META or kind == "response_item" or "record_type" in rec:
        return CODEX
    if kind in _OPENCLAW_META or (kind == "message" and nested):
        return OPENCLAW
    if kind in _CODEX_ITEMS:
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
        if fmt is not None and fmt not in _PARSERS and fmt != UNKNOWN:
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
        out = _Out(*self._options, stats=stats, calls=self.calls)
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
                status = _PARSERS[fmt](rec, out)
            except Exception:  # noqa: BLE001 - file content must never stop a sync: a record of a known type
                del out.messages[kept:]  # with fields of an unexpected shape counts as unknown
                status = _UNKNOWN
            if status == _META:
                stats.skipped_meta += 1
            elif status == _UNKNOWN:
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
