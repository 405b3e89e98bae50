"""The ``get`` method: lines of an indexed file (or one recalld would index), redacted.

The path may be any citation recalld prints (``PATH#L3-L9``, ``PATH:3-9``). It is resolved and
checked against the configured roots at the moment of reading (``access``), and a path swapped
for a link between the check and the open is checked again; the lines leave through the gate
(``served``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, suppress
from typing import Any

from recalld.config import Config
from recalld.errors import BadRequest, NotFound
from recalld.index.store import Store
from recalld.ingest.filters import PathFilter, make_filter
from recalld.ingest.forgotten import forgotten_stone
from recalld.retrieval import access, served


def get(
    params: Mapping[str, Any], config: Config, reader: Callable[[], AbstractContextManager[Store]]
) -> dict[str, Any]:
    """``get``'s answer for wire parameters."""
    raw = params.get("path")
    if not isinstance(raw, str):
        raise BadRequest("get needs a 'path' string")
    access.check_path_text(raw)  # length, NUL: before anything parses or stats it
    from_line = params.get("from_line", params.get("from", 1))
    lines = params.get("lines")
    if from_line == 1 and not access.exists(raw):
        raw, from_line, lines = split_citation(raw, lines)
    decoded = params.get("decoded", False)
    if not isinstance(decoded, bool):
        raise BadRequest(f"decoded must be true or false, got {decoded!r}")
    memory_filter = make_filter(config.list("memory.extensions"))
    for _ in range(2):  # a path swapped for a link between check and open is checked again
        with suppress(access.PathChanged):
            return _get_once(raw, from_line, lines, memory_filter, decoded, config, reader)
    return _get_once(raw, from_line, lines, memory_filter, decoded, config, reader)


def _get_once(
    raw: str,
    from_line: Any,
    lines: Any,
    memory_filter: PathFilter,
    decoded: bool,
    config: Config,
    reader: Callable[[], AbstractContextManager[Store]],
) -> dict[str, Any]:
    with reader() as store:
        target = access.resolve(
            raw,
            config.memory_roots(),
            config.session_globs(),
            memory_filter,
            lambda p: row.source if (row := store.file(p)) is not None else None,
        )
        row = store.file(str(target.path))
        if forgotten_stone(store, config, raw, target.path) is not None:
            raise NotFound(f"{target.path} is forgotten (`recalld forget --list`)")
    if row is None and not access.exists(target.path):
        raise NotFound(f"{target.path} is not indexed and does not exist")
    return served.read(target, from_line, lines, decoded)  # the gate: every line redacted


def split_citation(raw: str, lines: Any) -> tuple[str, int, Any]:
    """Any citation form (``PATH#L3-L9``, ``PATH:3-9``...) → (PATH, FROM, count).

    An explicit ``lines`` wins over the citation's range."""
    from recalld_client.citation import parse_citation

    try:
        cited = parse_citation(raw)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if cited is None:
        return raw, 1, lines
    return cited.path, cited.first, lines if lines is not None else cited.lines
