"""One request's way to its answer frame: checking it, running its handler, and error frames.

The server reads frames and schedules them (:mod:`recalld.serve.server`); what a request must
hold to be served, how a handler's result or a stream's events become frames, and how any
failure becomes an error frame a client can read live here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from recalld.errors import RecalldError
from recalld.retrieval import served
from recalld.serve.allocator import note_activity
from recalld.serve.connection import Connection
from recalld_client.errors import FrameTooLarge
from recalld_client.protocol import ERROR_CODES, PROTOCOL_VERSION, encode_frame, error_response

# The server's logger: one place to read (and test) what the socket server says.
logger = logging.getLogger("recalld.serve.server")

Handler = Callable[[dict[str, Any]], dict[str, Any]]
StreamHandler = Callable[[dict[str, Any]], AsyncIterator[dict[str, Any]]]

MAX_MESSAGE = 16 * 1024  # error messages are cut here so an error frame always fits
_MAX_LOGGED = 500  # client-supplied text (method names, messages echoing params) in log lines


class WireError(Exception):
    """A protocol-level refusal carrying its wire code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Request(NamedTuple):
    """A request whose id, method and params have the types the protocol asks for."""

    id: int
    method: str
    params: dict[str, Any]


def checked_request(req_id: Any, method: Any, msg: dict[str, Any]) -> Request:
    """``msg`` as a :class:`Request`, or a ``bad_request`` / ``version`` :class:`WireError`."""
    version = msg.get("v", PROTOCOL_VERSION)
    params = msg.get("params")
    params = {} if params is None else params
    if not isinstance(req_id, int) or isinstance(req_id, bool):
        raise WireError("bad_request", "a request needs an integer id")
    if not isinstance(method, str):
        raise WireError("bad_request", "a request needs a method name")
    if not isinstance(params, dict):
        raise WireError("bad_request", "params must be a map")
    if not isinstance(version, int) or isinstance(version, bool):
        raise WireError("bad_request", "v must be an integer")
    if version > PROTOCOL_VERSION and method != "hello":  # hello lets clients negotiate
        raise WireError(
            "version",
            f"this daemon speaks protocol {PROTOCOL_VERSION}, the client {version}: "
            "upgrade recalld or use an older client",
        )
    return Request(req_id, method, params)


def call_handler(
    handler: Handler, req_id: int, method: str, params: dict[str, Any], max_frame: int
) -> bytes:
    """Run a handler and encode its answer, both in a worker thread."""
    try:
        result = handler(params)
        if not isinstance(result, dict):
            raise TypeError(f"the {method!r} handler returned {type(result).__name__}, not a dict")
        try:
            return encode_frame({"id": req_id, "result": result}, max_frame)
        except FrameTooLarge as exc:
            raise WireError(
                "too_large", f"the answer is over the frame cap ({exc}): ask for less"
            ) from exc
    finally:
        note_activity()  # its temporaries go back to the system once the daemon is quiet


async def stream_events(
    conn: Connection, req_id: int, handler: StreamHandler, params: dict[str, Any]
) -> bytes:
    """Send a stream's events as they come; the final frame counts them."""
    events = handler(params)
    sent = 0
    try:
        async for event in events:
            if not await conn.send(encode_frame({"id": req_id, "event": event})):
                break  # the watcher is gone
            sent += 1
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    return encode_frame({"id": req_id, "result": {"events": sent}})


def error_frame(req_id: Any, method: Any, exc: Exception) -> bytes:
    """The error frame answering a failed request, logged at the level its code deserves."""
    code = getattr(exc, "code", None)
    # Messages may echo request parameters (a path, a value of the wrong type): log lines
    # get a bounded excerpt, so that a client cannot fill the log with megabyte lines.
    name = clip(method if isinstance(method, str) else repr(method), 100)
    if isinstance(code, str) and code in ERROR_CODES and code != "internal":
        logger.info("%s failed: [%s] %s", name, code, clip(str(exc)))
        message = str(exc) or type(exc).__name__
    elif isinstance(exc, RecalldError):
        logger.error("%s failed: %s", name, clip(str(exc)), exc_info=exc)
        code, message = "internal", str(exc) or type(exc).__name__
    else:
        logger.error("%s failed with an unexpected error", name, exc_info=exc)
        code = "internal"
        message = f"internal error in {name!r} ({type(exc).__name__}: {exc}); see the log"
    if not isinstance(req_id, int) or isinstance(req_id, bool):
        req_id = None
    message = served.message(message[:MAX_MESSAGE])  # it may quote a file's line
    return encode_frame(error_response(req_id, code, message))


def clip(text: str, limit: int = _MAX_LOGGED) -> str:
    """``text`` cut to ``limit`` characters for a log line (noting how much was cut)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"
