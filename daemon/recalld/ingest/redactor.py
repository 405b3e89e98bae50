"""The redactor: the one way recalld replaces secrets in text, for everything it stores or serves.

Every match becomes ``[REDACTED:<kind>]`` (the shapes are in
:mod:`recalld.ingest.sessions.redaction` and the modules beside it). Callers:

- :func:`redact`: memory notes (at indexing and when served), agent-written entries before they
  reach disk, error and log text. Line numbers are kept: a PEM block becomes one token followed
  by the line breaks it held.
- :func:`redact_jsonl_line`: one raw transcript line as ``get`` serves it (stays valid JSON).
- transcript messages are redacted by their parser (``TranscriptParser(redact=True)``).

What leaves the daemon goes through :mod:`recalld.retrieval.served`, which calls these.
"""

from __future__ import annotations

from recalld.ingest.sessions.redaction import counts, redact_line, redact_lines

__all__ = ["counts", "redact", "redact_jsonl_line"]


def redact(text: str, where: str = "indexed") -> tuple[str, int]:
    """``text`` with every secret replaced, and how many were; idempotent, keeps line numbers.

    ``where`` names the tally in ``status.redactions`` ("indexed" for text on its way into the
    index or to disk, "served" for text on its way out; "log" is not counted).
    """
    return redact_lines(text, where)


def redact_jsonl_line(raw: str) -> str:
    """One raw JSONL transcript line with every secret replaced, at any JSON escape depth."""
    return redact_line(raw)
