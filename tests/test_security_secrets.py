"""Security (issue 8): where secrets may end up, against real ``recalld serve`` processes.

Secrets in a transcript are redacted before indexing (no search finds them, the index file
holds none of them) and when ``get`` serves the transcript's lines, indexed or not yet. An API
key never reaches the log (debug logging on, a provider that fails with 401 and 500 and echoes
the key back) nor any answer; a config file holding a key that other users can read is reported
in the log, in ``status`` (``warnings``) and by ``recalld status``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess, stop_process, wait_for
from recalld_client import Client, RecalldClientError
from security_support import SECRETS, Home, _call, msg
from security_support import secure as secure  # a fixture

pytestmark = pytest.mark.timeout(300)


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
