"""The daemon's socket server: connections, reading frames, scheduling them on a handler table.

The server knows no search: the engine hands it a table of blocking ``Handler`` functions (run in
a bounded thread pool, never on the event loop) and async ``StreamHandler`` generators (``watch``).
``hello`` (and a default ``shutdown``) are built in.

    server = Server(engine.handlers, engine.streams, paths.socket_path())
    asyncio.run(server.serve_forever())       # returns after request_shutdown()

One daemon per home (:mod:`recalld.serve.instance`): an exclusive lock on ``recalld.lock`` held for
the daemon's life (it also holds the pid). Binding the socket and checking peers live in
:mod:`recalld.serve.listener`, one request's way to its answer frame in
:mod:`recalld.serve.dispatch`, back-pressure per connection in
:mod:`recalld.serve.connection`, what requests may cost in :mod:`recalld.serve.request_limits`,
and which connections are served (file descriptors) in :mod:`recalld.serve.admission`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from recalld import __version__
from recalld.cpus import usable_cores
from recalld.errors import Unavailable
from recalld.serve import dispatch, listener
from recalld.serve.admission import LOG_EVERY_S, Admission, LogEvery
from recalld.serve.connection import MAX_INFLIGHT, MAX_UNSENT, Connection
from recalld.serve.dispatch import Handler, StreamHandler, WireError
from recalld.serve.instance import LOCK_NAME, AlreadyRunning, private_dir, take_lock
from recalld.serve.request_limits import RequestBudget, RequestDecoder, TooManyValues
from recalld.serve.server_thread import ServerThread
from recalld_client.errors import FrameTooLarge, ProtocolError
from recalld_client.protocol import (
    HEADER,
    MAX_FRAME,
    PROTOCOL_VERSION,
    encode_frame,
    error_response,
)

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_REQUEST",
    "AlreadyRunning",
    "Handler",
    "Server",
    "ServerThread",
    "StreamHandler",
]

logger = logging.getLogger(__name__)

# Requests are small (a query is capped at 100 KB, a path at 4 KB); answers may be larger
# (``get`` returns up to 4 MB), so the inbound cap is lower than the frame cap of answers.
MAX_REQUEST = 1 << 20
# A client that stops in the middle of a frame is dropped after this long without a byte;
# idle connections *between* frames (the tray's watch, an MCP shim) are never timed out.
FRAME_TIMEOUT = 30.0
# Clients at once. Each costs a file descriptor (the soft limit is often 1024, which the index,
# the model and the watcher share) and some memory; further clients get a "too many
# connections" frame, so that they say the daemon is full, not that it is not running.
MAX_CONNECTIONS = 200
# Connections the kernel queues before accept(): above MAX_CONNECTIONS, so that a burst of
# clients is answered (if only with a refusal) rather than left in a full queue.
LISTEN_BACKLOG = 1024


class Server:
    """Serves a handler table on a Unix socket (a named pipe on Windows).

    ``max_connections`` caps clients at once; ``max_inflight`` caps concurrent requests per
    connection and ``max_unsent`` the answer bytes it has not read (the server stops reading
    from a connection at either cap, so a client that never reads costs at most
    ``max_inflight`` answers plus ``max_unsent`` bytes); ``workers`` sizes the
    thread pool of blocking handlers; ``shutdown_grace`` is how long :meth:`close` lets
    in-flight requests finish, and ``unread_grace`` how long it lets a client take the answers
    it has not read. ``max_request`` caps an incoming frame (answers may be up to
    ``max_frame``) and ``frame_timeout`` drops a client stalled in the middle of a frame, so a
    connection holds at most ``max_request`` bytes of partial input, and not forever.
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        streams: Mapping[str, StreamHandler],
        socket_path: Path,
        *,
        max_frame: int = MAX_FRAME,
        max_connections: int = MAX_CONNECTIONS,
        max_inflight: int = MAX_INFLIGHT,
        max_unsent: int = MAX_UNSENT,
        workers: int | None = None,
        shutdown_grace: float = 3.0,
        unread_grace: float = 1.0,
        max_request: int = MAX_REQUEST,
        frame_timeout: float = FRAME_TIMEOUT,
        quick: Collection[str] = (),
        keep_lock: bool = False,
        lock_fd: int | None = None,
        identity: Mapping[str, str] | None = None,
    ) -> None:
        bad = (set(handlers) & set(streams)) | ({"hello"} & {*handlers, *streams})
        if bad:
            raise ValueError(f"methods defined twice or built in: {sorted(bad)}")
        self.handlers: dict[str, Handler] = {"shutdown": self._shutdown_handler, **handlers}
        self.streams = dict(streams)
        self.socket_path = Path(socket_path)
        self.identity = dict(identity or {})  # what hello says it serves: config, data_dir
        self.max_frame = max_frame
        self.max_request = min(max_request, max_frame)
        self.frame_timeout = frame_timeout
        self.max_connections = max_connections
        self.max_inflight = max_inflight
        self.max_unsent = max_unsent
        self.workers = workers or min(32, usable_cores() + 4)
        self.shutdown_grace = shutdown_grace
        self.unread_grace = min(unread_grace, shutdown_grace)
        self._uid: int | None = os.getuid() if sys.platform != "win32" else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._listeners: list[listener.Listener] = []
        self._executor: ThreadPoolExecutor | None = None
        # Cheap methods (status, get) get their own small pool: under load they must not queue
        # behind a backlog of searches (p50 160 ms vs 0.4 ms alone with one shared pool).
        self.quick = frozenset(quick)
        self._quick_executor: ThreadPoolExecutor | None = None
        # The daemon takes the lock before it opens the index and hands it over (``lock_fd``).
        self._lock_fd: int | None = lock_fd
        # The daemon keeps the home's lock past close() until its writer has stopped, so that
        # a successor never writes the index beside it.
        self.keep_lock = keep_lock
        self._socket_id: tuple[int, int] | None = None
        self._conns: dict[Connection, asyncio.Task[Any] | None] = {}
        self._requests: set[asyncio.Task[None]] = set()
        self._closing = False
        self.admission = Admission(max_connections, LISTEN_BACKLOG)
        # Connections closed for bad input: a line every few seconds, however many clients.
        self._closings = LogEvery(LOG_EVERY_S)
        # What requests read and not yet answered hold, per connection and in total.
        self.budget = RequestBudget()
        self._closed: asyncio.Future[None] | None = None

    @property
    def capabilities(self) -> list[str]:
        """The methods served, ``hello`` included."""
        return sorted({"hello", *self.handlers, *self.streams})

    async def start(self) -> None:
        """Take the home's lock and listen; :class:`AlreadyRunning` if another daemon has it."""
        if self._listeners:
            return
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # What clients may hold is counted from the descriptors open now (the index, the model).
        self.admission = Admission(self.max_connections, LISTEN_BACKLOG)
        self._loop.set_exception_handler(self.admission.on_loop_error)
        runtime = self.socket_path.parent
        private_dir(runtime)
        if self._lock_fd is None:
            self._lock_fd = take_lock(runtime / LOCK_NAME, self.socket_path)
        try:
            if sys.platform == "win32":
                self._listeners = await listener.listen_pipe(self.socket_path, self._on_connection)
            else:
                sock, self._socket_id = listener.bind_socket(self.socket_path)
                self._listeners = [
                    await asyncio.start_unix_server(
                        self._on_connection,
                        sock=sock,
                        backlog=self.admission.backlog(LISTEN_BACKLOG),
                    )
                ]
        except BaseException:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="recalld-handler")
        if self.quick:
            self._quick_executor = ThreadPoolExecutor(2, thread_name_prefix="recalld-quick")
        logger.info(
            "recalld %s listening on %s (pid %d)", __version__, self.socket_path, os.getpid()
        )

    async def serve_forever(self) -> None:
        """Start, serve until :meth:`request_shutdown` (or cancellation), then close cleanly."""
        await self.start()
        assert self._stop is not None
        try:
            await self._stop.wait()
        finally:
            await self.close()

    def request_shutdown(self) -> None:
        """Ask :meth:`serve_forever` to stop; safe from any thread (handlers run in threads)."""
        loop, stop = self._loop, self._stop
        if loop is None or stop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(stop.set)

    async def close(self) -> None:
        """Stop accepting, let in-flight requests finish, end streams, remove the socket."""
        if not self._listeners:
            return
        if self._closed is None:  # one closing, however many callers
            self._closed = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closed)

    async def _close(self) -> None:
        self._closing = True
        for serving in self._listeners:
            serving.close()
        me = asyncio.current_task()
        stalls = [asyncio.ensure_future(c.abort_if_stalled(self.unread_grace)) for c in self._conns]
        pending = {t for t in self._requests if t is not me}
        if pending:
            _, late = await asyncio.wait(pending, timeout=self.shutdown_grace)
            for task in late:
                logger.warning("request still running after %.0f s: cancelled", self.shutdown_grace)
                task.cancel()
        if stalls:
            await asyncio.wait(stalls)
        await asyncio.gather(*(conn.close() for conn in list(self._conns)))
        tasks = [t for t in self._conns.values() if t is not None and t is not me]
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        for serving in self._listeners:
            if isinstance(serving, asyncio.AbstractServer):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(serving.wait_closed(), 2.0)
        for pool in (self._executor, self._quick_executor):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._remove_socket()
        if not self.keep_lock:
            self.release_lock()
        if self._stop is not None:
            self._stop.set()
        logger.info("recalld stopped")

    def release_lock(self) -> None:
        """Let another daemon start for this home (close() does it unless ``keep_lock``)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- listening ---------------------------------------------------------------------------

    def _remove_socket(self) -> None:
        listener.remove_socket(self.socket_path, self._socket_id)
        self._socket_id = None

    def _peer_refusal(self, writer: asyncio.StreamWriter) -> str | None:
        """Why this peer may not talk to us (Linux: another uid), or None."""
        return listener.peer_refusal(writer, self._uid)

    # -- connections -------------------------------------------------------------------------

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        conn = Connection(writer)
        admission = self.admission
        verdict = admission.verdict()
        refusal: tuple[str, str] | None = None
        if self._closing:
            refusal = ("unavailable", "the daemon is shutting down: retry in a moment")
        elif verdict != "serve":
            refusal = (
                "too_many_connections",
                f"too many connections: the daemon (pid {os.getpid()}) runs but already "
                f"serves its maximum of {admission.max_connections}: close idle clients or retry",
            )
        elif why := self._peer_refusal(writer):
            refusal = ("forbidden", why)
        if refusal is not None:
            await self._refuse(reader, conn, *refusal, linger=verdict != "refuse_now")
            return
        admission.served += 1
        self._conns[conn] = asyncio.current_task()
        try:
            await self._read_requests(reader, conn)
            # EOF: the client may have only shut its writing side, so answer what it sent.
            for task in conn.streams:
                task.cancel()
            if conn.requests:
                await asyncio.wait(set(conn.requests))
        except Exception:
            logger.exception("connection failed")
        finally:
            del self._conns[conn]
            admission.served -= 1
            await conn.close()

    async def _refuse(
        self, reader: asyncio.StreamReader, conn: Connection, code: str, why: str, *, linger: bool
    ) -> None:
        """Answer a refused connection with one error frame, then hang up.

        With ``linger``, the write side is shut first and what the client sends is read (up to
        a second) before closing: closing at once could make the client's first request fail
        with a broken pipe before it reads why it was refused. Without (a flood of clients),
        the connection's descriptor goes back at once.
        """
        admission = self.admission
        admission.note_refusal(why)  # one line now and then, however many clients
        admission.lingering += 1
        try:
            await conn.send(encode_frame(error_response(None, code, why)))
            if linger:
                with contextlib.suppress(OSError, RuntimeError):
                    if conn.writer.can_write_eof():
                        conn.writer.write_eof()
                with contextlib.suppress(TimeoutError, ConnectionError, OSError):
                    async with asyncio.timeout(1.0):
                        while await reader.read(listener.CHUNK):
                            pass
            await conn.close()
        finally:
            admission.lingering -= 1

    async def _read_requests(self, reader: asyncio.StreamReader, conn: Connection) -> None:
        decoder = RequestDecoder(self.max_request)
        slots = asyncio.Semaphore(self.max_inflight)
        while True:
            try:
                if decoder.buffered:  # in the middle of a frame: the rest must come
                    data = await asyncio.wait_for(reader.read(listener.CHUNK), self.frame_timeout)
                else:
                    data = await reader.read(listener.CHUNK)
            except TimeoutError:
                why = (
                    f"incomplete frame: {decoder.buffered} bytes, then nothing for "
                    f"{self.frame_timeout:g} s"
                )
                self._closings.log("closing a connection: %s", why)
                await conn.send(encode_frame(error_response(None, "protocol", why)))
                return
            except (ConnectionError, OSError):
                return
            if not data:
                return
            decoder.feed(data)
            try:
                while (amount := decoder.next_cost()) is not None:
                    if self._closing:  # shutting down: read no more requests
                        return
                    # Back-pressure: at the cap of requests in flight, while the client has not
                    # taken max_unsent bytes of answers, or while its requests (or everyone's)
                    # hold the most they may, stop reading its requests.
                    await slots.acquire()
                    await conn.room(self.max_unsent)
                    await self.budget.take(conn.held, amount)
                    try:
                        msg = decoder.next_frame()
                    except ProtocolError:
                        slots.release()
                        self.budget.give_back(conn.held, amount)
                        raise
                    assert msg is not None
                    self._spawn(conn, msg, slots, amount)
            except ProtocolError as exc:  # FrameTooLarge included: its body is never stored
                await self._bad_frame(reader, conn, decoder, exc)
                return

    async def _bad_frame(
        self,
        reader: asyncio.StreamReader,
        conn: Connection,
        decoder: RequestDecoder,
        exc: ProtocolError,
    ) -> None:
        """Answer a frame that cannot be served with one error frame (the caller hangs up)."""
        code, why = "protocol", str(exc)[: dispatch.MAX_MESSAGE]
        if isinstance(exc, TooManyValues):
            code = "too_large"  # the frame is all read: nothing to discard
        elif isinstance(exc, FrameTooLarge):
            code = "too_large"
            why = (
                f"a request of {decoder.declared} bytes is over the {self.max_request}-"
                "byte cap of requests: send less (a query or path is far smaller)"
            )
            if decoder.declared <= self.max_frame:
                # A frame the client was allowed to send: let it finish sending (the bytes
                # are dropped as they come), so that it reads this answer rather than a
                # broken pipe.
                await self._discard(reader, decoder.declared + HEADER.size - decoder.buffered)
        self._closings.log("closing a connection: %s", dispatch.clip(why))
        await conn.send(encode_frame(error_response(None, code, why)))

    async def _discard(self, reader: asyncio.StreamReader, count: int) -> None:
        """Read and drop ``count`` bytes (less if the peer stops or stalls)."""
        with contextlib.suppress(TimeoutError, ConnectionError, OSError):
            while count > 0:
                data = await asyncio.wait_for(
                    reader.read(min(listener.CHUNK, count)), self.frame_timeout
                )
                if not data:
                    return
                count -= len(data)

    def _spawn(
        self, conn: Connection, msg: dict[str, Any], slots: asyncio.Semaphore, amount: int
    ) -> None:
        task = asyncio.create_task(self._dispatch(conn, msg, amount))
        method = msg.get("method")
        owner = (
            conn.streams if isinstance(method, str) and method in self.streams else conn.requests
        )
        owner.add(task)
        if owner is conn.requests:
            self._requests.add(task)

        def done(t: asyncio.Task[None]) -> None:
            owner.discard(t)
            self._requests.discard(t)
            slots.release()

        task.add_done_callback(done)

    # -- dispatch ----------------------------------------------------------------------------

    async def _dispatch(self, conn: Connection, msg: dict[str, Any], amount: int) -> None:
        """Answer one request; what it held is given back once its answer is built."""
        req_id = msg.get("id")
        method = msg.get("method")
        try:
            frame = await self._answer(conn, req_id, method, msg)
        except Exception as exc:  # noqa: BLE001 - a handler failure becomes an error frame
            frame = dispatch.error_frame(req_id, method, exc)
        finally:
            del msg  # the request's objects go now, not when a slow reader takes the answer
            self.budget.give_back(conn.held, amount)
        await conn.send(frame)

    async def _answer(
        self, conn: Connection, req_id: Any, method: Any, msg: dict[str, Any]
    ) -> bytes:
        req_id, method, params = dispatch.checked_request(req_id, method, msg)
        if self._closing:
            raise Unavailable("the daemon is shutting down: retry in a moment")
        if method == "hello":
            return encode_frame({"id": req_id, "result": self._hello()}, self.max_frame)
        stream = self.streams.get(method)
        if stream is not None:
            return await dispatch.stream_events(conn, req_id, stream, params)
        handler = self.handlers.get(method)
        if handler is None:
            raise WireError(
                "bad_request",
                f"unknown method {method!r}: this daemon serves {', '.join(self.capabilities)}",
            )
        assert self._loop is not None and self._executor is not None
        # A connection builds at most MAX_BUILDING answers at once, each only while it has
        # room: requests read before the client stopped reading do not all build (and hold) a
        # multi-megabyte answer at once.
        async with conn.building:
            await conn.room(self.max_unsent)
            pool = self._quick_executor if method in self.quick else None
            return await self._loop.run_in_executor(
                pool or self._executor,
                dispatch.call_handler,
                handler,
                req_id,
                method,
                params,
                self.max_frame,
            )

    def _hello(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL_VERSION,
            "version": __version__,
            "pid": os.getpid(),
            "capabilities": self.capabilities,
            "max_request": self.max_request,
            **self.identity,
        }

    def _shutdown_handler(self, params: dict[str, Any]) -> dict[str, Any]:
        """Default ``shutdown`` (the engine may replace it, and then calls request_shutdown)."""
        self.request_shutdown()
        return {"stopping": True, "pid": os.getpid()}
