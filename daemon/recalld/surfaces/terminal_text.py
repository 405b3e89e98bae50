"""Text for a terminal: the control characters a note, transcript or path holds are shown, not
obeyed.

A note (or a transcript of hostile tool output, or a file name) may hold ESC sequences, BEL or a
lone carriage return: printed raw by ``recalld search`` or ``get`` they would recolour or rewrite
the screen, set the window title, ring the bell. Unicode's bidi overrides and isolates reorder
what follows them (a line can show other text than it holds, "Trojan Source"). Only text
written for a human goes through :func:`visible`; ``--json`` and the client's data stay exact.
"""

from __future__ import annotations

# C0 but tab and newline, DEL, and C1 (U+0080-U+009F: some terminals obey them too), as \xNN.
_SHOWN = {code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}
# The bidi embeddings, overrides and isolates (U+202A-E, U+2066-9), as \uNNNN; the marks LRM and
# RLM stay: right-to-left prose uses them, and they reorder no more than a letter of that script.
_SHOWN.update({code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def visible(text: str) -> str:
    """``text`` with its control characters but newline and tab (and CR before LF) as ``\\xNN``,
    its bidi overrides and isolates as ``\\uNNNN``."""
    if "\r\n" in text:  # a note saved with CRLF endings: harmless, and not worth a \x0d per line
        return "\r\n".join(part.translate(_SHOWN) for part in text.split("\r\n"))
    return text.translate(_SHOWN)
