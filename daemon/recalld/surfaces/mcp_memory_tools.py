"""``memory_write`` and ``memory_forget``: the MCP tools that let an agent add to memory and take
out of it. Their descriptions tell the agent when to write and what never to write; forget
takes exact citations or session ids only (no "forget whatever matches").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WRITE_TOOL = "memory_write"
FORGET_TOOL = "memory_forget"

WRITE_DESCRIPTION = (
    "Write a short entry into the user's long-term memory (Markdown notes): by default "
    "today's daily note, or a named note such as 'MEMORY.md' or 'projects/billing.md'. "
    "Write when you learn something a later session will need: a decision and its reason, "
    "a preference or convention the user stated, a fact about the project or people, a "
    "correction of something memory said wrongly (pass replace = the citation of the old "
    "entry), a to-do the user asked to keep. Write one self-contained fact per entry, in plain "
    "words, with the date or names it needs to make sense later. Never write secrets "
    "(passwords, keys, tokens: they are redacted anyway), credentials, personal data the user "
    "did not ask to keep, whole files or logs, or guesses presented as facts; do not repeat "
    "what memory already holds (search first). Returns the citation 'path#Lx-Ly' of the "
    "entry; it is searchable at once. duplicate = true means the same entry was there already."
)

FORGET_DESCRIPTION = (
    "Forget something from the user's memory, only when the user asks for it or an entry you "
    "wrote is wrong. Give exactly one of: citation = an exact 'path#Lx-Ly' from "
    "memory_search or memory_write (those lines are removed from the note; refused if they "
    "changed since), or session = a transcript's session id (the whole session is kept out "
    "of search from now on; its file is not touched). There is no fuzzy 'forget what "
    "matches': search, then forget the exact citations. undo = true brings a forgotten "
    "session back."
)

WRITE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {
            "type": "string",
            "minLength": 1,
            "description": "The entry: one self-contained fact, decision or preference.",
        },
        "note": {
            "type": "string",
            "description": "A note name inside the memory folder (default: today's daily "
            "note), e.g. 'MEMORY.md' or 'projects/billing.md'.",
        },
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tags such as 'decision' or 'billing' (written as #tags).",
        },
        "replace": {
            "type": "string",
            "description": "Citation 'path#Lx-Ly' of an earlier entry this one corrects.",
        },
    },
    "required": ["text"],
    "additionalProperties": False,
}

FORGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "citation": {
            "type": "string",
            "description": "An exact citation 'path#Lx-Ly' of lines of a memory note.",
        },
        "session": {"type": "string", "description": "A transcript's session id."},
        "undo": {"type": "boolean", "description": "Bring a forgotten session back."},
    },
    "additionalProperties": False,
}

WRITE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "citation": {"type": "string"},
        "path": {"type": "string"},
        "startLine": {"type": "integer"},
        "endLine": {"type": "integer"},
        "redacted": {"type": "integer"},
        "duplicate": {"type": "boolean"},
    },
    "required": ["citation", "path", "startLine", "endLine", "redacted", "duplicate"],
}

FORGET_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "forgotten": {"type": "string"},
        "value": {"type": "string"},
        "undone": {"type": "boolean"},
        "linesRemoved": {"type": "integer"},
        "filesRemoved": {"type": "integer"},
    },
    "required": ["forgotten", "value"],
}


class ArgumentError(ValueError):
    """Arguments the agent should correct (shown to it as the tool's error)."""


def write_params(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of :meth:`Client.remember` from ``memory_write`` arguments."""
    a = _known(args, WRITE_SCHEMA)
    text = a.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ArgumentError("text must be a non-empty string: the entry to write")
    out: dict[str, Any] = {"text": text}
    for name in ("note", "replace"):
        value = a.get(name)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise ArgumentError(f"{name} must be a non-empty string")
            out[name] = value.strip()
    tags = a.get("tags")
    if tags is not None:
        tags = [tags] if isinstance(tags, str) else tags
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ArgumentError("tags must be a list of words")
        out["tags"] = tags
    return out


def forget_params(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of :meth:`Client.forget` from ``memory_forget`` arguments: exactly one
    citation with a line range, or one session id."""
    from recalld_client.citation import parse_citation

    a = _known(args, FORGET_SCHEMA)
    undo = a.get("undo", False)
    if not isinstance(undo, bool):
        raise ArgumentError("undo must be true or false")
    given = [k for k in ("citation", "session") if a.get(k) is not None]
    if len(given) != 1:
        raise ArgumentError("give exactly one of citation ('path#Lx-Ly') or session")
    value = a[given[0]]
    if not isinstance(value, str) or not value.strip():
        raise ArgumentError(f"{given[0]} must be a non-empty string")
    value = value.strip()
    if given[0] == "session":
        return {"session": value, "undo": undo}
    try:
        cited = parse_citation(value)
    except ValueError as exc:
        raise ArgumentError(str(exc)) from None
    if cited is None or cited.lines is None or undo:
        raise ArgumentError(
            "citation must be an exact 'path#Lx-Ly' from memory_search or memory_write "
            "(whole files and patterns are forgotten with `recalld forget` by the user)"
        )
    return {"target": value}


def write_payload(res: Mapping[str, Any]) -> dict[str, Any]:
    """The write answer as structured content (WRITE_OUTPUT_SCHEMA)."""
    return {
        "citation": res["citation"],
        "path": res["path"],
        "startLine": int(res["start_line"]),
        "endLine": int(res["end_line"]),
        "redacted": int(res.get("redacted", 0)),
        "duplicate": bool(res.get("duplicate", False)),
    }


def forget_payload(res: Mapping[str, Any]) -> dict[str, Any]:
    """The forget answer as structured content (FORGET_OUTPUT_SCHEMA)."""
    out: dict[str, Any] = {"forgotten": str(res["forgotten"]), "value": str(res["value"])}
    if res.get("undone"):
        out["undone"] = True
    if "lines_removed" in res:
        out["linesRemoved"] = int(res["lines_removed"])
    if "files_removed" in res:
        out["filesRemoved"] = int(res["files_removed"])
    return out


def write_text(res: Mapping[str, Any]) -> str:
    """What the agent reads after a write."""
    if res.get("duplicate"):
        return f"already in memory (not written again): {res['citation']}"
    note = f"; {res['redacted']} secret(s) were redacted" if res.get("redacted") else ""
    return f"written: {res['citation']}{note}"


def forget_text(res: Mapping[str, Any]) -> str:
    """What the agent reads after a forget."""
    if res.get("undone"):
        return f"{res['forgotten']} {res['value']} is remembered again"
    if res.get("forgotten") == "lines":
        text = f"removed {res['lines_removed']} line(s): {res['value']}"
    else:
        files = res.get("files_removed", 0)
        text = f"forgotten {res['forgotten']} {res['value']} ({files} file(s))"
    if res.get("shared_files"):
        from recalld.surfaces.cli_memory import shared_note

        text += f"; {shared_note(dict(res))}"
    return text


def _known(args: Mapping[str, Any] | None, schema: Mapping[str, Any]) -> dict[str, Any]:
    allowed = schema["properties"].keys()
    out = dict(args or {})
    unknown = sorted(set(out) - set(allowed))
    if unknown:
        raise ArgumentError(
            f"unknown argument {unknown[0]!r}; this tool takes {', '.join(sorted(allowed))}"
        )
    return out
