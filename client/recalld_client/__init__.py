"""Thin client for the recalld memory daemon (msgpack frames over a local socket or pipe).

    from recalld_client import Client

    with Client() as c:
        for hit in c.search("why did we pick sqlite-vec")["results"]:
            print(hit["citation"], hit["score"])

It depends on msgpack and platformdirs only, so agents and tools can import it cheaply.
"""

from __future__ import annotations

from recalld_client.client import Client, is_running
from recalld_client.errors import (
    BadRequest,
    ConfigError,
    ConnectionLost,
    DaemonNotRunning,
    Forbidden,
    FrameTooLarge,
    IndexUnavailable,
    InternalError,
    NotFound,
    ProtocolError,
    ProviderError,
    RecalldClientError,
    Timeout,
    TooLarge,
    TooManyConnections,
    Unavailable,
    VersionMismatch,
    WrongDaemon,
)
from recalld_client.protocol import PROTOCOL_VERSION

# Not typing.TYPE_CHECKING: importing typing costs `recalld search` ~3 ms of start-up, and
# mypy takes any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from recalld_client.types import (
        GetResponse,
        Hello,
        IndexInfo,
        Scores,
        SearchResponse,
        SearchResult,
        StatusResponse,
    )

_TYPES = frozenset(
    {
        "GetResponse",
        "Hello",
        "IndexInfo",
        "Scores",
        "SearchResponse",
        "SearchResult",
        "StatusResponse",
    }
)


def __getattr__(name: str) -> Any:
    # The response TypedDicts load on first use: a CLI call that never names them (the
    # `recalld search` fast path) does not pay for building them at start-up.
    if name in _TYPES:
        from recalld_client import types

        return getattr(types, name)
    raise AttributeError(f"module 'recalld_client' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "BadRequest",
    "Client",
    "ConfigError",
    "ConnectionLost",
    "DaemonNotRunning",
    "Forbidden",
    "FrameTooLarge",
    "GetResponse",
    "Hello",
    "IndexInfo",
    "IndexUnavailable",
    "InternalError",
    "NotFound",
    "ProtocolError",
    "ProviderError",
    "RecalldClientError",
    "Scores",
    "SearchResponse",
    "SearchResult",
    "StatusResponse",
    "Timeout",
    "TooLarge",
    "TooManyConnections",
    "Unavailable",
    "VersionMismatch",
    "WrongDaemon",
    "is_running",
]
