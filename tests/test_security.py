"""Security (issue 8): who may connect, what ``get`` may read, where secrets may end up.

Everything runs against real ``recalld serve`` subprocesses on real sockets and real files:

- the socket is 0600 in a 0700 folder, the index files are 0600 (tightened if an older index was
  left readable), and another uid is refused twice over: by the folder (EACCES), and, with the
  folder opened up for the test, by the daemon's SO_PEERCRED check;
- the daemon has no INET socket at all (no TCP or UDP listener anywhere);
- ``get`` serves indexed / indexable files only: ``..``, file and folder symlinks out, absolute
  paths, NUL bytes, 100k-character paths, over-long names, case tricks, ``%2e%2e``, backslashes,
  ``~``, dot files in a memory folder, transcripts outside sessions.paths, a FIFO, /proc: each
  refused with a clear error, and no byte of an outside file ever comes back;
- secrets in a transcript are redacted before indexing (no search finds them, the index file
  holds none of them) and when ``get`` serves the transcript's lines, indexed or not yet;
- an API key never reaches the log (debug logging on, a provider that fails with 401 and 500 and
  echoes the key back) nor any answer; a config file holding a key that other users can read is
  reported in the log, in ``status`` (``warnings``) and by ``recalld status``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, stop_process, wait_for
from recalld_client import Client, RecalldClientError
from recalld_client.protocol import FrameDecoder, encode_frame, request

pytestmark = pytest.mark.timeout(300)

MARKER = "OUTSIDE-MARKER-7f3a9c"  # in every file that get must refuse
NOBODY = 65534
# secret kind -> (text as the user typed it, the literal that must never come back)
SECRETS: dict[str, tuple[str, str]] = {
    "aws_access_key_id": (
        "aws key id AKIAQ3XZ7RT2PLMN8VWY for the backup bucket",
        "AKIAQ3XZ7RT2PLMN8VWY",
    ),
    "aws_secret": (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Rt3Lm2X",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Rt3Lm2X",
    ),
    "openai": (
        "export OPENAI_API_KEY=sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0",
        "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0",
    ),
    "anthropic": (
        "my anthropic key is sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",
        "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",
    ),
    "github": (
        "push with ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
        "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
    ),
    "bearer": (
        "curl -H 'Authorization: Bearer Tk7Qm2Vx9Lp4Rz8Wn3Ys6Jd1Hf5Gc0Ba' https://api.example.com",
        "Tk7Qm2Vx9Lp4Rz8Wn3Ys6Jd1Hf5Gc0Ba",
    ),
    "private_key": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
        "QyNTUxOQAAACBqPrivKeyMaterialXyZ1234567\n-----END OPENSSH PRIVATE KEY-----",
        "QyNTUxOQAAACBqPrivKeyMaterialXyZ1234567",
    ),
    "url_password": (
        "the database is postgres://admin:Hunter2Sup3rSecret@db.internal:5432/app",
        "Hunter2Sup3rSecret",
    ),
    "slack": (
        "bot token xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx",
        "AbCdEfGhIjKlMnOpQrStUvWx",
    ),
    "password": (
        "set DB_PASSWORD=correct-horse-battery-9 in the env file",
        "correct-horse-battery-9",
    ),
}


def msg(role: str, text: str) -> str:
    """One Claude Code transcript line."""
    line = {
        "type": role,
        "message": {"role": role, "content": text},
        "timestamp": "2026-11-01T10:00:00Z",
        "sessionId": "s1",
    }
    return json.dumps(line) + "\n"


def _call(c: Client, method: str, params: dict[str, Any]) -> tuple[str, str]:
    """(error code or "ok", the whole answer as text)."""
    try:
        return "ok", json.dumps(c.call(method, params))
    except RecalldClientError as exc:
        return exc.code, str(exc)


# -- a home with a daemon, files inside and outside its roots --------------------------------------


@dataclass
class Home:
    path: Path
    daemon: DaemonProcess

    @property
    def memory(self) -> Path:
        return self.path / "memory"


@pytest.fixture(scope="module")
def secure() -> Iterator[Home]:
    home = Path(tempfile.mkdtemp(prefix="rcd-sec-", dir="/tmp"))
    mem, sessions = home / "memory", home / "sessions"
    write(mem / "notes.md", "# Notes\n\nThe lighthouse keeper logs the tide at dawn.\n")
    write(mem / "sub" / "plan.md", "# Plan\n\nRepaint the ferry in spring.\n")
    write(home / "Cased" / "ok.md", "# Cased\n\nA note in the second root.\n")
    for bad in (
        mem / ".env",
        mem / ".git" / "config",
        mem / "creds.toml",
        mem / "sub" / ".hidden.md",
        home / "outside" / "secret.md",
        home / "cased" / "secret.md",  # the root is Cased, not cased
        home / "old-sessions" / "chat.jsonl",  # a transcript outside sessions.paths
        sessions / "auth-profiles.json",  # an agent's credentials next to its transcripts
        sessions / "nested" / "deep.jsonl",  # the glob is sessions/*.jsonl, not **
        home / "notes.md",
    ):
        write(bad, f"{MARKER} {msg('user', 'private')}")
    (mem / "inner.md").symlink_to(mem / "notes.md")  # a link inside the roots is fine
    (mem / "link.md").symlink_to(home / "outside" / "secret.md")
    (mem / "linkdir").symlink_to(home / "outside", target_is_directory=True)
    (mem / "proc.md").symlink_to("/proc/self/environ")
    os.mkfifo(mem / "pipe.md")  # would block a reader forever
    write(sessions / "chat.jsonl", "".join(msg("user", text) for text, _ in SECRETS.values()))
    (home / "config.toml").write_text(
        f'[memory]\npaths = ["{mem}", "{home / "Cased"}"]\n'
        f'[sessions]\npaths = ["{sessions}/*.jsonl"]\n'
        "quiet_s = 3600.0\ndelta_bytes = 1000000000\ndelta_messages = 1000000\n"
        "[sync]\ndebounce_s = 0.3\n"
    )
    os.chmod(home / "config.toml", 0o600)
    # An index left readable by others (an older recalld, another tool): tightened at start.
    old_umask = os.umask(0o022)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "recalld.surfaces.cli", "sync", "--json"],
            env=env_for(home),
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        os.umask(old_umask)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(home / "index.sqlite").st_mode) == 0o600  # created private
    os.chmod(home / "index.sqlite", 0o644)
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        yield Home(home, d)
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)


# -- the socket and the files ----------------------------------------------------------------------


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


# -- get confinement ------------------------------------------------------------------------------


def _refusals(home: Path) -> list[tuple[str, set[str]]]:
    mem = home / "memory"
    outside = str(home / "outside" / "secret.md")
    refused = {"forbidden"}
    either = {"forbidden", "not_found"}
    bad = {"bad_request"}
    return [
        # ..
        ("../outside/secret.md", refused),
        ("../../../../../../etc/passwd", refused),
        ("sub/../../outside/secret.md", refused),
        (f"{mem}/../outside/secret.md", refused),
        (f"{mem}/sub/../../config.toml", refused),
        ("../config.toml", refused),
        ("../index.sqlite", refused),
        ("../notes.md", refused),
        # absolute paths
        ("/etc/passwd", refused),
        ("/etc/shadow", refused),
        (outside, refused),
        (str(home / "config.toml"), refused),
        (str(home / "index.sqlite"), refused),
        ("/proc/self/environ", refused),
        ("/", refused),
        # symlinks out: a file, a folder, /proc
        ("link.md", refused),
        (str(mem / "link.md"), refused),
        ("linkdir/secret.md", refused),
        (str(mem / "linkdir" / "secret.md"), refused),
        ("proc.md", refused),
        # files inside a root that recalld does not index
        (".env", refused),
        (".git/config", refused),
        ("creds.toml", refused),
        ("sub/.hidden.md", refused),
        # under no root: not found (a shell command then reads it in its own folder)
        (".claude/projects/p/s.jsonl", {"not_found"}),
        ("sub/.nothing/x.md", {"not_found"}),
        # NUL bytes, huge paths, over-long names
        ("notes.md\x00.txt", bad),
        ("\x00", bad),
        ("a" * 100_000, bad),
        ("a/" * 3000 + "x.md", bad),
        ("n" * 300 + ".md", bad),
        (f"{mem}/{'n' * 256}.md", bad),
        ("", bad),
        ("   ", bad),
        # case tricks: the root is Cased, the folder cased is another one
        (str(home / "cased" / "secret.md"), refused),
        ("../cased/secret.md", refused),
        (str(home / "MEMORY" / ".." / "outside" / "secret.md"), refused),
        ("MEMORY/../../outside/secret.md", refused),
        ("NOTES.MD", either),
        # encodings that a web server would decode, and Windows separators
        ("%2e%2e/outside/secret.md", either),
        ("%2e%2e%2foutside%2fsecret.md", either),
        ("..%2f..%2fetc%2fpasswd", either),
        ("..\\outside\\secret.md", either),
        ("..\\..\\..\\etc\\passwd", either),
        ("%00", either),
        # home folders
        ("~", refused),
        ("~/.bashrc", refused),
        ("~root/.ssh/id_rsa", refused),
        ("~nosuchuser/secret.md", refused),
        # transcripts outside sessions.paths, and non-transcripts beside them
        (str(home / "old-sessions" / "chat.jsonl"), refused),
        (str(home / "sessions" / "auth-profiles.json"), refused),
        (str(home / "sessions" / "nested" / "deep.jsonl"), refused),
        # a FIFO inside a root: refused at once, never a blocked worker
        ("pipe.md", bad),
        # folders
        ("sub", bad),
        (str(mem), bad),
    ]


def test_get_is_confined_to_what_recalld_indexes(secure: Home) -> None:
    cases = _refusals(secure.path)
    failures = []
    with Client(secure.daemon.socket, timeout=10) as c:
        for path, expected in cases:
            for params in ({"path": path}, {"path": path, "from_line": 1, "lines": 5}):
                code, text = _call(c, "get", params)
                if code not in expected or MARKER in text or "root:x:0:0" in text:
                    failures.append((path[:80], code, text[:200]))
        # the range suffix goes through the same checks
        code, text = _call(c, "get", {"path": "../outside/secret.md:1-3"})
        if code != "forbidden" or MARKER in text:
            failures.append(("range", code, text[:200]))
    assert failures == []
    log = secure.daemon.log.read_text()
    assert "Traceback" not in log and "unexpected error" not in log


def test_get_still_serves_indexed_files(secure: Home) -> None:
    mem = secure.memory
    with Client(secure.daemon.socket) as c:
        assert c.get("notes.md")["text"].startswith("# Notes")
        assert c.get(str(mem / "notes.md"), from_line=3)["text"].startswith("The lighthouse")
        assert c.get("sub/plan.md:3-3")["text"] == "Repaint the ferry in spring."
        assert c.get("inner.md")["path"] == str(mem / "notes.md")  # link inside the roots
        assert c.get(str(secure.path / "Cased" / "ok.md"))["text"].startswith("# Cased")
        assert c.get("ok.md")["path"] == str(secure.path / "Cased" / "ok.md")
        transcript = c.get(str(secure.path / "sessions" / "chat.jsonl"))
        assert transcript["total_lines"] == len(SECRETS)


def test_session_globs_match_like_glob() -> None:
    """get's transcript check follows glob semantics (``**`` spans folders, not dot folders)."""
    from recalld.retrieval.access import session_match

    home = Path("/home/u")
    globs = [
        "/home/u/.claude/projects/**/*.jsonl",
        "/home/u/.codex/sessions/**/rollout-*.jsonl",
        "/home/u/.openclaw/agents/*/sessions/*.jsonl",
    ]
    yes = [
        ".claude/projects/a.jsonl",
        ".claude/projects/-work-x/s1.jsonl",
        ".claude/projects/a/b/c/s.jsonl",
        ".codex/sessions/2026/11/30/rollout-1.jsonl",
        ".openclaw/agents/main/sessions/s.jsonl",
    ]
    no = [
        ".claude/projects/a.json",
        ".claude/projects/.hidden/s.jsonl",
        ".claude/projects/.s.jsonl",
        ".claude/settings.jsonl",
        ".codex/sessions/2026/history.jsonl",
        ".openclaw/agents/main/agent/auth-profiles.json",
        ".openclaw/agents/main/sessions/deeper/s.jsonl",
        ".openclaw/agents/sessions.jsonl",
    ]
    assert [p for p in yes if not session_match(home / p, globs)] == []
    assert [p for p in no if session_match(home / p, globs)] == []


# -- secrets ---------------------------------------------------------------------------------------


def _index_bytes(home: Path) -> bytes:
    return b"".join(
        p.read_bytes() for p in home.iterdir() if p.name.startswith("index.sqlite") and p.is_file()
    )


def test_transcript_secrets_are_redacted_everywhere(secure: Home) -> None:
    transcript = secure.path / "sessions" / "chat.jsonl"
    raw = transcript.read_text()
    assert all(literal in raw for _, literal in SECRETS.values())  # the file itself has them
    with Client(secure.daemon.socket) as c:
        st = c.status()
        assert st["counts"]["session_files"] == 1
        for kind, (text, literal) in SECRETS.items():
            for mode in ("keyword", "hybrid"):
                res = c.search(literal, mode=mode, min_score=0.0, max_results=20)
                dump = json.dumps(res)
                assert literal not in dump, (kind, mode)
                hits = [r for r in res["results"] if r["path"] == str(transcript)]
                if mode == "keyword":  # the literal itself matches nothing
                    assert hits == [], (kind, hits)
            # the words around the secret are indexed: the message is found, redacted
            words = " ".join(w for w in text.split() if w.isalpha() and len(w) > 2)[:60]
            if words:
                for hit in c.search(words, sources=["sessions"], min_score=0.0)["results"]:
                    assert literal not in hit["snippet"], kind
        served = c.status()["redactions"]["served"]["total"]
        got = c.get(str(transcript))
        text = got["text"]
        for kind, (_, literal) in SECRETS.items():
            assert literal not in text, kind
        assert text.count("[REDACTED:") >= len(SECRETS)
        # status counts what get redacted since the daemon started, each secret once (an
        # earlier test of this module may have served them already: then not again)
        assert c.status()["redactions"]["served"]["total"] >= len(SECRETS)
        assert c.status()["redactions"]["served"]["total"] >= served
        for line in text.splitlines():
            json.loads(line)  # still the JSONL's own lines, valid JSON
        # A transcript that is not indexed yet (quiet_s is an hour here) is redacted as well.
        fresh = secure.path / "sessions" / "fresh.jsonl"
        fresh.write_text("".join(msg("assistant", text) for text, _ in SECRETS.values()))
        got = c.get(str(fresh))
        assert got["total_lines"] == len(SECRETS)
        assert not any(literal in got["text"] for _, literal in SECRETS.values())
        assert c.status()["counts"]["session_files"] == 1  # indeed not indexed
    stored = _index_bytes(secure.path)
    lowered = stored.lower()
    for kind, (_, literal) in SECRETS.items():
        assert literal.encode() not in stored, kind
        assert literal.lower().encode() not in lowered, kind  # nor as an FTS token
    assert b"redacted" in lowered  # the transcript is in there, redacted


# -- secrets and logs -----------------------------------------------------------------------------


KEY = "sk-proj-LEAKCHECK0123456789abcdefghijKLMNOPQRSTuvwxyz"


class EchoingProvider:
    """A 127.0.0.1 'OpenAI' that fails: 500 (retryable) then 401, echoing the key it got in the
    error body, in a plain-text body and in a response header."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(length)
                sent = self.headers.get("Authorization", "")
                owner.seen.append(sent)
                n = len(owner.seen)
                if n % 3 == 1:
                    status, body, ctype = 500, f"upstream failed for {sent}".encode(), "text/plain"
                else:
                    message = f"Incorrect API key provided: {sent.removeprefix('Bearer ')}."
                    body = json.dumps({"error": {"message": message, "code": "invalid_api_key"}})
                    status, body, ctype = 401, body.encode(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("X-Echo-Authorization", sent)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> EchoingProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _serve_verbose(home: Path, extra_env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    """``recalld -v serve`` (debug logging) with stdout and stderr in a file."""
    log = home / "verbose.log"
    env = env_for(home) | extra_env
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "recalld.surfaces.cli", "-v", "serve"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    return proc, log


@pytest.fixture
def tmp_home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rcd-key-", dir="/tmp"))
    write(path / "memory" / "a.md", "# A\n\nThe ferry timetable for the winter months.\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_api_key_never_reaches_the_log_or_an_answer(tmp_home: Path) -> None:
    with EchoingProvider() as provider:
        (tmp_home / "config.toml").write_text(
            '[sessions]\npaths = []\n[embedding]\nprovider = "openai"\n'
            f'base_url = "{provider.url}"\napi_key_env = "RECALLD_TEST_KEY"\n'
            "max_retries = 2\ntimeout_s = 5.0\n"
        )
        proc, log = _serve_verbose(tmp_home, {"RECALLD_TEST_KEY": KEY})
        answers: list[str] = []
        try:
            sock = tmp_home / "run" / "recalld.sock"
            wait_for(lambda: sock.exists() and _answers(sock), timeout=60)
            with Client(sock, timeout=60) as c:
                wait_for(lambda: c.status()["last_sync"] is not None, timeout=60)
                answers.append(json.dumps(c.status()))
                for mode in ("hybrid", "vector", "keyword"):
                    code, text = _call(c, "search", {"query": "ferry timetable", "mode": mode})
                    answers.append(f"{code} {text}")
                answers.append(json.dumps(c.sync(wait=True)))
                answers.append(json.dumps(c.status()))
            cli = subprocess.run(
                [sys.executable, "-m", "recalld.surfaces.cli", "status"],
                env=env_for(tmp_home),
                capture_output=True,
                text=True,
                timeout=60,
            )
            answers.append(cli.stdout + cli.stderr)
        finally:
            stop_process(proc)
        assert len(provider.seen) >= 2  # the provider was called: 500, then 401
        assert all(s == f"Bearer {KEY}" for s in provider.seen)  # with the key
    text = log.read_text()
    assert "DEBUG" in text and ("401" in text or "refused the API key" in text)
    assert KEY not in text
    assert KEY[8:30] not in text  # nor a good part of it
    for answer in answers:
        assert KEY not in answer and KEY[8:30] not in answer, answer[:300]


def _answers(sock: Path) -> bool:
    try:
        with Client(sock, timeout=2, reconnect=False) as c:
            c.hello()
    except RecalldClientError:
        return False
    return True


@pytest.mark.slow
def test_config_holding_a_key_readable_by_others_is_reported(tmp_home: Path) -> None:
    inline = "sk-proj-INLINEKEY9876543210zyxwvutsrqponmlkjihg"
    config = tmp_home / "config.toml"
    config.write_text(
        '[sessions]\npaths = []\n[embedding]\nprovider = "openai"\n'
        'base_url = "http://127.0.0.1:9"\n'  # nothing listens: the key is never sent anywhere
        f'api_key = "{inline}"\nmax_retries = 0\ntimeout_s = 1.0\n'
    )
    os.chmod(config, 0o644)
    d = DaemonProcess(tmp_home).start()
    try:
        with d.client() as c:
            warnings = c.status()["warnings"]
            assert any(
                "readable by other users" in w and "embedding.api_key" in w for w in warnings
            )
            assert all(inline not in w for w in warnings)
            human = subprocess.run(
                [sys.executable, "-m", "recalld.surfaces.cli", "status"],
                env=env_for(tmp_home),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert human.returncode == 0, human.stderr
            assert "warning:" in human.stdout and "chmod 600" in human.stdout
            assert inline not in human.stdout + human.stderr
            # fixed: the warning goes away without a restart
            os.chmod(config, 0o600)
            assert c.status()["warnings"] == []
            # a config others can write decides where notes are sent: reported too
            os.chmod(config, 0o666)
            assert any("writable by other users" in w for w in c.status()["warnings"])
            os.chmod(config, 0o600)
    finally:
        d.stop()
    log = d.log.read_text()
    assert "readable by other users" in log  # said at start-up
    assert inline not in log
    # without a daemon, `recalld status` (in-process) says it too
    os.chmod(config, 0o640)
    local = subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", "status", "--json"],
        env=env_for(tmp_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert local.returncode == 0, local.stderr
    status = json.loads(local.stdout)
    assert any("readable by other users" in w for w in status["warnings"])
    assert inline not in local.stdout + local.stderr
