"""Text for a terminal: the control characters a note, transcript or path holds are shown, not
obeyed.

A note (or a transcript of hostile tool output, or a file name) may hold ESC sequences, BEL or a
lone carriage return: printed raw by ``recalld search`` or ``get`` they would recolour or rewrite
the screen, set the window title, ring the bell. Only text written for a human goes through
:func:`visible`; ``--json`` and the client's data stay exact.
"""

from __future__ import annotations

# C0 but tab and newline, DEL, and C1 (U+0080-U+009F: some terminals obey them too), as \xNN.
_SHOWN = {code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}


def visible(text: str) -> str:
    """``text`` with its control characters but newline and tab (and CR before LF) as ``\\xNN``."""
    if "\r\n" in text:  # a note saved with CRLF endings: harmless, and not worth a \x0d per line
        return "\r\n".join(part.translate(_SHOWN) for part in text.split("\r\n"))
    return text.translate(_SHOWN)
