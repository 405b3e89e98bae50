"""The blocking client: one lazily opened connection, one request at a time, thread-safe."""

from __future__ import annotations

import enum
import itertools
import time
from _thread import allocate_lock  # threading.Lock itself, without importing threading
from pathlib import Path

from recalld_client import locations
from recalld_client.errors import (
    BadRequest,
    ConnectionLost,
    ProtocolError,
    RecalldClientError,
    Timeout,
    TooLarge,
    TooManyConnections,
    WrongDaemon,
    error_from_wire,
)
from recalld_client.protocol import (
    NOT_IDEMPOTENT,
    PROTOCOL_VERSION,
    FrameDecoder,
    encode_frame,
    request,
)
from recalld_client.transport import Transport, default_transport

# Not typing.TYPE_CHECKING: typing (~3 ms) and the TypedDicts cost `recalld search` start-up
# time, and only type checkers read them here (mypy takes any TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from types import TracebackType
    from typing import Any, cast

    from recalld_client.types import GetResponse, Hello, Mode, SearchResponse, StatusResponse
else:

    def cast(_type: object, value: object) -> object:
        """typing.cast: the value itself."""
        return value


_CHUNK = 1 << 16


class _Default(enum.Enum):
    TIMEOUT = enum.auto()


DEFAULT_TIMEOUT = _Default.TIMEOUT


class _Connection:
    """A connected transport and the decoder of its incoming bytes."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.decoder = FrameDecoder()
        self.checked = False  # whether the daemon's hello named this process's home

    def next_frame(self, deadline: float | None) -> dict[str, Any] | None:
        """The next frame, or None if the daemon closed the connection cleanly between frames."""
        while (frame := self.decoder.next_frame()) is None:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout("no answer from the daemon in time")
                self.transport.settimeout(left)
            else:
                self.transport.settimeout(None)
            data = self.transport.recv(_CHUNK)
            if not data:
                if self.decoder.buffered:
                    raise ConnectionLost("the daemon closed the connection in mid-frame")
                return None
            self.decoder.feed(data)
        return frame

    def close(self) -> None:
        self.transport.close()


def _unwrap(msg: dict[str, Any]) -> dict[str, Any]:
    """The result map of a response, or the error it carries raised as an exception."""
    if "error" in msg:
        err = msg["error"]
        if not isinstance(err, dict):
            raise ProtocolError(f"malformed error in response: {err!r}")
        raise error_from_wire(err.get("code"), err.get("message", ""))
    result = msg.get("result")
    if not isinstance(result, dict):
        raise ProtocolError("response has neither a result map nor an error")
    return result


class Client:
    """A connection to the recalld daemon.

    Connects on first use. With ``reconnect`` a request whose connection broke (the daemon
    restarted) is sent again once on a new connection, except ``shutdown``. Use it as a context
    manager, or call :meth:`close`; a closed client reconnects if used again.

        with Client() as c:
            hits = c.search("what did we decide about the cache", max_results=3)

    ``timeout`` bounds each request (None: wait forever); ``transport_factory`` builds the
    transport (default: the platform's, for ``socket_path``).

    ``check_home`` (default: when ``socket_path`` is this home's, i.e. not given, or ``config``
    is): each new connection first makes sure the daemon serves ``config`` (default:
    ``RECALLD_CONFIG``, ``$RECALLD_HOME/config.toml`` or the platform's) and this data folder,
    else raises :class:`WrongDaemon`. It reads the answer of the connection's first request
    when that is ``hello``, and sends a ``hello`` first otherwise.
    """

    def __init__(
        self,
        socket_path: str | Path | None = None,
        *,
        connect_timeout: float | None = 2.0,
        timeout: float | None = 30.0,
        reconnect: bool = True,
        transport_factory: Callable[[], Transport] | None = None,
        config: str | Path | None = None,
        check_home: bool | None = None,
    ) -> None:
        self.socket_path = Path(socket_path) if socket_path is not None else locations.socket_path()
        self.config = Path(config).expanduser() if config is not None else None
        self.check_home = (
            check_home if check_home is not None else socket_path is None or config is not None
        )
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.reconnect = reconnect
        self._factory = transport_factory or (lambda: default_transport(self.socket_path))
        self._lock = allocate_lock()
        self._conn: _Connection | None = None
        self._ids = itertools.count(1)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (if any)."""
        with self._lock:
            self._drop()

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | _Default | None = DEFAULT_TIMEOUT,
    ) -> dict[str, Any]:
        """Send one request and return its result map (any method).

        Raises the :mod:`recalld_client.errors` class of the daemon's error code.
        """
        limit = self.timeout if isinstance(timeout, _Default) else timeout
        with self._lock:
            req_id = next(self._ids)
            # Encoded before connecting: a request over the cap raises without touching the wire.
            frame = encode_frame(request(req_id, method, params))
            retry = self.reconnect and method not in NOT_IDEMPOTENT
            while True:
                conn = self._connected()
                try:
                    if self.check_home and not conn.checked and method != "hello":
                        self._check(conn, self._roundtrip(conn, *self._hello_frame(), limit))
                    result = self._roundtrip(conn, req_id, frame, limit)
                    if self.check_home and not conn.checked:  # a hello: checked on its answer
                        self._check(conn, result)
                    return result
                except WrongDaemon:
                    self._drop()
                    raise
                except ConnectionLost:
                    self._drop()
                    if not retry:
                        raise
                    retry = False
                except (Timeout, ProtocolError):
                    # A late or half-read answer would be misread by the next request.
                    self._drop()
                    raise

    def hello(self) -> Hello:
        """The daemon's versions, pid and capabilities."""
        return cast("Hello", self.call("hello", {"protocol": PROTOCOL_VERSION}))

    def search(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        sources: str | Sequence[str] | None = None,
        path_prefix: str | None = None,
        mode: Mode | None = None,
        max_tokens: int | None = None,
        explain: bool = False,
        kinds: str | Sequence[str] | None = None,
        tags: str | Sequence[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        project: str | None = None,
        session: str | None = None,
    ) -> SearchResponse:
        """Search memory and transcripts; options left None use the daemon's configured defaults.

        ``max_tokens`` trims snippets (and drops the lowest results) so that the whole answer
        fits; ``explain`` adds each result's channel ranks and what the fusion did. ``kinds``
        keeps only some kinds of content: ``note``, ``message``, ``tool_call``, ``tool_output``.
        Filters, applied before ranking: ``tags`` (any of them), ``since`` / ``until`` (an ISO
        date or time, or a span back from now such as ``"7d"`` or ``"12h"``), ``project`` (a
        session's working folder, or a note's top folder) and ``session`` (a transcript's id).
        """
        params: dict[str, Any] = {"query": query}
        if max_results is not None:
            params["max_results"] = max_results
        if min_score is not None:
            params["min_score"] = min_score
        if sources is not None:
            params["sources"] = [sources] if isinstance(sources, str) else list(sources)
        if path_prefix is not None:
            params["path_prefix"] = path_prefix
        if mode is not None:
            params["mode"] = mode
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        if explain:
            params["explain"] = True
        if kinds is not None:
            params["kinds"] = [kinds] if isinstance(kinds, str) else list(kinds)
        if tags is not None:
            params["tags"] = [tags] if isinstance(tags, str) else list(tags)
        for name, value in (
            ("since", since),
            ("until", until),
            ("project", project),
            ("session", session),
        ):
            if value is not None:
                params[name] = value
        return cast("SearchResponse", self.call("search", params))

    def get(
        self,
        path: str | Path,
        from_line: int = 1,
        lines: int | None = None,
        *,
        decoded: bool = False,
    ) -> GetResponse:
        """``lines`` lines of an indexed file from ``from_line`` (1-based; None: to the end).

        ``decoded``: of a transcript, the readable (redacted) text of each line instead of its
        raw JSON.

        ``path`` may be a citation as search prints it (``path#L3-L9``, ``path:3-9``, see
        :mod:`recalld_client.citation`); the daemon parses it. A ``from_line`` past the end of
        the file raises :class:`NotFound` saying how many lines it has.
        """
        params: dict[str, Any] = {"path": str(path), "from_line": from_line}
        if lines is not None:
            params["lines"] = lines
        if decoded:
            params["decoded"] = True
        return cast("GetResponse", self.call("get", params))

    def remember(
        self,
        text: str,
        note: str | None = None,
        tags: Sequence[str] = (),
        replace: str | None = None,
    ) -> dict[str, Any]:
        """Write ``text`` as a timestamped entry (default: today's daily note) and return
        ``{"citation", "path", "start_line", "end_line", "redacted", "duplicate"}``.

        When it returns, every client's keyword search finds the entry. ``note``: a note name
        such as ``MEMORY.md`` or ``projects/billing.md``; ``replace``: the citation of an
        earlier entry to correct in place. Secrets are redacted before the text reaches disk.
        """
        params: dict[str, Any] = {"text": text}
        if note is not None:
            params["note"] = note
        if tags:
            params["tags"] = [tags] if isinstance(tags, str) else list(tags)
        if replace is not None:
            params["replace"] = replace
        try:
            return self.call("write", params)
        except TooLarge as exc:
            # The daemon's length check never saw it: said as what it is, a too long entry.
            raise BadRequest(
                f"the entry is {len(text):,} characters long, too long for one request to the "
                f"daemon ({exc}): write a shorter summary (memory.max_entry_chars caps an "
                "entry, 20,000 characters by default)"
            ) from None

    def forget(
        self,
        target: str | Path | None = None,
        session: str | None = None,
        project: str | None = None,
        undo: bool = False,
    ) -> dict[str, Any]:
        """Forget a citation's lines (removed from the note), or a path, glob, session or
        project (kept out of the index, files untouched); ``undo`` brings the latter back."""
        params: dict[str, Any] = {"undo": undo}
        if target is not None:
            params["target"] = str(target)
        if session is not None:
            params["session"] = session
        if project is not None:
            params["project"] = project
        return self.call("forget", params)

    def forgotten(self) -> list[dict[str, Any]]:
        """What is forgotten: ``[{"kind", "value", "created_at"}]`` (``forget --list``)."""
        return list(self.call("forget", {"list": True})["forgotten"])

    def status(self) -> StatusResponse:
        """Index state, provider, pending work, counts."""
        return cast("StatusResponse", self.call("status"))

    def sync(self, wait: bool = False) -> dict[str, Any]:
        """Sync now; with ``wait`` return only when it is done."""
        return self.call("sync", {"wait": wait}, timeout=None if wait else DEFAULT_TIMEOUT)

    def reindex(self, wait: bool = False) -> dict[str, Any]:
        """Full rebuild (temporary database, then an atomic swap)."""
        return self.call("reindex", {"wait": wait}, timeout=None if wait else DEFAULT_TIMEOUT)

    def shutdown(self) -> dict[str, Any]:
        """Ask the daemon to stop (it finishes in-flight requests first). Never resent."""
        return self.call("shutdown")

    def watch(self) -> Iterator[dict[str, Any]]:
        """Status events, on a connection of their own, until the daemon closes it.

        Connects when iteration starts; closing the generator closes the connection.
        """
        conn = self._open()
        try:
            if self.check_home:
                hello_id = 0  # not the watch's id: its answer is read before the watch starts
                frame = encode_frame(request(hello_id, "hello", {"protocol": PROTOCOL_VERSION}))
                self._check(conn, self._roundtrip(conn, hello_id, frame, self.timeout))
            conn.transport.send(encode_frame(request(1, "watch")))
            while True:
                msg = conn.next_frame(None)
                if msg is None:
                    return
                if msg.get("id") not in (1, None):
                    continue
                if "event" in msg:
                    event = msg["event"]
                    if not isinstance(event, dict):
                        raise ProtocolError(f"watch event is not a map: {event!r}")
                    yield event
                else:
                    _unwrap(msg)
                    return
        finally:
            conn.close()

    def _hello_frame(self) -> tuple[int, bytes]:
        req_id = next(self._ids)
        return req_id, encode_frame(request(req_id, "hello", {"protocol": PROTOCOL_VERSION}))

    def _check(self, conn: _Connection, hello: dict[str, Any]) -> None:
        """Mark ``conn`` checked, or raise :class:`WrongDaemon` (see :mod:`.identity`)."""
        from recalld_client import identity

        identity.check(hello, self.config, self.socket_path)
        conn.checked = True

    def _open(self) -> _Connection:
        transport = self._factory()
        transport.connect(self.connect_timeout)
        return _Connection(transport)

    def _connected(self) -> _Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    def _roundtrip(
        self, conn: _Connection, req_id: int, frame: bytes, timeout: float | None
    ) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        conn.transport.settimeout(timeout)
        try:
            conn.transport.send(frame)
        except ConnectionLost:
            # A daemon flooded with clients refuses with a frame and hangs up at once: the
            # refusal may be waiting to be read even though the request could not be sent.
            refusal = _refusal_waiting(conn, deadline)
            if refusal is None:
                raise
            self._drop()
            _unwrap(refusal)
            raise
        while True:
            msg = conn.next_frame(deadline)
            if msg is None:
                raise ConnectionLost("the daemon closed the connection (is it shutting down?)")
            msg_id = msg.get("id")
            if msg_id is None:
                # About the connection itself (refused, undecodable): the daemon closes it.
                self._drop()
                _unwrap(msg)
                raise ProtocolError(f"unexpected frame without id: {msg!r}")
            if msg_id == req_id:
                return _unwrap(msg)


def _refusal_waiting(conn: _Connection, deadline: float | None) -> dict[str, Any] | None:
    """An error frame about the connection already received, or None."""
    try:
        msg = conn.next_frame(deadline)
    except RecalldClientError:
        return None
    if msg is not None and msg.get("id") is None and "error" in msg:
        return msg
    return None


def is_running(socket_path: str | Path | None = None, *, timeout: float = 1.0) -> bool:
    """Whether a daemon answers ``hello`` at ``socket_path`` (default: this home's socket),
    whichever home it serves (a :class:`Client` refuses one that serves another)."""
    try:
        with Client(
            socket_path, connect_timeout=timeout, timeout=timeout, reconnect=False, check_home=False
        ) as c:
            c.hello()
    except TooManyConnections:
        return True  # it runs, and said so: it is only full
    except RecalldClientError:
        return False
    return True
