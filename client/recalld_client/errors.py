"""The client's exceptions: one tree, one class per wire error code.

    RecalldClientError
    ├── DaemonNotRunning      nothing listens at the socket / pipe (connect failed)
    ├── WrongDaemon           "config"       the daemon at the socket serves another config
    ├── ConnectionLost        the connection broke before the answer arrived
    ├── Timeout               "timeout"      no answer in time (client side or daemon side)
    ├── ProtocolError         "protocol"     a frame could not be decoded or has the wrong shape
    │   └── FrameTooLarge                    a frame over the size cap (also a TooLarge)
    ├── TooLarge              "too_large"    a request or answer over the frame cap
    ├── VersionMismatch       "version"      the daemon speaks an older protocol
    ├── BadRequest            "bad_request"  invalid method or parameters
    ├── Forbidden             "forbidden"    path outside the roots / other user's socket
    ├── NotFound              "not_found"    file not indexed or missing
    ├── ConfigError           "config"       the daemon's config is invalid
    ├── IndexUnavailable      "index"        the index cannot be used as it is
    ├── ProviderError         "provider"     the embedding provider failed
    ├── Unavailable           "unavailable"  the daemon cannot serve now (busy, shutting down)
    │   └── TooManyConnections "too_many_connections"  the daemon is at its connection cap
    └── InternalError         "internal"     a bug in the daemon (and any unknown code)

Foreign errors (``OSError``, ``socket.timeout``, msgpack's) are translated at the transport
boundary, so callers only ever catch these.
"""

from __future__ import annotations


class RecalldClientError(Exception):
    """Base of every error the client raises."""

    code = "internal"


class DaemonNotRunning(RecalldClientError):
    """Connecting failed: no daemon listens at the socket (start it with ``recalld serve``)."""

    code = "unavailable"


class WrongDaemon(RecalldClientError):
    """The daemon at this home's socket serves another config or data folder (another HOME
    sharing the uid's fallback socket): its notes are not this home's, so nothing is asked."""

    code = "config"


class ConnectionLost(RecalldClientError):
    """The connection to the daemon broke before a complete answer arrived."""

    code = "unavailable"


class Timeout(RecalldClientError):
    """No answer within the timeout."""

    code = "timeout"


class ProtocolError(RecalldClientError):
    """A frame could not be decoded or does not have the protocol's shape."""

    code = "protocol"


class TooLarge(RecalldClientError):
    """A request or answer is over the frame size cap."""

    code = "too_large"


class FrameTooLarge(TooLarge, ProtocolError):
    """A frame's length is over the cap (raised before the body is read or sent)."""

    code = "too_large"


class VersionMismatch(RecalldClientError):
    """The daemon does not speak this client's protocol version."""

    code = "version"


class BadRequest(RecalldClientError):
    """The method or its parameters are invalid."""

    code = "bad_request"


class Forbidden(RecalldClientError):
    """The daemon refused: a path outside the roots, or a socket of another user."""

    code = "forbidden"


class NotFound(RecalldClientError):
    """The file does not exist or is not indexed."""

    code = "not_found"


class ConfigError(RecalldClientError):
    """The daemon's configuration is invalid."""

    code = "config"


class IndexUnavailable(RecalldClientError):
    """The index cannot be used as it is (e.g. built with another vector space)."""

    code = "index"


class ProviderError(RecalldClientError):
    """The embedding provider failed or is misconfigured."""

    code = "provider"


class Unavailable(RecalldClientError):
    """The daemon cannot serve this now (overloaded, shutting down)."""

    code = "unavailable"


class TooManyConnections(Unavailable):
    """The daemon runs but refused this connection: it serves its maximum number of clients."""

    code = "too_many_connections"


class InternalError(RecalldClientError):
    """The daemon hit a bug; its log has the traceback."""

    code = "internal"


_BY_CODE: dict[str, type[RecalldClientError]] = {
    "bad_request": BadRequest,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "config": ConfigError,
    "index": IndexUnavailable,
    "provider": ProviderError,
    "unavailable": Unavailable,
    "too_many_connections": TooManyConnections,
    "internal": InternalError,
    "too_large": TooLarge,
    "protocol": ProtocolError,
    "version": VersionMismatch,
    "timeout": Timeout,
}


def error_from_wire(code: object, message: object) -> RecalldClientError:
    """The exception for an error frame's code; unknown codes become :class:`InternalError`."""
    cls = _BY_CODE.get(code, InternalError) if isinstance(code, str) else InternalError
    text = message if isinstance(message, str) else repr(message)
    if cls is InternalError and code != "internal":
        text = f"[{code}] {text}"
    return cls(text)
