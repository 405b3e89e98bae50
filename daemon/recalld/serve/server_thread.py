"""Running a :class:`~recalld.serve.server.Server` on its own event loop in a background thread."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Generic, Protocol, TypeVar


class Serving(Protocol):
    """What the thread needs of a server (:class:`recalld.serve.server.Server` has it)."""

    async def start(self) -> None: ...

    async def serve_forever(self) -> None: ...

    def request_shutdown(self) -> None: ...


S = TypeVar("S", bound=Serving)


class ServerThread(Generic[S]):
    """Runs a :class:`Server` on its own event loop in a background thread.

    For tests and for embedding the daemon in another program:

        with ServerThread(Server(handlers, {}, path)):
            Client(path).hello()
    """

    def __init__(self, server: S) -> None:
        self.server = server
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="recalld-server", daemon=True)

    def start(self, timeout: float = 10.0) -> S:
        """Start serving; re-raises a failed start (e.g. :class:`AlreadyRunning`)."""
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("the server did not start in time")
        if self._error is not None:
            raise self._error
        return self.server

    def stop(self, timeout: float = 15.0) -> None:
        """Shut the server down and wait for the thread."""
        self.server.request_shutdown()
        self._thread.join(timeout)

    def __enter__(self) -> S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            await self.server.start()
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            return
        finally:
            self._started.set()
        await self.server.serve_forever()
