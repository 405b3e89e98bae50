"""The connections a :class:`.remote.Remote` keeps to the store, and the one retry after a restart.

Connections are opened on demand, kept open between calls (in autocommit: a search is one round
trip, no BEGIN/COMMIT) and dropped on any error (the next call opens a new one). A kept
connection that the server closed meanwhile (``recalld shared down`` then ``up``, a restart)
fails its first statement with "terminating connection due to administrator command": that is
raised as :class:`StaleConnection`, and :func:`once_more` runs the call again on a new
connection, so a store that is back is used at once rather than after a failed search or push.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from recalld.errors import Unavailable
from recalld.shared.settings import SharedSettings

#: What the error of an unreachable store starts with (said once: callers add no prefix of theirs).
UNREACHABLE = "shared store unreachable: "


class StaleConnection(Unavailable):
    """A kept connection the server had closed (a restart since it was last used)."""


class Connections:
    """One member's kept connections to the store."""

    def __init__(
        self,
        settings: SharedSettings,
        connect_timeout_s: float,
        prepare: Callable[[Any], None] = lambda conn: None,
    ) -> None:
        self.settings = settings
        self.connect_timeout_s = connect_timeout_s
        self.prepare = prepare  # run on each new connection
        self.idle: list[Any] = []
        self._lock = threading.Lock()
        # statement_timeout last set on each open connection (set again only when it changes)
        self._timeouts: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._closed = False  # by close(): connections are closed when done, not kept

    @contextmanager
    def connection(self, timeout_ms: int | None = None) -> Iterator[Any]:
        """A connection (kept or new); dropped if anything fails. A kept one the server had
        closed raises :class:`StaleConnection`."""
        import psycopg

        with self._lock:
            conn = self.idle.pop() if self.idle else None
        kept = conn is not None and not conn.closed
        if conn is None or conn.closed:
            conn = self._connect()
        try:
            if timeout_ms is not None and self._timeouts.get(conn) != int(timeout_ms):
                conn.execute(f"SET statement_timeout = {int(timeout_ms)}")
                self._timeouts[conn] = int(timeout_ms)
            yield conn
        except psycopg.OperationalError as exc:
            closed_by_server = kept and (conn.broken or conn.closed)  # not a statement timeout
            conn.close()
            if closed_by_server:
                raise StaleConnection(
                    f"the store closed a kept connection ({first_line(exc)})"
                ) from exc
            raise
        except BaseException:
            conn.close()
            raise
        with self._lock:
            if not self._closed:
                self.idle.append(conn)
                return
        conn.close()  # a statement that ended after close(): nothing keeps its connection

    def _connect(self) -> Any:
        import psycopg

        try:
            conn = psycopg.connect(
                self.settings.dsn(),
                connect_timeout=max(1, round(self.connect_timeout_s)),
                autocommit=True,
            )
        except psycopg.OperationalError as exc:
            raise Unavailable(UNREACHABLE + first_line(exc)) from exc
        self.prepare(conn)
        return conn

    def drop_idle(self) -> None:
        """Close the kept connections."""
        with self._lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        """Close the kept connections, and each busy one when its statement ends."""
        with self._lock:
            self._closed = True
        self.drop_idle()


class _Connected(Protocol):
    connections: Connections


_S = TypeVar("_S", bound=_Connected)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def once_more(method: Callable[Concatenate[_S, _P], _T]) -> Callable[Concatenate[_S, _P], _T]:
    """The call, and once more on new connections when a kept one turned out closed by the
    server: the other kept ones date from before the restart too, so they go first."""

    @functools.wraps(method)
    def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(self, *args, **kwargs)
        except StaleConnection:
            self.connections.drop_idle()
            return method(self, *args, **kwargs)

    return call


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (psycopg's run over several)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
