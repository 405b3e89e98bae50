"""The CLI's connection to this home's daemon: one ``hello`` tells whether one runs, and for
this home (:mod:`recalld_client.identity`), on the connection the command then uses.

Imported by the fast path of ``recalld search|get|status``: it imports only the client.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as true; typing costs ~3 ms of `recalld search` start-up
if TYPE_CHECKING:
    from typing import Any

HELLO_TIMEOUT_S = 1.0  # what recalld_client.is_running allows a daemon to answer hello


def connect(config: Any = None) -> Any:
    """A client whose connection answered ``hello`` (and so was checked to serve this home, or
    ``config``), or None when no daemon answers or the client is not installed.

    The same test as recalld_client.is_running, on the connection the command then uses.
    Raises :class:`recalld_client.WrongDaemon` when the daemon serves another home: answering
    in-process instead would hide that this home's daemon cannot run at that socket.
    """
    try:
        from recalld_client import Client, RecalldClientError, TooManyConnections, WrongDaemon
    except ImportError:
        return None
    client = Client(
        config=config, connect_timeout=HELLO_TIMEOUT_S, timeout=HELLO_TIMEOUT_S, reconnect=False
    )
    try:
        client.hello()
    except TooManyConnections:
        pass  # it runs and is only full: the command's own error says so, as before
    except WrongDaemon:
        raise  # not "no daemon": this home's cannot start at that socket either
    except RecalldClientError:
        client.close()
        return None
    client.timeout, client.connect_timeout, client.reconnect = 30.0, 2.0, True
    return client
