"""The gate: file text on its way out of the daemon passes here, redacted.

Every answer that holds text of a memory note or a transcript goes through one of these, with
the one redactor (:mod:`recalld.ingest.redactor`):

- ``get`` (raw and ``decoded``; served by the daemon or by the CLI in-process when no daemon
  runs): :func:`read` — a transcript line by line (:func:`redact_jsonl_line` keeps each line
  valid JSON), a memory note as a whole (a key block spans lines), line numbers kept;
- search snippets (the daemon and the search helper build results with the same code):
  :func:`snippet`, although the index holds redacted text already (notes and transcripts are
  redacted before they are chunked): a gate that does not depend on how the index was built;
- error messages and ``status`` text: :func:`message`, :func:`status_texts`; log lines are
  redacted by the log formatter (:class:`recalld.serve.log_guard.ScrubbingFormatter`).

``also`` ranges and citations are paths and line numbers, never text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recalld.ingest.redactor import redact, redact_jsonl_line
from recalld.retrieval import access

__all__ = ["message", "read", "snippet", "status_texts"]


def _whole_note(text: str) -> str:
    return redact(text, "served")[0]


def read(
    target: access.Target, from_line: Any, lines: Any, decoded: bool = False
) -> dict[str, Any]:
    """``get``'s answer for a checked target: its lines, redacted (see the module docstring)."""
    per_line: Callable[[str], str] | None = None
    whole: Callable[[str], str] | None = None
    if target.source == "sessions":  # indexed or not yet: transcripts are served redacted
        if decoded:
            from recalld.ingest.sessions.decoded import decode_line

            per_line = decode_line
        else:
            per_line = redact_jsonl_line
    else:
        whole = _whole_note
    return access.read_lines(target.path, from_line, lines, redact=per_line, whole=whole)


def snippet(text: str) -> str:
    """A search result's snippet as it may leave the daemon."""
    return redact(text, "served")[0] if text else text


def message(text: str) -> str:
    """An error message or status line that may quote file text or a config value (redacted,
    not tallied: ``redactions.served`` counts file text served, and an echoed query is not)."""
    return redact(text, "log")[0] if text else text


def status_texts(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with its free-text fields (errors, reasons files were skipped) through the
    gate: they quote what failed, which can be a line of a file."""
    for key in ("last_error", "degraded", "provider_reason", "config_error"):
        if isinstance(status.get(key), str):
            status[key] = message(status[key])
    for item in status.get("skipped_files") or ():
        item["reason"] = message(item["reason"])
    if isinstance(status.get("warnings"), list):
        status["warnings"] = [message(w) if isinstance(w, str) else w for w in status["warnings"]]
    return status
