"""What one request may cost the daemon before it is answered (issue 41 item 4).

A request frame is capped in bytes, but msgpack is compact: one byte decodes into an empty
Python list of ~70 bytes, so a 1 MiB frame could become ~70 MB of objects, and six clients that
pipeline such frames and never read took the daemon from 88 MB to 2.3 GB. Two bounds:

- **Values per request**: a frame's values are counted (a walk over its bytes, no objects made)
  before it is decoded; past ``MAX_VALUES`` it is refused with ``too_large``. A real request has
  a few dozen (a query, a path, some tags). Decoded, a request then costs at most its bytes
  plus ``VALUE_COST`` a value.
- **Requests held**: what requests read but not yet answered cost, per connection
  (``PER_CONNECTION``) and in total (``TOTAL``). Over either, the server stops reading from that
  connection until answers free some, so a client that never reads holds at most its share. A
  connection with nothing held may always send one request of up to ``SMALL``: a client that
  asks one thing at a time is never kept waiting by others.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Final

from recalld_client.errors import FrameTooLarge, ProtocolError
from recalld_client.protocol import HEADER, FrameDecoder, unpack

MAX_VALUES: Final = 4096
# Bytes a decoded value may cost beyond its encoded bytes (an empty list: 56 + 16 of GC header).
VALUE_COST: Final = 128
PER_CONNECTION: Final = 2 << 20
TOTAL: Final = 32 << 20
SMALL: Final = 64 << 10

# Bytes that follow a type byte, for the fixed-size types (nil, bool, numbers, fixext).
_FIXED: Final = {
    0xC0: 0, 0xC2: 0, 0xC3: 0,
    0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,
    0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8,
    0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17,
}  # fmt: skip
# Types whose length follows the type byte: (bytes of the length, extra bytes before the data).
_SIZED: Final = {
    0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0),  # bin
    0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1),  # ext (one byte of ext type)
    0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0),  # str
}  # fmt: skip
# Containers with a counted length: (bytes of the count, values per counted item).
_CONTAINERS: Final = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


class TooManyValues(FrameTooLarge):
    """A request frame that would decode into more than ``MAX_VALUES`` values."""


def count_values(body: bytes | bytearray | memoryview, limit: int = MAX_VALUES) -> int:
    """The values in the one msgpack object ``body`` holds (a map's keys and values each
    count), walking its bytes without decoding; :class:`TooManyValues` past ``limit``.

    A malformed or truncated body is counted as far as it goes: decoding it reports the error.
    """
    data = memoryview(body).cast("B")
    try:
        count = _walk(data, limit)
    finally:
        data.release()  # raised below, not in the walk: a traceback must not hold the frame
    if count > limit:
        raise TooManyValues(
            f"a request holds more than {limit:,} values: send fewer (a real request holds "
            "a few dozen)"
        )
    return count


def _walk(data: memoryview, limit: int) -> int:
    """The values in ``data``'s one object, stopping at ``limit + 1``."""
    end, pos, pending, count = len(data), 0, 1, 0
    while pending and pos < end and count <= limit:
        kind = data[pos]
        pos += 1
        pending -= 1
        count += 1
        if kind <= 0x7F or kind >= 0xE0:  # fixint
            continue
        if kind <= 0x8F:  # fixmap
            pending += 2 * (kind & 0x0F)
        elif kind <= 0x9F:  # fixarray
            pending += kind & 0x0F
        elif kind <= 0xBF:  # fixstr
            pos += kind & 0x1F
        elif kind in _FIXED:
            pos += _FIXED[kind]
        elif kind in _SIZED:
            width, extra = _SIZED[kind]
            pos += width + extra + _uint(data, pos, width)
        elif kind in _CONTAINERS:
            width, per = _CONTAINERS[kind]
            pending += per * _uint(data, pos, width)
            pos += width
        else:  # 0xC1, never used: the decoder says so
            break
    return count


def _uint(data: memoryview, pos: int, width: int) -> int:
    """The big-endian unsigned integer of ``width`` bytes at ``pos`` (0 past the end)."""
    if pos + width > len(data):
        return 0
    return int(struct.unpack_from({1: ">B", 2: ">H", 4: ">I"}[width], data, pos)[0])


def cost(length: int, values: int) -> int:
    """What a request of ``length`` bytes and ``values`` values may cost once decoded."""
    return length + VALUE_COST * values


class Held:
    """What one connection's requests hold (read, not yet answered)."""

    __slots__ = ("amount",)

    def __init__(self) -> None:
        self.amount = 0


class RequestBudget:
    """The cost of requests read and not yet answered, per connection and in total.

    Used on the event loop only.
    """

    def __init__(
        self, per_connection: int = PER_CONNECTION, total: int = TOTAL, small: int = SMALL
    ) -> None:
        self.per_connection, self.total, self.small = per_connection, total, small
        self.held = 0
        self.waits = 0  # times a connection's reading paused for the budget (for status)
        self._freed = asyncio.Event()

    def _fits(self, holder: Held, amount: int) -> bool:
        if holder.amount == 0 and (amount <= self.small or self.held == 0):
            return True  # one request at a time always goes through (a big one when all is free)
        return holder.amount + amount <= self.per_connection and self.held + amount <= self.total

    async def take(self, holder: Held, amount: int) -> None:
        """Wait until ``holder`` may hold ``amount`` more, then hold it."""
        if not self._fits(holder, amount):
            self.waits += 1
            while not self._fits(holder, amount):
                self._freed.clear()
                await self._freed.wait()  # every waiter wakes and checks again
        holder.amount += amount
        self.held += amount

    def give_back(self, holder: Held, amount: int) -> None:
        """Release what a request held (its answer is built, or it failed)."""
        holder.amount -= amount
        self.held -= amount
        self._freed.set()


class RequestDecoder(FrameDecoder):
    """A :class:`FrameDecoder` of requests: it remembers the length the current frame declares,
    and says what the next frame will cost decoded before decoding it."""

    declared = 0
    _counted: tuple[int, int] = (-1, 0)  # (offset of a frame, its values)

    def next_cost(self) -> int | None:
        """What the next frame costs decoded, None until it is all in (0 for a frame over the
        cap: decoding it raises); :class:`TooManyValues` for one past the cap of values."""
        if self._error is not None:
            raise self._error
        if self.buffered < HEADER.size:
            return None
        (length,) = HEADER.unpack_from(self._buf, self._pos)
        start = self._pos + HEADER.size
        if length > self.max_frame:
            return 0
        if len(self._buf) - start < length:
            return None
        if self._counted[0] != self._pos:
            try:
                with memoryview(self._buf)[start : start + length] as view:
                    self._counted = (self._pos, count_values(view))
            except TooManyValues as exc:
                self._error = exc
                self._drop()
                raise
        return cost(length, self._counted[1])

    def next_frame(self) -> dict[str, Any] | None:
        if self._error is None and self.buffered >= HEADER.size:
            (self.declared,) = HEADER.unpack_from(self._buf, self._pos)
        self._counted = (-1, 0)  # counted for the frame at hand only (offsets are reused)
        try:
            return super().next_frame()
        except ProtocolError as exc:
            if not isinstance(exc, FrameTooLarge):  # (its count of bytes read is still needed)
                self._drop()
            raise

    def _drop(self) -> None:
        """Let the bytes go at once: the stream is broken, and the error's traceback (a
        cycle through this decoder) would keep up to a frame of them until a collection."""
        self._buf, self._pos = bytearray(), 0

    def _decode(self, body: memoryview) -> dict[str, Any]:
        return unpack(body, max_items=MAX_VALUES)
