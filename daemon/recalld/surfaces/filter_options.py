"""The search filters on each surface: CLI flags, MCP arguments, and how a stale hit is shown.

The values are checked by the daemon (:mod:`recalld.retrieval.filters`), which answers a bad
one with ``invalid_params`` and a message naming the accepted forms; here they are only put in
the shape the wire takes.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as true; the fast CLI path does not import typing
if TYPE_CHECKING:  # the fast CLI path prints through here: no argparse (nor typing) for it
    import argparse
    from collections.abc import Mapping
    from typing import Any

__all__ = ["STALE_NOTE", "add_filter_options", "cli_filter_params", "mcp_filter_params"]

#: What the CLI and MCP say of a hit whose file changed after it was indexed.
STALE_NOTE = "(changed since indexed)"
_SCALARS = ("since", "until", "project", "session")
_WHEN = "an ISO date or time (2026-03-14, 2026-03-14T09:30Z) or a span back from now (12h, 7d)"


def add_filter_options(parser: argparse.ArgumentParser) -> None:
    """``--tag`` (repeatable), ``--since``, ``--until``, ``--project``, ``--session``."""
    parser.add_argument(
        "--tag",
        action="append",
        dest="tags",
        metavar="TAG",
        help="only content with this tag (front matter tags or inline #tag); "
        "repeat for any of several",
    )
    parser.add_argument("--since", metavar="WHEN", help=f"only content dated from WHEN on: {_WHEN}")
    parser.add_argument(
        "--until",
        metavar="WHEN",
        help="only content dated before WHEN (a bare date: that day included)",
    )
    parser.add_argument(
        "--project",
        metavar="NAME",
        help="only this project: a session's working folder (name or path) or a note's top folder",
    )
    parser.add_argument("--session", metavar="ID", help="only this session transcript (its id)")


def cli_filter_params(args: argparse.Namespace) -> dict[str, Any]:
    """The wire parameters of the filter flags given."""
    out: dict[str, Any] = {}
    if getattr(args, "tags", None):
        out["tags"] = list(args.tags)
    for name in _SCALARS:
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    return out


def mcp_filter_params(args: Mapping[str, Any], error: type[Exception]) -> dict[str, Any]:
    """The wire parameters of ``memory_search``'s filter arguments (``error`` on a wrong type)."""
    out: dict[str, Any] = {}
    tags = args.get("tags")
    if tags is not None:
        tags = [tags] if isinstance(tags, str) else tags
        if not isinstance(tags, list) or not tags or not all(isinstance(t, str) for t in tags):
            raise error(f"tags must be a list of strings, not {tags!r}")
        out["tags"] = tags
    for name in _SCALARS:
        value = args.get(name)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise error(f"{name} must be a non-empty string, not {value!r}")
            out[name] = value.strip()
    return out
