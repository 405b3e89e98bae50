"""The Gemini CLI transcript reader: ``~/.gemini/tmp/<project>/chats/session-*.jsonl``.

Gemini CLI (0.61 and later) appends one JSON record a line: a header (``sessionId``,
``projectHash``, ``startTime``...), then messages ``{"id", "timestamp", "type": "user" |
"gemini" | "info" | "error" | "warning", "content", "toolCalls", "thoughts", "tokens"}``, and
``{"$set": {...}}`` / ``{"$rewindTo": id}`` updates. A message is appended again whenever it
changes (its token counts arrive, a tool call gets its result), so the reader remembers what it
already took from each message (in the parser's carried-over ``calls`` map, saved with the
file's state between delta syncs) and takes only what is new: the text once, each tool call
once, each tool result once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recalld.ingest.sessions.content import plain
from recalld.ingest.sessions.messages import META, OK, UNKNOWN_RECORD, MessageBuilder

GEMINI_CLI = "gemini_cli"
GEMINI_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})
_SEEN = "\x00gemini-seen:"  # prefix of the "already taken" marks among the open tool calls
_DONE = frozenset({"success", "error", "cancelled"})
# The context Gemini CLI sends as the first user message of every session (date, OS, folders).
_BOILERPLATE = ("<session_context>",)


def is_gemini(rec: Mapping[str, Any]) -> bool:
    """Whether one record is evidence for the Gemini CLI format."""
    if "$set" in rec or "$rewindTo" in rec:
        return True
    if "sessionId" in rec and "projectHash" in rec:
        return True
    kind = rec.get("type")
    return kind == "gemini" or (
        kind in GEMINI_TYPES and "id" in rec and "content" in rec and "message" not in rec
    )


def _first_time(out: MessageBuilder, key: str) -> bool:
    mark = _SEEN + key
    if mark in out.calls:
        return False
    out.calls[mark] = ""
    return True


def _parts_text(content: Any) -> str:
    """The text of a content value: a string or Gemini parts (``{"text"}``, other parts left)."""
    return plain(content) if isinstance(content, str | list) else ""


def _result_text(call: Mapping[str, Any]) -> Any:
    """What a tool call returned: the function responses' output, else the shown result."""
    texts = []
    for part in call.get("result") or []:
        response = part.get("functionResponse") if isinstance(part, Mapping) else None
        body = response.get("response") if isinstance(response, Mapping) else None
        if isinstance(body, Mapping):
            texts.append(plain(body.get("output", body.get("error", body))))
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    if texts:
        return "\n".join(texts)
    shown = call.get("resultDisplay")
    return shown if isinstance(shown, str) else ""


def read_gemini(rec: Mapping[str, Any], out: MessageBuilder) -> int:
    """One Gemini CLI record into messages (only what an earlier copy did not give)."""
    if not is_gemini(rec):
        return UNKNOWN_RECORD
    update = rec.get("$set")
    if isinstance(update, Mapping) and isinstance(update.get("messages"), list):
        # The whole conversation restated (a resumed or rewritten session): new parts only.
        found = [_message(m, out) for m in update["messages"] if isinstance(m, Mapping)]
        return OK if OK in found else META
    return _message(rec, out)


def _message(rec: Mapping[str, Any], out: MessageBuilder) -> int:
    kind, msg_id = rec.get("type"), rec.get("id")
    if kind not in GEMINI_TYPES or not isinstance(msg_id, str):
        return META  # the header, $set and $rewindTo updates
    if kind in ("info", "error", "warning"):
        out.meta(rec.get("content"))
        return META
    role = "user" if kind == "user" else "assistant"
    if role == "user" and _parts_text(rec.get("content")).lstrip().startswith(_BOILERPLATE):
        if _first_time(out, f"{msg_id}:text"):
            out.meta(rec.get("content"))
        return META
    if (text := _parts_text(rec.get("content"))) and _first_time(out, f"{msg_id}:text"):
        out.text(role, text)
    thoughts = rec.get("thoughts")
    if isinstance(thoughts, list) and thoughts and _first_time(out, f"{msg_id}:thoughts"):
        for t in thoughts:
            if isinstance(t, Mapping):
                out.thinking(f"{t.get('subject') or ''}: {t.get('description') or ''}".strip(": "))
    for call in rec.get("toolCalls") or []:
        if not isinstance(call, Mapping):
            continue
        call_id = str(call.get("id") or f"{msg_id}:{call.get('name')}")
        if _first_time(out, f"{call_id}:call"):
            out.call(call.get("name"), call.get("args"))
        if call.get("status") in _DONE and _first_time(out, f"{call_id}:result"):
            error = call.get("status") == "error"
            out.result(_result_text(call), error, str(call.get("name") or "tool"))
    return OK
