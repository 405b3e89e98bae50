"""A relative path typed at the shell, read against the working folder when recalld's own rule
finds nothing.

The daemon reads a relative path under the memory folders (``alpha.md#L3``, as results cite it),
not under the folder the command was typed in, which it does not know. So ``recalld get
notes/a.md`` typed in ``~`` asked for ``~/notes/notes/a.md``. When the daemon's answer is "not
found" and the path names a file here, the command asks again with that file's absolute path
(the daemon then checks it against the roots as any other).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # the fast CLI path does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")


def from_cwd(target: str) -> str | None:
    """``target`` (a path or a citation) with its path made absolute against the working folder,
    when that path is relative and names a file there; else None."""
    path, suffix = target, ""
    if not os.path.lexists(target):
        from recalld_client.citation import parse_citation

        try:
            cited = parse_citation(target)
        except ValueError:
            return None
        if cited is None:
            return None
        path, suffix = cited.path, target.strip()[len(cited.path) :]
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded) or not os.path.isfile(expanded):
        return None
    return os.path.abspath(expanded) + suffix


def with_cwd_fallback(call: Callable[[str], T], target: str) -> T:
    """``call(target)``; on "not found", once more with :func:`from_cwd`'s path if there is one."""
    try:
        return call(target)
    except Exception as exc:
        if getattr(exc, "code", None) != "not_found" or (here := from_cwd(target)) is None:
            raise
        return call(here)
