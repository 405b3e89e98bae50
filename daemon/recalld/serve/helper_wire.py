"""The daemon's link to its search helper process: frames on a socket pair, changes as maps.

Frames are the client protocol's (a length, then one msgpack map), with a higher cap: a change
carries every vector one write added. Messages, daemon to helper: ``hello`` (the settings),
``change`` (a committed :class:`~recalld.index.store.FileChange`), ``search`` (an id and the
request's params), ``bye``. Helper to daemon: ``ready`` or ``failed``, then one answer per search
(``id`` with ``result`` or ``error``).
"""

from __future__ import annotations

import socket
from typing import Any

import numpy as np

from recalld.index.store import FileChange
from recalld_client.protocol import FrameDecoder, encode_frame

__all__ = ["MAX_FRAME", "Channel", "change_from_wire", "change_to_wire"]

MAX_FRAME = 1 << 30  # one write's vectors: 100k chunks x 384 floats is ~150 MB


def change_to_wire(change: FileChange) -> dict[str, Any]:
    """``change`` as a ``change`` message (vectors as raw float32 bytes)."""
    return {
        "op": "change",
        "removed": [int(i) for i in change.removed],
        "added": [
            [int(i), np.ascontiguousarray(v, dtype=np.float32).tobytes()] for i, v in change.added
        ],
        "generation": change.generation,
        "inserted": [int(i) for i in change.inserted],
    }


def change_from_wire(msg: dict[str, Any]) -> FileChange:
    """The :class:`FileChange` a ``change`` message carries."""
    added = [(int(i), np.frombuffer(raw, dtype=np.float32).copy()) for i, raw in msg["added"]]
    generation = msg.get("generation")
    return FileChange(
        [int(i) for i in msg["removed"]],
        added,
        None if generation is None else int(generation),
        [int(i) for i in msg.get("inserted", [])],
    )


class Channel:
    """Whole messages over a connected stream socket (one reader, writers serialised by the
    caller)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._decoder = FrameDecoder(MAX_FRAME)

    def send(self, msg: dict[str, Any]) -> None:
        """Send one message (blocks until the socket took it)."""
        self.sock.sendall(encode_frame(msg, MAX_FRAME))

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the other end closed."""
        while True:
            msg = self._decoder.next_frame()
            if msg is not None:
                return msg
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self._decoder.feed(data)
