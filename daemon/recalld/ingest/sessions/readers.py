"""One reader per transcript format: a JSONL record in, messages into a :class:`MessageBuilder`.

Each reader returns :data:`OK`, :data:`META` (a metadata record, counted and skipped) or
:data:`UNKNOWN_RECORD`. The formats themselves are described in
:mod:`recalld.ingest.sessions.formats`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from recalld.ingest.sessions.content import fuller_result, plain
from recalld.ingest.sessions.gemini_reader import GEMINI_CLI, read_gemini
from recalld.ingest.sessions.messages import META, OK, UNKNOWN_RECORD, MessageBuilder, Reader

CLAUDE_CODE, CODEX, OPENCLAW, GENERIC = "claude_code", "codex", "openclaw", "generic"

# --- Claude Code ---------------------------------------------------------------------------------

CLAUDE_META = frozenset({"summary", "system", "progress", "file-history-snapshot",
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


def _claude_user_string(text: str, out: MessageBuilder) -> int:
    tag = m.group(1) if (m := _TAG.match(text)) is not None else ""
    if tag == "system-reminder" and _hook_output(text, out):
        return OK
    if tag in _META_TAGS:
        out.meta(text)
        return META
    if tag.startswith("command-"):  # a slash command: "/compact keep the API notes"
        out.text("user", f"{_inner(text, 'command-name')} {_inner(text, 'command-args')}")
    elif tag == "bash-input":  # "!" shell mode: the user ran a command
        out.call("Bash", {"command": _inner(text, "bash-input")}, "user")
    elif tag in ("bash-stdout", "bash-stderr"):
        out.result(f"{_inner(text, 'bash-stdout')}\n{_inner(text, 'bash-stderr')}", tool="Bash")
    else:
        out.text("user", text)
    return OK


def _hook_output(text: str, out: MessageBuilder) -> bool:
    """Index a hook's reminder (``PostToolUse:Edit hook additional context: ...``) as its output."""
    if _HOOK.match(text) is None:
        return False
    out.result(_inner(text, "system-reminder") or text, tool="hook")
    return True


def _claude_flagged(rec: Mapping[str, Any], content: Any, out: MessageBuilder) -> int:
    """A record with a meta flag: a compaction summary or a hook's output is kept, not the rest."""
    if rec.get("isCompactSummary"):
        out.text("system", content)  # what the agent knew after compaction
        return OK
    if rec.get("isMeta") and isinstance(content, str) and _hook_output(content, out):
        return OK
    out.meta(content)
    return META


def _claude(rec: Mapping[str, Any], out: MessageBuilder) -> int:
    kind = rec.get("type")
    if kind in ("user", "assistant"):
        message = rec.get("message")
        if not isinstance(message, Mapping):
            return UNKNOWN_RECORD
        content = message.get("content")
        if any(rec.get(flag) for flag in _CLAUDE_META_FLAGS):
            return _claude_flagged(rec, content, out)
        if kind == "user" and isinstance(content, str):
            return _claude_user_string(content, out)
        if kind == "user" and "toolUseResult" in rec:
            content = fuller_result(content, rec["toolUseResult"])
        out.blocks(content, kind)
        return OK
    if kind == "summary":  # a session's title line
        out.text("system", rec.get("summary"))
        return OK
    if kind in CLAUDE_META:
        out.meta(None)
        return META
    return UNKNOWN_RECORD


# --- Codex ---------------------------------------------------------------------------------------

CODEX_META = frozenset({"session_meta", "turn_context", "event_msg", "compacted"})
CODEX_ITEMS = frozenset({"message", "function_call", "function_call_output", "custom_tool_call",
                          "custom_tool_call_output", "local_shell_call", "web_search_call",
                          "reasoning", "ghost_snapshot"})  # fmt: skip
# Context Codex injects as "user" messages at the start of every session.
_CODEX_BOILERPLATE = ("<environment_context", "<user_instructions", "# AGENTS.md instructions",
                      "<permissions instructions", "<INSTRUCTIONS>")  # fmt: skip


def _codex_item(item: Mapping[str, Any], out: MessageBuilder) -> int:
    kind = item.get("type")
    if kind == "message":
        role, content = item.get("role"), item.get("content")
        if role == "user" and plain(content).lstrip().startswith(_CODEX_BOILERPLATE):
            role = "system"
        if role not in ("user", "assistant"):
            out.meta(content)
            return META
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
        return META
    else:
        return UNKNOWN_RECORD
    return OK


def _codex(rec: Mapping[str, Any], out: MessageBuilder) -> int:
    kind = rec.get("type")
    if kind == "response_item":
        payload = rec.get("payload")
        return _codex_item(payload, out) if isinstance(payload, Mapping) else UNKNOWN_RECORD
    if kind in CODEX_META:
        payload = rec.get("payload")
        if kind == "compacted" and isinstance(payload, Mapping):
            out.text("system", payload.get("message"))  # the summary the session went on from
            return OK
        return META
    if kind is None and ("record_type" in rec or ("id" in rec and "timestamp" in rec)):
        return META  # legacy header line / state marker
    if kind in CODEX_ITEMS and not isinstance(rec.get("message"), Mapping):
        return _codex_item(rec, out)  # legacy rollouts: bare items, no envelope
    return UNKNOWN_RECORD


# --- OpenClaw ------------------------------------------------------------------------------------

OPENCLAW_META = frozenset(
    {"session", "model_change", "thinking_level_change", "compaction", "branch_summary",
     "custom", "custom_message", "label", "session_info"}
)  # fmt: skip


def _openclaw(rec: Mapping[str, Any], out: MessageBuilder) -> int:
    kind = rec.get("type")
    if kind in ("compaction", "branch_summary"):  # what the agent went on from
        out.text("system", rec.get("summary", rec.get("content")))
        return OK
    if kind in OPENCLAW_META:
        out.meta(rec.get("summary", rec.get("content")))
        return META
    message = rec.get("message")
    if kind != "message" or not isinstance(message, Mapping):
        return UNKNOWN_RECORD
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
        return META
    else:
        return UNKNOWN_RECORD
    return OK


# --- generic {"role", "content"} -----------------------------------------------------------------

_ROLE_ALIASES = {"human": "user", "ai": "assistant", "model": "assistant", "bot": "assistant"}


def _generic(rec: Mapping[str, Any], out: MessageBuilder) -> int:
    role = rec.get("role")
    if not isinstance(role, str) or not ("content" in rec or "tool_calls" in rec):
        return UNKNOWN_RECORD
    role = _ROLE_ALIASES.get(role.lower(), role.lower())
    content = rec.get("content")
    if role in ("system", "developer"):
        out.meta(content)
        return META
    if role in ("tool", "function", "toolresult"):
        tool = out.tool_of(rec.get("tool_call_id"))
        name = rec.get("name")
        out.result(content, tool=tool or (name if isinstance(name, str) else ""))
        return OK
    name = next((v for k in ("speaker", "name") if isinstance(v := rec.get(k), str)), "")
    out.blocks(content, role, name)
    calls = rec.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():  # OpenAI chat format
        if isinstance(call, Mapping):
            fn = call.get("function", call)
            if isinstance(fn, Mapping):
                out.call(fn.get("name"), fn.get("arguments"), role, call.get("id"))
    return OK


READERS: dict[str, Reader] = {
    CLAUDE_CODE: _claude,
    CODEX: _codex,
    OPENCLAW: _openclaw,
    GENERIC: _generic,
    GEMINI_CLI: read_gemini,
}
