"""The daemon's ``write`` and ``forget`` handlers: :class:`recalld.memory_edits.MemoryEdits` with
its index work run on the single writer thread.

A handler edits the note on its own worker thread (edits of one note wait for each other, see
:func:`recalld.ingest.memory_write.note_lock`), then queues a ``call`` job and waits for it: the
writer indexes that file at once, ahead of nothing but the batch it is in. Concurrent writes
queued meanwhile are merged into the writer's next batch, so eight clients writing at once cost
one index pass per batch, not one per entry (the later ones find the note indexed already).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from recalld.errors import Unavailable
from recalld.memory_edits import MemoryEdits

T = TypeVar("T")
#: Queues a job for the writer: its kind ("call", "paths", "full") and, for "call", what to run.
Submit = Callable[[str, Callable[[], None] | None], None]
WRITER_WAIT_S = 120.0  # a write waits this long for the writer (a first sync may hold it)


class WriteHandlers:
    """``write`` and ``forget`` for one daemon's engine and writer queue."""

    def __init__(
        self, engine: Any, submit: Submit, shared: Callable[[str, str], bool] | None = None
    ) -> None:
        self.submit = submit
        self.edits = MemoryEdits(
            engine,
            self.on_writer,
            after_index=self._vectors_next,
            resync=self._resync,
            shared=shared,
        )

    def table(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        """Entries of the daemon's dispatch table."""
        return {"write": self.edits.write, "forget": self.edits.forget}

    def on_writer(self, fn: Callable[[], T]) -> T:
        """``fn()`` run on the writer thread; its result or its exception, here."""
        box: Future[T] = Future()

        def run() -> None:
            if not box.set_running_or_notify_cancel():
                return
            try:
                box.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting handler
                box.set_exception(exc)

        self.submit("call", run)
        try:
            return box.result(timeout=WRITER_WAIT_S)
        except TimeoutError:
            box.cancel()
            raise Unavailable(
                f"the index writer was busy for {WRITER_WAIT_S:g} s (a long sync?); the note "
                "is written and will be indexed by the running sync: try again to get its "
                "citation"
            ) from None

    def _vectors_next(self) -> None:
        """The written chunks' vectors: the writer's next back-fill step, after this job."""
        with contextlib.suppress(Unavailable):
            self.submit("paths", None)

    def _resync(self) -> None:
        """After an undo: a full sync brings back what the tombstone kept out."""
        with contextlib.suppress(Unavailable):
            self.submit("full", None)
