"""Shared by the test_reliability_socket_* modules (bad input on the socket, issue 8):
the daemon under test (the module-scoped ``daemon`` fixture: a real ``recalld serve`` with a
few notes and a transcript), the methods and parameters to fuzz, a raw connection that sends
bytes and reads whole frames (:class:`Wire`), and the check every answer must pass."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import msgpack
import pytest

from conftest import write
from daemon_process import DaemonProcess
from recalld_client.protocol import ERROR_CODES, HEADER, MAX_FRAME, FrameDecoder

NOTE = "The harbour ferry number {i} leaves at dawn with lighthouse supplies for keeper{i}."
N_NOTES = 12
OK_CODES = ERROR_CODES - {"internal"}

# Methods and the parameters they read (shutdown is left out: it is *meant* to stop the daemon;
# watch starts a stream, which the barrage opens on throwaway connections only).
METHOD_PARAMS: dict[str, tuple[str, ...]] = {
    "search": ("query", "max_results", "min_score", "sources", "path_prefix", "mode"),
    "get": ("path", "from_line", "from", "lines"),
    "status": (),
    "sync": ("wait", "timeout_s"),
    "reindex": ("wait", "timeout_s"),
    "pause": ("paused",),
    "hello": ("protocol",),
}


@pytest.fixture(scope="module")
def daemon() -> Iterator[DaemonProcess]:
    home = Path(tempfile.mkdtemp(prefix="rcd-fz-", dir="/tmp"))
    sessions = home / "sessions"
    (home / "config.toml").write_text(
        f'[sessions]\npaths = ["{sessions}/*.jsonl"]\n[sync]\ndebounce_s = 0.3\n'
    )
    for i in range(N_NOTES):
        write(home / "memory" / f"n{i}.md", f"# Note {i}\n\n{NOTE.format(i=i)}\n")
    line = {"type": "user", "message": {"role": "user", "content": "the tide tables for May"}}
    write(sessions / "chat.jsonl", json.dumps(line) + "\n")
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        yield d
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)


def _pid(d: DaemonProcess) -> int:
    assert d.proc is not None
    return d.proc.pid


def _frame(obj: Any) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return HEADER.pack(len(body)) + body


class Wire:
    """A raw connection: send bytes, read whole frames, notice the hang-up."""

    def __init__(self, path: Path, timeout: float = 60.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.decoder = FrameDecoder(MAX_FRAME)

    def __enter__(self) -> Wire:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> dict[str, Any] | None:
        """The next frame, or None at end of stream."""
        while (frame := self.decoder.next_frame()) is None:
            try:
                data = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                return None
            if not data:
                return None
            self.decoder.feed(data)
        return frame

    def rpc(self, obj: Any) -> dict[str, Any] | None:
        self.send(_frame(obj))
        return self.read()

    def drain(self) -> list[dict[str, Any]]:
        """Every frame until the daemon hangs up."""
        frames = []
        while (msg := self.read()) is not None:
            frames.append(msg)
        return frames

    def close(self) -> None:
        self.sock.close()


def _valid_id(req_id: Any) -> bool:
    return isinstance(req_id, int) and not isinstance(req_id, bool)


def _check_answer(msg: dict[str, Any] | None, req_id: Any) -> dict[str, Any]:
    """An answer to one request: its id echoed, a result or a known, non-internal error."""
    assert msg is not None, "the daemon hung up on a request it could have answered"
    assert msg.get("id") == (req_id if _valid_id(req_id) else None), msg
    if "error" in msg:
        err = msg["error"]
        assert err["code"] in OK_CODES, err
        assert isinstance(err["message"], str) and err["message"], err
    else:
        assert isinstance(msg.get("result"), dict), msg
    return msg
