"""The wire format, shared by client and daemon (the daemon imports this module).

A frame is a 4-byte big-endian length followed by one msgpack map of that many bytes.

    request   {"v": 1, "id": 7, "method": "search", "params": {...}}
    response  {"id": 7, "result": {...}}
           or {"id": 7, "error": {"code": "forbidden", "message": "..."}}
    stream    {"id": 7, "event": {...}} repeated, then a normal response ends it (``watch``)

An error about the connection itself (undecodable frame, over the cap) has ``"id": None`` and is
followed by the daemon closing the connection.
"""

from __future__ import annotations

import struct

import msgpack

from recalld_client.errors import ConnectionLost, FrameTooLarge, ProtocolError

# Not typing.TYPE_CHECKING: importing typing costs `recalld search` ~3 ms of start-up. mypy
# takes any TYPE_CHECKING as true and checks these classes as protocols; at run time they are
# plain classes, which nothing instantiates or tests with isinstance.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Final, Protocol
else:
    Protocol = object

PROTOCOL_VERSION: Final = 1
MAX_FRAME: Final = 8 * 1024 * 1024
HEADER: Final = struct.Struct(">I")

ERROR_CODES: Final = frozenset(
    {
        "bad_request",
        "forbidden",
        "not_found",
        "config",
        "index",
        "provider",
        "unavailable",
        "too_many_connections",
        "internal",
        "too_large",
        "protocol",
        "version",
        "timeout",
    }
)

METHODS: Final = ("hello", "search", "get", "status", "sync", "reindex", "watch", "shutdown")
# Never resent after a lost connection (every other request is resent once on a new one).
# A forget resent after a lost answer would find its lines gone and refuse; a write is resent
# (an exact repeat of an entry is not written twice).
NOT_IDEMPOTENT: Final = frozenset({"shutdown", "forget"})


class SupportsRecv(Protocol):
    """Anything with a socket-like ``recv`` (a socket, a :class:`~recalld_client.Transport`)."""

    def recv(self, n: int, /) -> bytes: ...


class SupportsSendall(Protocol):
    """Anything with a socket-like ``sendall``."""

    def sendall(self, data: bytes, /) -> None: ...


def pack(obj: Any) -> bytes:
    """One msgpack value (str as str, bytes as bin)."""
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(body: bytes | bytearray | memoryview, max_items: int | None = None) -> dict[str, Any]:
    """Decode one frame body; anything but a single msgpack map is a :class:`ProtocolError`.

    ``max_items`` caps the length of every array and map in it (msgpack's own limits; strings
    and binaries are bounded by the body's bytes, as msgpack does by default).
    """
    limits: dict[str, int] = {}
    if max_items is not None:
        limits = {"max_array_len": max_items, "max_map_len": max_items}
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False, **limits)
    except Exception as exc:  # msgpack raises ValueError, TypeError, its own errors...
        raise ProtocolError(f"invalid msgpack in frame: {str(exc) or type(exc).__name__}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(f"a frame must hold a msgpack map, not {type(obj).__name__}")
    return obj


def encode_frame(obj: dict[str, Any], max_frame: int = MAX_FRAME) -> bytes:
    """Length header plus msgpack body; :class:`FrameTooLarge` if the body is over ``max_frame``.

    A ``TypeError`` (a value msgpack cannot encode) is left to the caller: it is a bug, not a
    protocol error.
    """
    body = pack(obj)
    if len(body) > max_frame:
        raise FrameTooLarge(f"frame of {len(body)} bytes is over the {max_frame}-byte cap")
    return HEADER.pack(len(body)) + body


class FrameDecoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, then iterate for complete maps.

    A declared length over the cap raises :class:`FrameTooLarge` as soon as the 4 header bytes
    are in, before any of the body is buffered. After an error the decoder stays broken (the
    stream can no longer be trusted to be aligned on frames) and raises the same error again.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._pos = 0  # consumed prefix of _buf, compacted lazily to avoid O(n^2) copies
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        frame = self.next_frame()
        if frame is None:
            raise StopIteration
        return frame

    def next_frame(self) -> dict[str, Any] | None:
        """The next complete frame, or None until more bytes arrive."""
        if self._error is not None:
            raise self._error
        if self.buffered < HEADER.size:
            return None
        (length,) = HEADER.unpack_from(self._buf, self._pos)
        if length > self.max_frame:
            self._error = FrameTooLarge(
                f"frame declares {length} bytes, over the {self.max_frame}-byte cap"
            )
            raise self._error
        start = self._pos + HEADER.size
        if len(self._buf) - start < length:
            return None
        self._pos = start + length
        try:
            # Released on exit, even on error, so that the bytearray can still be resized.
            with memoryview(self._buf)[start : self._pos] as view:
                return self._decode(view)
        except ProtocolError as exc:
            self._error = exc
            raise

    def _decode(self, body: memoryview) -> dict[str, Any]:
        """One complete frame body into its map (a subclass may check it first)."""
        return unpack(body)


def _recv_exactly(stream: SupportsRecv, n: int, *, at_boundary: bool) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = stream.recv(min(n - got, 1 << 16))
        if not chunk:
            where = "between frames" if at_boundary and got == 0 else "in the middle of a frame"
            raise ConnectionLost(f"connection closed by the peer {where}")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream: SupportsRecv, max_frame: int = MAX_FRAME) -> dict[str, Any]:
    """Read one frame from a blocking socket-like object.

    Raises :class:`ConnectionLost` at end of stream and :class:`FrameTooLarge` for a declared
    length over ``max_frame`` (the body is then left unread).
    """
    (length,) = HEADER.unpack(_recv_exactly(stream, HEADER.size, at_boundary=True))
    if length > max_frame:
        raise FrameTooLarge(f"frame declares {length} bytes, over the {max_frame}-byte cap")
    return unpack(_recv_exactly(stream, length, at_boundary=False))


def write_frame(stream: SupportsSendall, obj: dict[str, Any], max_frame: int = MAX_FRAME) -> None:
    """Encode ``obj`` and send it whole."""
    stream.sendall(encode_frame(obj, max_frame))


def request(req_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A request map."""
    return {"v": PROTOCOL_VERSION, "id": req_id, "method": method, "params": params or {}}


def error_response(req_id: object, code: str, message: str) -> dict[str, Any]:
    """An error response map (``req_id`` None for errors about the connection)."""
    return {"id": req_id, "error": {"code": code, "message": message}}
