"""Embedding ahead of the writer: one thread keeps the embedder busy on the chunks due a vector
while the daemon's writer thread writes the vectors it finished, runs other jobs, or waits.

The daemon's back-fill used to embed on the writer thread in steps of about a second: each step
read the due chunks, embedded them in calls of about 16 KiB, wrote the cache and the vectors and
handed the writer back to the job queue. Between two calls, and between two steps, the model
stood still (the reads, the writes, the job's own bookkeeping), and the last batch of every call
ran on one core while the other waited: a first sync's vectors came in at ~0.85 of the raw
embedder on the same texts. Here the writer only *offers* the due chunks (newest first) and
*collects* what is done; the embedding runs on :class:`EmbedAhead`'s own thread in calls of the
size the raw embedder is measured with (:data:`AHEAD_CALL`), back to back.

Nothing is written here: vectors reach the index only through the writer (the embedding cache
first, then each chunk still due with that text), so a chunk deleted or edited meanwhile never
gets a stale vector, and a crash loses only vectors not yet written, which the next step finds
due again. A provider error stops the thread's work until the next offer; the writer reports it
(``embed_error``) and the daemon retries later, as before.

The thread is background work (:mod:`recalld.embedding.search_first`): it runs at a lower
priority and each model batch waits, briefly, for the searches in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from recalld.embedding.base import Embedder
from recalld.embedding.search_first import SearchFirst, background

__all__ = ["AHEAD_CALL", "AHEAD_CALL_CHARS", "Collected", "EmbedAhead"]

log = logging.getLogger(__name__)

#: Most texts per embedding call: what the raw embedder is measured with (bench/first_sync.py),
#: enough batches that the call's last one, which runs alone, costs ~1 % of the call.
AHEAD_CALL = 256
#: Most text per call (~128 full-window chunks): a call of long chunks still ends within a few
#: seconds, so that an edit made during a big back-fill waits at most that long for its vectors
#: (its keyword rows are written at once: the writer does not wait for calls).
AHEAD_CALL_CHARS = 128 * 1024

F32 = npt.NDArray[np.float32]


@dataclass
class Collected:
    """What :meth:`EmbedAhead.collect` hands the writer."""

    vectors: dict[str, F32] = field(default_factory=dict)  # text hash -> unit vector
    error: str | None = None  # the provider failed (the thread waits for the next offer)


class EmbedAhead:
    """A thread that embeds offered texts in calls of :data:`AHEAD_CALL`, newest offer first.

    Thread-safe; the writer calls :meth:`offer` and :meth:`collect`, the daemon :meth:`close`.
    """

    def __init__(self, embedder: Embedder, gate: SearchFirst | None = None) -> None:
        self.embedder = embedder
        self.gate = gate  # searches first (None: embed at full speed, as foreground work)
        self._wanted: dict[str, str] = {}  # hash -> text, in the writer's order
        self._busy: set[str] = set()  # hashes of the call being embedded
        self._done: dict[str, F32] = {}  # finished, not yet collected
        self._error: str | None = None
        self._paused = False  # after an error, until the next offer
        self._stop = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        # The newest chunk id the writer offered so far (the writer's own bookkeeping: a chunk
        # above it was written since, by an edit, see vector_backfill's step).
        self.offered_up_to = 0

    def offer(self, rows: Sequence[tuple[str, str]]) -> None:
        """The chunks due a vector, as ``(hash, text)`` newest first: they replace the earlier
        offer (a chunk no longer offered was written, removed or edited), less the texts being
        embedded or done."""
        with self._cond:
            self._wanted = {h: t for h, t in rows if h not in self._busy and h not in self._done}
            self._paused = False
            if self._wanted and self._thread is None and not self._stop:
                self._thread = threading.Thread(
                    target=self._run, name="recalld-embed-ahead", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def collect(self, wait_s: float) -> Collected:
        """The vectors finished since the last collect. Waits up to ``wait_s`` while work is
        offered or in flight (returning early when all of it is done or the provider failed),
        so that a back-fill step writes about ``wait_s`` worth of vectors at a time."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            while (
                (self._wanted or self._busy)
                and not self._paused
                and not self._stop
                and (left := deadline - time.monotonic()) > 0
            ):
                self._cond.wait(left)
            out = Collected(self._done, self._error)
            self._done, self._error = {}, None
            return out

    def idle(self) -> bool:
        """Nothing offered, nothing being embedded."""
        with self._cond:
            return not self._wanted and not self._busy

    def close(self) -> None:
        """Stop taking work (a call in flight ends on its own; nothing is written from here)."""
        with self._cond:
            self._stop = True
            self._wanted.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=1)  # a daemon thread: a long call does not hold up the exit

    def _next_call(self) -> dict[str, str] | None:
        """Wait for offered texts and take the next call's worth (None: closed)."""
        with self._cond:
            while (not self._wanted or self._paused) and not self._stop:
                self._cond.wait()
            if self._stop:
                return None
            call: dict[str, str] = {}
            chars = 0
            for h, text in self._wanted.items():
                if call and (len(call) >= AHEAD_CALL or chars + len(text) > AHEAD_CALL_CHARS):
                    break
                call[h] = text
                chars += len(text)
            for h in call:
                del self._wanted[h]
            self._busy = set(call)
            return call

    def _run(self) -> None:
        with background(self.gate):
            self._embed_calls()

    def _embed_calls(self) -> None:
        while (call := self._next_call()) is not None:
            hashes = list(call)
            error: str | None = None
            vectors: F32 | None = None
            try:
                vectors = self.embedder.embed([call[h] for h in hashes])
                dims = self.embedder.dims
                if vectors.shape != (len(hashes), dims):
                    error = (
                        f"{self.embedder.label} returned vectors of shape {vectors.shape}, "
                        f"expected ({len(hashes)}, {dims})"
                    )
            except Exception as exc:  # noqa: BLE001 - reported by the writer, retried later
                log.warning("embedding ahead failed: %s", exc)
                error = f"{self.embedder.label}: {exc}"
            with self._cond:
                self._busy = set()
                if error is None and vectors is not None:
                    self._done.update((h, vectors[i]) for i, h in enumerate(hashes))
                else:
                    self._error, self._paused = error, True
                self._cond.notify_all()
