"""One search helper process and the socket to it (see :mod:`recalld.serve.search_helper`).

A sender thread writes the queued messages in order (a send never blocks the writer, whose
changes are queued while the helper loads); a reader thread completes the waiting searches with
the answers. Closing fails the searches still owed, says ``bye``, and reaps the process (killed
when it does not go within a few seconds).
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from recalld.serve.helper_wire import Channel

__all__ = ["HelperGone", "Link"]


class HelperGone(Exception):
    """The helper cannot answer (stopped, died, failed, or too slow)."""


class Link:
    """One helper process and the socket to it: a sender thread (sends never block the
    writer), a reader thread (answers complete the waiting searches)."""

    def __init__(
        self, hello: dict[str, Any], on_ready: Callable[[Link, dict[str, Any]], None]
    ) -> None:
        """``hello`` goes first, ahead of any change sent from now on."""
        self._on_ready = on_ready
        ours, theirs = socket.socketpair()
        self._channel = Channel(ours)
        self._theirs = theirs
        self._outbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._waiting: dict[int, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False
        self.process: subprocess.Popen[bytes] | None = None
        self.error: str | None = None
        self._outbox.put(hello)

    def start(self) -> None:
        """Start the process (the changes sent before are queued for it, in order)."""
        fd = self._theirs.fileno()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "recalld.serve.helper_process", str(fd)],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            close_fds=True,
        )
        self._theirs.close()
        threading.Thread(target=self._send_loop, name="recalld-helper-send", daemon=True).start()
        threading.Thread(target=self._read_loop, name="recalld-helper-read", daemon=True).start()

    def send(self, msg: dict[str, Any]) -> None:
        """Queue a message (after everything queued before)."""
        if not self._closed:
            self._outbox.put(msg)

    def search(self, params: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """The helper's answer to a search; :class:`HelperGone` when it has none in time."""
        future: Future[dict[str, Any]] = Future()
        with self._lock:
            if self._closed:
                raise HelperGone(self.error or "the helper is stopped")
            req_id = next(self._ids)
            self._waiting[req_id] = future
        self.send({"op": "search", "id": req_id, "params": dict(params)})
        try:
            return future.result(timeout)
        except TimeoutError:
            raise HelperGone(f"no answer within {timeout:g} s") from None
        finally:
            with self._lock:
                self._waiting.pop(req_id, None)

    def close(self, why: str | None = None) -> None:
        """Stop the process (politely, then not) and fail the searches it still owes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.error = self.error or why
            waiting = list(self._waiting.values())
        for future in waiting:
            if not future.done():
                future.set_exception(HelperGone(why or "the helper was stopped"))
        self._outbox.put({"op": "bye"})
        self._outbox.put(None)
        threading.Thread(target=self._reap, name="recalld-helper-reap", daemon=True).start()

    def _reap(self, grace_s: float = 5.0) -> None:
        """Wait for the process to go (kill it after ``grace_s``), then close both ends."""
        proc = self.process
        try:
            if proc is not None:
                try:
                    proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            self._channel.sock.close()
            self._theirs.close()  # closed already once the process started

    def _send_loop(self) -> None:
        while True:
            msg = self._outbox.get()
            if msg is None:
                return
            try:
                self._channel.send(msg)
            except OSError as exc:
                # A dead helper's socket fails a send as often as it ends a read: say how it died.
                self.close(self._exit_reason(f"the helper's socket failed: {exc}"))
                return

    def _read_loop(self) -> None:
        why = "the helper exited"
        try:
            while True:
                msg = self._channel.receive()
                if msg is None:
                    break
                if "id" in msg:
                    self._settle(msg)
                else:
                    self._on_ready(self, msg)
        except Exception as exc:  # noqa: BLE001 - a broken stream ends the helper
            why = f"the helper's answers could not be read: {exc}"
        self.close(self._exit_reason(why))

    def _exit_reason(self, why: str) -> str:
        """``why``, or the helper's exit status when it has died (not when it was closed)."""
        proc = self.process
        if proc is not None and not self._closed:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1.0)  # its socket closes as it dies: its status follows at once
            if proc.returncode:
                return f"the helper exited with status {proc.returncode}"
        return why

    def _settle(self, msg: dict[str, Any]) -> None:
        with self._lock:
            future = self._waiting.get(msg["id"])
        if future is None or future.done():
            return  # answered too late: the search ran in the daemon
        if "result" in msg and isinstance(msg["result"], dict):
            future.set_result(msg["result"])
        else:
            future.set_exception(HelperGone(f"the helper failed a search: {msg.get('error')}"))
