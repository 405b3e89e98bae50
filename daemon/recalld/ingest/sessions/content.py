"""Content values of transcript records as text: cleanup, tool call summaries, whole arguments.

Shared by every format parser in :mod:`recalld.ingest.sessions.formats`. Nothing here raises on file
content.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "EXEC_HEADER", "LINENO", "call_text", "clean", "fuller_result", "plain", "record_time", "same",
    "short", "tool_line",
]  # fmt: skip

_TOOL_ARG_CHARS = 200

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_BLANKS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
LINENO = re.compile(r"(?m)^ {0,8}\d{1,7}\u2192")  # Claude Code's "    12→" Read prefixes
_SPACE = re.compile(r"\s+")
_PATCH_FILE = re.compile(r"(?m)^\*\*\* (?:Add|Update|Delete) File: (.+)$")
EXEC_HEADER = re.compile(
    r"Exit code: (-?\d+)\nWall time: [^\n]*\n(?:[A-Z][^\n:]{0,40}: [^\n]*\n)*?Output:\n"
)
_REMINDER_OPEN, _REMINDER_CLOSE = "<system-reminder>", "</system-reminder>"


def _strip_reminders(text: str) -> str:
    # Harness-injected reminders say nothing about the work; str.find keeps this linear.
    out, pos = [], 0
    while (start := text.find(_REMINDER_OPEN, pos)) != -1:
        end = text.find(_REMINDER_CLOSE, start)
        if end == -1:
            break
        out.append(text[pos:start])
        pos = end + len(_REMINDER_CLOSE)
    return "".join(out) + text[pos:] if out else text


def clean(text: str) -> str:
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if _REMINDER_OPEN in text:
        text = _strip_reminders(text)
    if "\n\n\n" in text or "\n \n" in text:
        text = _BLANKS.sub("\n\n", text)
    return text.strip()


def short(value: str, limit: int = _TOOL_ARG_CHARS) -> str:
    value = _SPACE.sub(" ", value).strip()
    return value if len(value) <= limit else value[: limit - 1].rstrip() + "…"


def plain(content: Any) -> str:
    """The text of a content value: a string, or the text parts of a list of blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping):
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif block.get("type") in ("image", "input_image"):
                    parts.append("[image]")
        return "\n".join(parts)
    if isinstance(content, Mapping):
        for key in ("output", "text", "content"):
            if isinstance(content.get(key), str | list):
                return plain(content[key])
        return json.dumps(content, ensure_ascii=False, separators=(",", ":"))
    return "" if content is None else str(content)


def _patch_files(patch: str) -> str:
    return ", ".join(_PATCH_FILE.findall(patch)) or "patch"


def _arg_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value or None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if value[0] == "apply_patch" and len(value) > 1:
            return _patch_files(value[1])
        # ["bash", "-lc", "git status"] is Codex's way of running "git status".
        if len(value) == 3 and value[1] in ("-c", "-lc") and value[0].rsplit("/", 1)[-1] in (
            "bash", "sh", "zsh"
        ):  # fmt: skip
            return str(value[2])
        return " ".join(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


# Argument that says what a call did, best first; CODE ones are shown in backticks.
_KEY_ARGS = ("command", "cmd", "file_path", "notebook_path", "pattern", "path", "url", "query",
             "skill", "description", "prompt", "task_id", "subagent_type", "plan")  # fmt: skip
_CODE_ARGS = frozenset({"command", "cmd", "pattern"})


def same(text: str) -> str:
    return text


def tool_line(name: Any, args: Any, clean: Callable[[str], str] = same) -> str:
    """One line for a tool call: ``tool: Bash `git status```, ``tool: Read src/app.py``.

    ``clean`` (redaction) sees each argument before it is shortened, so that a secret cut by
    the length limit is still recognised.
    """
    name = short(str(name), 60) if name else "tool"
    if isinstance(args, str):
        stripped = args.strip()
        if stripped.startswith("{"):
            with contextlib.suppress(ValueError):
                args = json.loads(stripped)
        elif stripped.startswith("*** Begin Patch"):
            return f"tool: {name} {short(clean(_patch_files(stripped)))}"
        elif stripped:
            return f"tool: {name} {short(clean(stripped.splitlines()[0]))}"
    if not isinstance(args, Mapping):
        return f"tool: {name}"
    for key in _KEY_ARGS:
        text = _arg_text(args.get(key))
        if text is None:
            continue
        text = short(clean(text))
        if key == "pattern" and isinstance(path := args.get("path"), str):
            return f"tool: {name} `{text}` in {short(clean(path), 120)}"
        return f"tool: {name} `{text}`" if key in _CODE_ARGS else f"tool: {name} {text}"
    return f"tool: {name}"


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _shown(value: str, head: str) -> bool:
    """Whether the summary line already shows ``value`` whole (no need to repeat it)."""
    return len(value) <= _TOOL_ARG_CHARS // 2 and "\n" not in value and value in head


def call_text(name: Any, args: Any, clean: Callable[[str], str] = same) -> str:
    """A tool call whole: its :func:`tool_line` summary, then every argument in full.

    Arguments are decoded (a JSON string of arguments is parsed), so an escaped path or an edit's
    ``new_string`` is indexed as the text the agent meant, one ``key: value`` row each.
    """
    head = tool_line(name, args, clean)
    if isinstance(args, str):
        stripped = args.strip()
        if stripped.startswith("{"):
            with contextlib.suppress(ValueError):
                args = json.loads(stripped)
    if isinstance(args, Mapping):
        rows = [
            f"{key}: {text}"
            for key, v in args.items()
            if (text := _value_text(v).strip()) and not _shown(text, head)
        ]
        body = "\n".join(rows)
    else:
        body = _value_text(args).strip()
    return f"{head}\n{clean(body)}" if body else head


def _use_result_text(tool_use_result: Any) -> str:
    """The output text Claude Code keeps in a record's ``toolUseResult`` ("" when none)."""
    if not isinstance(tool_use_result, Mapping):
        return ""
    if "stdout" in tool_use_result or "stderr" in tool_use_result:  # Bash, BashOutput
        parts = (tool_use_result.get(k) for k in ("stdout", "stderr"))
        return "\n".join(p for p in parts if isinstance(p, str) and p.strip())
    file = tool_use_result.get("file")  # Read
    if isinstance(file, Mapping) and isinstance(text := file.get("content"), str):
        return text
    return ""  # an edit's originalFile or a written file's content: not what the tool returned


def fuller_result(content: Any, tool_use_result: Any) -> Any:
    """``content`` with its one tool result replaced by the fuller ``toolUseResult`` output.

    Claude Code gives the model a 2 KB preview of a large output (``<persisted-output>``) and keeps
    the whole stdout in ``toolUseResult``; when that holds more text, it is what gets indexed,
    once (the preview's "saved to" header is kept, the preview itself is not repeated).
    """
    if not isinstance(content, list):
        return content
    at = [
        i
        for i, b in enumerate(content)
        if isinstance(b, Mapping) and b.get("type") == "tool_result"
    ]
    full = _use_result_text(tool_use_result) if len(at) == 1 else ""
    if not full:
        return content
    block = content[at[0]]
    shown = plain(block.get("content")).strip()
    if len(full.strip()) <= len(shown):
        return content
    head = ""
    if shown.startswith(_PERSISTED):
        head = shown[len(_PERSISTED) :].strip().split("\n", 1)[0]  # "saved to: <path>"
    elif shown.startswith("Exit code "):
        head = shown.split("\n", 1)[0]
    text = f"{head}\n{full}" if head else full
    return [*content[: at[0]], {**block, "content": text}, *content[at[0] + 1 :]]


_PERSISTED = "<persisted-output>"


def _timestamp(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        try:  # epoch milliseconds (OpenClaw message.timestamp)
            return datetime.fromtimestamp(value / 1000, UTC).isoformat().replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            return ""
    return ""


def record_time(rec: Mapping[str, Any]) -> str:
    stamp = rec.get("timestamp")
    if stamp is None and isinstance(message := rec.get("message"), Mapping):
        stamp = message.get("timestamp")  # OpenClaw entries without their own time
    return _timestamp(stamp)
