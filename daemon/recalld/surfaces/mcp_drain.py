"""Every request read before stdin closed gets its answer (``recalld mcp``).

The SDK's server loop ends when its read stream does, and cancels the calls still running: a
host that writes its requests and closes stdin (``printf '...' | recalld mcp``, a script, a
one-shot agent hook) got the `initialize` answer and lost the tool calls. Here the server reads
from a stream of our own, fed from stdin: at the end of stdin it stays open until every request
read has been answered on stdout (or cancelled by the client), then ends, and the server with it.
``MAX_DRAIN_S`` bounds the wait, so a call that never returns cannot keep the process alive.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream

log = logging.getLogger(__name__)

__all__ = ["MAX_DRAIN_S", "Pending", "draining"]

#: How long answers are waited for after stdin closed (a call that starts the daemon and searches
#: takes a few seconds; a tool call never legitimately takes minutes).
MAX_DRAIN_S = 120.0

Run = Callable[[ObjectReceiveStream[Any], ObjectSendStream[Any]], Awaitable[None]]


class Pending:
    """The ids of requests read and not yet answered, and whether the input has ended."""

    def __init__(self) -> None:
        self.ids: set[Any] = set()
        self.ended = False
        self.settled = anyio.Event()

    def read(self, message: Any) -> None:
        """Note a message from the client: a request to answer, or a cancelled one."""
        inner: Any = getattr(message, "message", None)
        method = getattr(inner, "method", None)
        if method is None:
            return
        if hasattr(inner, "id"):
            self.ids.add(inner.id)
        elif method == "notifications/cancelled":
            params = getattr(inner, "params", None) or {}
            self.ids.discard(params.get("requestId") if isinstance(params, dict) else None)
            self._check()

    def written(self, message: Any) -> None:
        """Note a message to the client: a response or an error ends its request."""
        inner: Any = getattr(message, "message", None)
        if inner is not None and getattr(inner, "method", None) is None and hasattr(inner, "id"):
            self.ids.discard(inner.id)
            self._check()

    def end(self) -> None:
        self.ended = True
        self._check()

    def _check(self) -> None:
        if self.ended and not self.ids:
            self.settled.set()


async def draining(read: ObjectReceiveStream[Any], write: ObjectSendStream[Any], run: Run) -> None:
    """``run(read', write')`` where ``read'`` ends only once what ``read`` brought is answered."""
    pending = Pending()
    to_server, server_reads = anyio.create_memory_object_stream[Any](16)
    server_writes, to_client = anyio.create_memory_object_stream[Any](16)

    async def pump_in() -> None:
        async with to_server:
            async for message in read:
                pending.read(message)
                await to_server.send(message)
            pending.end()
            with anyio.move_on_after(MAX_DRAIN_S) as scope:
                await pending.settled.wait()
            if scope.cancelled_caught:
                log.warning(
                    "stdin closed; %d calls still unanswered after %.0f s: leaving them",
                    len(pending.ids),
                    MAX_DRAIN_S,
                )

    async def pump_out() -> None:
        # ``write`` closed at the end, as the server closes its own: the transport's writer
        # ends only then
        async with to_client, write:
            async for message in to_client:
                await write.send(message)
                pending.written(message)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_in)
        async with anyio.create_task_group() as out:
            out.start_soon(pump_out)
            async with server_writes:
                await run(server_reads, server_writes)
        # Every answer the server wrote is on stdout; stdin may still be open (the server
        # ended for another reason): stop reading it.
        tg.cancel_scope.cancel()
