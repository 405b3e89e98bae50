"""Security (issue 8): who may connect, against a real ``recalld serve`` on a real socket.

The socket is 0600 in a 0700 folder, the index files are 0600 (tightened if an older index was
left readable), and another uid is refused twice over: by the folder (EACCES), and, with the
folder opened up for the test, by the daemon's SO_PEERCRED check. The daemon has no INET socket
at all (no TCP or UDP listener anywhere).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from recalld_client import Client
from recalld_client.protocol import FrameDecoder, encode_frame, request
from security_support import Home
from security_support import secure as secure  # a fixture

pytestmark = pytest.mark.timeout(300)

NOBODY = 65534


@pytest.mark.slow
def test_socket_and_index_are_private(secure: Home) -> None:
    run = secure.daemon.socket.parent
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o700
    st = os.lstat(secure.daemon.socket)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    assert stat.S_IMODE(os.stat(run / "recalld.lock").st_mode) == 0o600
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        path = secure.path / name
        if path.exists():
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, name
    assert "now private (0600)" in secure.daemon.log.read_text()


def _as_nobody(path: Path) -> dict[str, Any]:
    """Fork; the child drops to uid/gid 65534, connects to ``path`` and says hello.

    Returns what happened: {"connect": errno name or "ok", "frames": [...], "eof": bool}.
    """
    hello = encode_frame(request(1, "hello"))
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no logging, no imports, only sockets, then _exit
        out: dict[str, Any] = {"connect": "ok", "frames": [], "eof": False}
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out["uid"] = os.getuid()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            try:
                sock.connect(str(path))
            except OSError as exc:
                out["connect"] = os.strerror(exc.errno or 0) if exc.errno else repr(exc)
                out["errno"] = exc.errno
            else:
                decoder = FrameDecoder()
                with contextlib.suppress(OSError):  # refused before we sent: the frame is there
                    sock.sendall(hello)
                while True:
                    try:
                        data = sock.recv(65536)
                    except OSError:  # reset: closed with our hello unread
                        out["eof"] = True
                        break
                    if not data:
                        out["eof"] = True
                        break
                    decoder.feed(data)
                    out["frames"].extend(decoder)
            os.write(wfd, json.dumps(out, default=repr).encode())
        except BaseException as exc:  # noqa: BLE001 - report anything to the parent
            os.write(wfd, json.dumps({"child_error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    chunks = []
    while chunk := os.read(rfd, 65536):
        chunks.append(chunk)
    os.close(rfd)
    os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(b"".join(chunks))
    assert "child_error" not in result, result
    return result


@pytest.mark.skipif(
    os.getuid() != 0, reason="switching to another uid needs root (CI runs as root)"
)
def test_another_uid_is_refused_by_the_folder_and_by_peercred(secure: Home) -> None:
    sock_path = secure.daemon.socket
    run = sock_path.parent
    # 1. As configured: the 0700 folder stops the other user before the daemon even sees it.
    first = _as_nobody(sock_path)
    assert first["uid"] == NOBODY
    assert first["errno"] == 13, first  # EACCES
    # 2. With the folder and the socket opened up (a misconfiguration, a copied permission):
    #    the daemon's SO_PEERCRED check refuses the other uid with a forbidden frame.
    log_start = secure.daemon.log.stat().st_size
    os.chmod(secure.path, 0o711)  # mkdtemp's 0700 would stop the other user one level up
    os.chmod(run, 0o755)
    os.chmod(sock_path, 0o666)
    try:
        second = _as_nobody(sock_path)
    finally:
        os.chmod(sock_path, 0o600)
        os.chmod(run, 0o700)
        os.chmod(secure.path, 0o700)
    assert second["connect"] == "ok", second
    assert len(second["frames"]) == 1 and second["eof"], second
    refusal = second["frames"][0]
    assert refusal["id"] is None and "result" not in refusal
    assert refusal["error"]["code"] == "forbidden"
    assert f"uid {NOBODY}" in refusal["error"]["message"]
    with secure.daemon.log.open() as fh:
        fh.seek(log_start)
        assert f"is uid {NOBODY}" in fh.read()
    with Client(sock_path) as c:  # and the owner is still served
        assert c.hello()["pid"] == secure.daemon.proc.pid  # type: ignore[union-attr]


def _inet_inodes() -> dict[int, str]:
    """Socket inodes of every INET socket on the host (TCP, UDP, raw; v4 and v6)."""
    found: dict[int, str] = {}
    for name in ("tcp", "tcp6", "udp", "udp6", "udplite", "udplite6", "raw", "raw6"):
        table = Path("/proc/net") / name
        if not table.exists():
            continue
        lines = table.read_text().splitlines()
        for line in lines[1:]:  # sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            parts = line.split()
            if len(parts) > 9:
                found[int(parts[9])] = f"{name} {parts[1]} st={parts[3]}"
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def test_daemon_has_no_inet_socket(secure: Home) -> None:
    pid = secure.daemon.proc.pid  # type: ignore[union-attr]
    # The checker itself: it sees a TCP listener and a UDP socket of this test process.
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
        socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as udp,
    ):
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        udp.bind(("::1", 0))
        found = _socket_inodes(os.getpid()) & set(_inet_inodes())
        assert {os.fstat(tcp.fileno()).st_ino, os.fstat(udp.fileno()).st_ino} <= found
    with Client(secure.daemon.socket) as c:  # the daemon has served a search
        c.search("lighthouse keeper")
    mine = _socket_inodes(pid)
    assert mine, "the daemon has no socket at all?"
    inet = _inet_inodes()
    assert {i: inet[i] for i in mine if i in inet} == {}
    unix = Path("/proc/net/unix").read_text()
    assert str(secure.daemon.socket) in unix
