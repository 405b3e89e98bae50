"""One client connection of the server: its writer, its tasks, and back-pressure.

A connection stops being read while it has ``MAX_INFLIGHT`` requests in flight or
``MAX_UNSENT`` bytes of answers the client has not taken, and builds at most ``MAX_BUILDING``
answers at once: a client that never reads costs a few answers of memory, not one per request
it managed to send (issue 14: ~500 MB per connection before).
"""

from __future__ import annotations

import asyncio
import logging

from recalld.serve.request_limits import Held

logger = logging.getLogger("recalld.serve.server")

# Requests of one connection answered at once; with a client that does not read, each may hold
# one answer (a ``get`` is up to 4 MB) until its turn to be written.
MAX_INFLIGHT = 8
# Answers one connection builds at once (in worker threads); further requests wait their turn.
MAX_BUILDING = 2
# Answer bytes a client may leave unread before the server stops reading its requests.
MAX_UNSENT = 4 << 20


class Connection:
    """One client connection: its writer, its running request and stream tasks, and what it has
    not yet taken of our answers (``unsent``), which bounds how much more we read from it."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.requests: set[asyncio.Task[None]] = set()
        self.streams: set[asyncio.Task[None]] = set()
        # Frames go to the transport one at a time, each only once the previous one has
        # drained: a client that does not read holds one frame in the transport, not all of
        # them. Frames waiting for their turn are counted in ``_waiting``.
        self._write_lock = asyncio.Lock()
        self.building = asyncio.Semaphore(MAX_BUILDING)
        self._waiting = 0
        self._sent = asyncio.Event()
        self.held = Held()  # what its requests read and not yet answered cost (request_limits)

    @property
    def unsent(self) -> int:
        """Bytes of answers the client has not taken: waiting frames plus the write buffer."""
        transport = self.writer.transport
        buffered = 0 if transport.is_closing() else transport.get_write_buffer_size()
        return self._waiting + buffered

    async def room(self, limit: int) -> None:
        """Wait until at most ``limit`` bytes of answers are unsent (or the peer is gone)."""
        while self.unsent > limit and not self.writer.is_closing():
            self._sent.clear()
            await self._sent.wait()

    async def send(self, frame: bytes) -> bool:
        """Write one whole frame; False once the peer is gone."""
        size, counted = len(frame), True
        self._waiting += size
        try:
            async with self._write_lock:
                self._waiting, counted = self._waiting - size, False
                if self.writer.is_closing():
                    return False
                # One write() per frame, so concurrent responses never interleave.
                self.writer.write(frame)
                try:
                    await self.writer.drain()
                except (ConnectionError, OSError):
                    return False
                return True
        finally:
            if counted:  # cancelled while waiting for its turn
                self._waiting -= size
            self._sent.set()

    async def abort_if_stalled(self, window: float) -> None:
        """At shutdown: give the client ``window`` seconds to take its answers, then hang up
        (a client that does not read must not hold the daemon's exit)."""
        deadline = asyncio.get_running_loop().time() + window
        while self.unsent and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        if self.unsent:
            logger.warning("closing a client that left %d bytes of answers unread", self.unsent)
            self.writer.transport.abort()
            self._sent.set()

    async def close(self) -> None:
        for task in self.streams:
            task.cancel()
        if not self.writer.is_closing():
            self.writer.close()
        self._sent.set()  # a reader waiting for room sees the connection closing
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 2.0)
        except (TimeoutError, ConnectionError, OSError):
            self.writer.transport.abort()  # a peer that does not read must not hold us
