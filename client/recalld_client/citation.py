"""The one parser of line citations, shared by the CLI, the daemon's ``get`` and the MCP server.

Every form any recalld output prints is accepted::

    path#L12-L30   path#L12-30   path#L12        search results, ``also`` places, MCP
    path:12-30     path:12                       the CLI's ``get PATH[:FROM[-TO]]``

``#L12`` cites one line; ``:12`` reads from line 12 to the end of the file (``PATH:FROM``).
    path#L12-L30 (of 40 lines)                   the header of an MCP ``memory_get`` answer
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Citation", "parse_citation"]

_FORM = re.compile(
    r"^(?P<path>.+?)"
    r"(?:#L(?P<hash_from>[0-9]+)(?:-L?(?P<hash_to>[0-9]+))?"
    r"|:(?P<colon_from>[0-9]+)(?:-(?P<colon_to>[0-9]+))?)"
    r"(?:\s+\(of [0-9]+ lines\))?$"
)


class Citation(NamedTuple):
    """A path and an inclusive 1-based line range (``last`` None: to the end of the file)."""

    path: str
    first: int
    last: int | None

    @property
    def lines(self) -> int | None:
        """How many lines the range covers (None: to the end of the file)."""
        return None if self.last is None else self.last - self.first + 1


def parse_citation(text: str) -> Citation | None:
    """The citation in ``text``, or None when it carries no line range (a plain path).

    Raises :class:`ValueError` for a range that ends before it starts or starts at line 0.
    """
    m = _FORM.match(text.strip())
    if m is None:
        return None
    if m["hash_from"] is not None:
        first = int(m["hash_from"])
        last: int | None = int(m["hash_to"] or first)
    else:
        first = int(m["colon_from"])
        last = int(m["colon_to"]) if m["colon_to"] else None
    if first < 1:
        raise ValueError(f"line numbers start at 1: {text!r}")
    if last is not None and last < first:
        raise ValueError(f"empty line range in {text!r}: it ends before it starts")
    return Citation(m["path"], first, last)
