"""Thin client for the recalld memory daemon (msgpack frames over a local socket or pipe).

    from recalld_client import Client

    with Client() as c:
        for hit in c.search("why did we pick sqlite-vec")["results"]:
            print(hit["citation"], hit["score"])

It depends on msgpack and platformdirs only, so agents and tools can import it cheaply.
"""

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
)
from recalld_client.protocol import PROTOCOL_VERSION
from recalld_client.types import (
    GetResponse,
    Hello,
    IndexInfo,
    Scores,
    SearchResponse,
    SearchResult,
    StatusResponse,
)

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
    "is_running",
]
