"""The string literals of a raw JSON(L) line and what their escapes decode to.

``get`` serves transcript lines as written, so a secret can hide behind an escape:
``postgres:\\/\\/admin:pw@host`` or ``sk-\\u0061nt-...`` read as the full secret once decoded.
:func:`map_strings` hands each literal's decoded text to a function and writes back the
re-encoded result where it changed, leaving every other byte of the line as it was. It also works
on lines that are not valid JSON (a line cut short while being written): each ``"..."`` run is a
literal, an unclosed one at the end included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

__all__ = ["ESCAPE_HINT", "map_strings", "unescape"]

_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|(.))", re.S)
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\"}
_SIMPLE.update({'"': '"', "'": "'"})
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Escapes that can hide the characters of a secret (a plain ``\\n`` cannot).
ESCAPE_HINT = re.compile(r"\\(?:u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|/)")
# An optional `"key": ` and then a string literal (possibly unclosed at the end of the line).
_LITERAL = re.compile(
    r'(?:"(?P<key>(?:[^"\\]++|\\.)*+)"[ \t]*:[ \t]*)?"(?P<value>(?:[^"\\]++|\\.)*+)(?P<close>"?)',
    re.S,
)


def unescape(text: str) -> str:
    """``text`` with JSON escapes (and ``\\xHH``) decoded; an unknown escape is kept as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return chr(int(m.group(1), 16))
        if m.group(2) is not None:
            return chr(int(m.group(2), 16))
        char = m.group(3)
        return _SIMPLE.get(char, "\\" + char)

    out = _ESCAPE.sub(sub, text)
    if _SURROGATE.search(out):  # join surrogate pairs, replace lone ones
        out = out.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return out


def _encode(value: str, closed: bool) -> str:
    literal = json.dumps(value, ensure_ascii=False)
    return literal if closed else literal[:-1]


def map_strings(
    line: str,
    wanted: Callable[[str], bool],
    change: Callable[[str | None, str], str],
) -> str:
    """``line`` with each string literal for which ``wanted(raw literal)`` holds replaced by
    ``change(decoded key or None, decoded value)``, re-encoded, where that differs."""
    out: list[str] = []
    pos = 0
    for m in _LITERAL.finditer(line):
        key, value = m.group("key"), m.group("value")
        for raw, start, end, closed, ctx in (
            (key, m.start("key"), m.end("key"), True, None),
            (value, m.start("value"), m.end("value"), bool(m.group("close")), key),
        ):
            if raw is None or not wanted(raw):
                continue
            decoded = unescape(raw)
            new = change(None if ctx is None else unescape(ctx), decoded)
            if new != decoded:
                out += [line[pos : start - 1], _encode(new, closed)]
                pos = end + (1 if closed else 0)
    return "".join(out) + line[pos:] if out else line
