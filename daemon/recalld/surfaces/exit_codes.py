"""The one table of the ``recalld`` command's exit codes, by wire error code.

The CLI answers from the daemon or in-process; both paths raise errors carrying the same wire
``code`` (the daemon's :mod:`recalld.errors`, the client's :mod:`recalld_client.errors`), so one
lookup gives the same exit code either way. ``recalld --help`` prints :data:`HELP`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as true; the fast CLI path does not import typing
if TYPE_CHECKING:
    from typing import Final

OK: Final = 0
ERROR: Final = 1
USAGE: Final = 2
NOT_FOUND: Final = 3
UNAVAILABLE: Final = 4
CONFIG: Final = 5
INDEX: Final = 6
INTERRUPTED: Final = 130

#: (exit code, wire codes, what it means) - the documented table, in order.
TABLE: Final[tuple[tuple[int, tuple[str, ...], str], ...]] = (
    (OK, (), "success"),
    (ERROR, ("internal", "provider", "protocol", "version", "too_large"), "any other error"),
    (USAGE, ("bad_request", "forbidden"), "bad usage, or a path outside the memory/session roots"),
    (NOT_FOUND, ("not_found",), "file not indexed or missing, or lines past its end"),
    (
        UNAVAILABLE,
        ("unavailable", "too_many_connections", "timeout"),
        "daemon unavailable (shutting down, busy, no answer in time)",
    ),
    (CONFIG, ("config",), "invalid configuration (config.toml)"),
    (INDEX, ("index",), "the index cannot be used (read-only home, damaged file)"),
    (INTERRUPTED, (), "interrupted (Ctrl-C)"),
)

_BY_CODE: Final = {wire: exit_code for exit_code, wires, _ in TABLE for wire in wires}


def for_code(code: object) -> int:
    """The exit code of an error's wire ``code`` (unknown codes: :data:`ERROR`)."""
    return _BY_CODE.get(code, ERROR) if isinstance(code, str) else ERROR


HELP: Final = "exit codes:\n" + "\n".join(
    f"  {exit_code:<4} {meaning}" for exit_code, _, meaning in TABLE
)
