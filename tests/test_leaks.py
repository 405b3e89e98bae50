"""Issue 41, items 1, 6 and 10: no secret leaves recalld, whichever way the text goes out.

A private key printed by a tool (``cat key.json``, ``kubectl get secret -o json``, ``gcloud ...
--format=json``) in Claude Code, Codex and OpenClaw transcripts, secret shapes in a memory note,
and a note that becomes a link to ``.env`` while watching is paused. Checked through a real
daemon (get raw and decoded, search snippets, status, errors, the log and the index file), the
CLI with and without a daemon, and MCP ``memory_get``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess
from leak_fixtures import FORMATS, OUTPUTS, RSA_PEM, key_parts, transcript
from recalld.ingest.redactor import redact
from recalld.ingest.sessions.decoded import decode_line
from recalld.ingest.sessions.formats import parse_lines
from recalld.ingest.sessions.redaction import redact_line
from recalld.serve.log_guard import ScrubbingFormatter
from recalld_client import Client, RecalldClientError

PARTS = key_parts()

# (text, the literal that must go, a kind it becomes)
SHAPES = {
    "redis": ("REDIS_URL=redis://:v8Kq2mZt7pLw@cache.internal:6379/0", "v8Kq2mZt7pLw"),
    "azure": (
        "DefaultEndpointsProtocol=https;AccountName=harborlogs;AccountKey="
        "q9Zt0mB7c2XxK4vL1sP8dR6fH3jN5wY0aE2uT9iO4gQ7kM1nB3vC5xZ8lJ6hF0dS2aP4oI7uY9tR1eW3qA5zX==;"
        "EndpointSuffix=core.windows.net",
        "q9Zt0mB7c2XxK4vL1sP8dR6fH3jN5wY0aE2uT9iO4gQ7kM1nB3vC5xZ8lJ6hF0dS2aP4oI7uY9tR1eW3qA5zX",
    ),
    "sendgrid": (
        "mail via 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 today",
        "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    ),
    "telegram": (
        "bot 7281940365:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8 posts alerts",
        "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8",
    ),
    "discord": (
        "DISCORD=MTA4NjY3NzQ5MDk4NTQ1NjcxMA.GkXyzA.q1w2e3r4t5y6u7i8o9p0AsDfGhJkLzXcV and go",
        "q1w2e3r4t5y6u7i8o9p0AsDfGhJkLzXcV",
    ),
    "curl": ("curl -sS -u deploy:Tr0ub4dor-88 https://api.example.com/v1", "Tr0ub4dor-88"),
    "mysql": ("mysql -h db -u root -pS3cr3tRoot42 harbor", "S3cr3tRoot42"),
    "mysql_long": ("mysqldump --password=Dump-Pass-77 harbor", "Dump-Pass-77"),
    "sshpass": ("sshpass -p 'Ferry#Key9' ssh ops@10.0.0.5", "Ferry#Key9"),
    "netrc": (
        "machine api.harbor.dev\n  login ops@harbor.dev\n  password n3trc-Pa55\n",
        "n3trc-Pa55",
    ),
}
# Look-alikes from ordinary commands and prose: left as they are.
LOOKALIKES = [
    "docker run -u 1000:1000 harbor/web",
    "mysql -h db -P3306 -u root -p harbor",
    "curl -u $API_USER:$API_PASS https://api.example.com",
    "the machine's password reset page lives at /reset",
    "pip install -U requests; set -u",
    "redis://localhost:6379/0 and postgres://db:5432/app",
    "version 1.2.3: see SG.md and https://example.com/a.b.c",
    "sshpass -p {{password}} ssh {{host}}",
]


# -- the redactor itself ---------------------------------------------------------------------------


def _nest(line: str, depth: int) -> str:
    """``line`` as a JSON string inside a JSON object, ``depth`` more times."""
    for _ in range(depth):
        line = json.dumps({"wrapped": line})
    return line


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("command", sorted(OUTPUTS))
def test_private_keys_go_whole_at_every_escape_depth(fmt: str, command: str) -> None:
    lines = transcript(fmt, command, OUTPUTS[command]).splitlines()
    assert any(p in "\n".join(lines) for p in PARTS)  # the fixture holds the key
    indexed = "\n".join(m.text for m in parse_lines(list(enumerate(lines, 1)))[0])
    decoded = "\n".join(decode_line(line) for line in lines)
    for depth in range(4):  # as written, then inside one, two and three more JSON strings
        for line in lines:
            served = redact_line(_nest(line, depth))
            json.loads(served)  # still valid JSON
            leaked = [p for p in PARTS if p in served]
            assert not leaked, (depth, leaked, served[:300])
            assert "END PRIVATE KEY" not in served and "END RSA PRIVATE" not in served
    for text in (indexed, decoded):
        assert not [p for p in PARTS if p in text]
        assert "[REDACTED:private_key]" in text


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_new_secret_shapes_are_redacted(name: str) -> None:
    text, literal = SHAPES[name]
    out, count = redact(text)
    assert literal not in out and count >= 1, out
    assert "[REDACTED:" in out
    assert out.count("\n") == text.count("\n")
    raw = json.dumps({"type": "user", "message": {"role": "user", "content": text}})
    served = redact_line(raw)
    assert literal not in served and json.loads(served)
    assert literal not in redact_line(_nest(raw, 2))


@pytest.mark.parametrize("text", LOOKALIKES)
def test_lookalikes_are_left_alone(text: str) -> None:
    assert redact(text) == (text, 0)
    raw = json.dumps({"c": text})
    assert redact_line(raw) == raw


def test_a_note_keeps_its_line_numbers() -> None:
    note = "# Ops\n\nDeploy key:\n\n" + RSA_PEM + "\nafter the key\n" + SHAPES["curl"][0] + "\n"
    out, count = redact(note)
    assert count == 2
    assert out.count("\n") == note.count("\n")
    assert out.splitlines()[4] == "[REDACTED:private_key]"
    assert out.splitlines().index("after the key") == note.splitlines().index("after the key")
    assert redact(out) == (out, 0)  # idempotent


def test_a_block_cut_before_its_begin_line_goes_too() -> None:
    tail = "log: started\n" + "\n".join(RSA_PEM.splitlines()[-4:]) + "\nlog: done\n"
    out, count = redact(tail)
    assert count == 1 and not _leaks(out)
    assert out.splitlines()[0] == "log: started" and out.splitlines()[-1] == "log: done"
    assert out.count("\n") == tail.count("\n")
    raw = json.dumps({"c": tail})
    assert not _leaks(redact_line(raw)) and json.loads(redact_line(raw))


def test_log_lines_are_redacted_without_any_configured_key() -> None:
    fmt = ScrubbingFormatter(logging.Formatter("%(message)s"), ())
    record = logging.LogRecord("t", logging.WARNING, __file__, 1, "read %s", (RSA_PEM,), None)
    text = fmt.format(record)
    assert text.startswith("read [REDACTED:private_key]") and not [p for p in PARTS if p in text]


# -- through a real daemon, the CLI and MCP --------------------------------------------------------


@dataclass
class Leaky:
    path: Path
    daemon: DaemonProcess
    offline: dict[str, str]  # CLI answers given in-process, before the daemon started

    @property
    def memory(self) -> Path:
        return self.path / "memory"

    @property
    def sessions(self) -> Path:
        return self.path / "sessions"


NOTE = (
    "# Harbor ops\n\nThe lighthouse deploy key for the harbor cluster:\n\n"
    + RSA_PEM
    + "\nRotate the lighthouse key every spring.\n"
    + "".join(text + "\n" for text, _ in SHAPES.values())
)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recalld.surfaces.cli", *args],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def leaky() -> Iterator[Leaky]:
    home = Path(tempfile.mkdtemp(prefix="rcd-leak-", dir="/tmp"))
    mem, sessions = home / "memory", home / "sessions"
    write(mem / "ops.md", NOTE)
    write(mem / "plain.md", "# Plain\n\nThe lighthouse keeper logs the tide at dawn.\n")
    for fmt in FORMATS:
        for command, output in OUTPUTS.items():
            name = f"{fmt}-{command.split()[0]}.jsonl"
            write(sessions / name, transcript(fmt, command, output))
    (home / "config.toml").write_text(
        f'[memory]\npaths = ["{mem}"]\n[sessions]\npaths = ["{sessions}/*.jsonl"]\n'
        '[embedding]\nprovider = "none"\n[sync]\ndebounce_s = 0.3\n'
    )
    offline: dict[str, str] = {}
    done = _cli(home, "sync", "--json")
    assert done.returncode == 0, done.stderr
    for key, args in {
        "get": ("get", str(sessions / "claude-cat.jsonl")),
        "get_decoded": ("get", "--decoded", str(sessions / "codex-kubectl.jsonl")),
        "get_note": ("get", str(mem / "ops.md")),
        "search": ("search", "lighthouse deploy key", "--json"),
    }.items():
        done = _cli(home, *args)
        assert done.returncode == 0, done.stderr
        offline[key] = done.stdout + done.stderr
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        yield Leaky(home, d, offline)
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)


def _leaks(text: str) -> list[str]:
    found = [p for p in PARTS if p in text]
    found += [literal for _, literal in SHAPES.values() if literal in text]
    return found + [m for m in ("END PRIVATE KEY", "END RSA PRIVATE KEY") if m in text]


def test_daemon_serves_no_secret_through_get_search_or_status(leaky: Leaky) -> None:
    with Client(leaky.daemon.socket) as c:
        served_before = c.status()["redactions"]["served"]["total"]
        for path in sorted(leaky.sessions.glob("*.jsonl")):
            for decoded in (False, True):
                got = c.get(str(path), decoded=decoded)
                assert got["text"] and not _leaks(got["text"]), (path.name, decoded)
                assert "[REDACTED:private_key]" in got["text"]
            raw = c.get(str(path))["text"]
            assert all(json.loads(line) for line in raw.splitlines())
        note = leaky.memory / "ops.md"
        whole = c.get(str(note))
        assert not _leaks(whole["text"])
        assert whole["total_lines"] == NOTE.count("\n")
        lines = whole["text"].split("\n")
        assert lines[4] == "[REDACTED:private_key]"  # line numbers are the file's
        assert lines[NOTE.split("\n").index("Rotate the lighthouse key every spring.")] == (
            "Rotate the lighthouse key every spring."
        )
        inside = c.get(str(note), from_line=8, lines=3)  # a range in the key's body
        assert inside["text"] == "\n\n" and inside["start_line"] == 8
        assert c.status()["redactions"]["served"]["total"] > served_before
        for query in ("lighthouse deploy key", "service_account deployer", "kubectl secret tls"):
            for sources in (["memory"], ["sessions"], None):
                res = c.search(query, sources=sources, min_score=0.0, max_results=20)
                assert not _leaks(json.dumps(res)), (query, sources)
        hits = c.search("lighthouse deploy key", sources=["memory"], min_score=0.0)["results"]
        assert any("[REDACTED:" in h["snippet"] for h in hits)  # the note is found, redacted
        assert not _leaks(json.dumps(c.status()))
        # An error that would quote a secret (a path named after one) says it redacted.
        code, message = _error(c, {"path": str(leaky.memory / f"{SHAPES['sendgrid'][0]}.md")})
        assert code in ("forbidden", "not_found")
        assert SHAPES["sendgrid"][1] not in message and "[REDACTED:sendgrid_key]" in message
    index = b"".join(
        p.read_bytes() for p in leaky.path.iterdir() if p.name.startswith("index.sqlite")
    ).decode("latin-1")
    assert not _leaks(index) and "REDACTED" in index
    assert not _leaks(leaky.daemon.log_tail(1_000_000))


def _error(c: Client, params: dict[str, Any]) -> tuple[str, str]:
    try:
        c.call("get", params)
    except RecalldClientError as exc:
        return exc.code, str(exc)
    raise AssertionError("get answered")


def test_cli_serves_no_secret_with_or_without_a_daemon(leaky: Leaky) -> None:
    for key, out in leaky.offline.items():  # in-process: no daemon was running
        assert out.strip() and not _leaks(out), key
    assert "[REDACTED:private_key]" in leaky.offline["get"]
    assert "[REDACTED:private_key]" in leaky.offline["get_note"]
    for args in (
        ("get", str(leaky.sessions / "openclaw-gcloud.jsonl")),
        ("get", "--decoded", str(leaky.sessions / "claude-kubectl.jsonl")),
        ("get", str(leaky.memory / "ops.md")),
    ):
        done = _cli(leaky.path, *args)
        assert done.returncode == 0 and "[REDACTED:" in done.stdout, done.stderr
        assert not _leaks(done.stdout + done.stderr), args


def test_mcp_memory_get_serves_no_secret(leaky: Leaky, monkeypatch: pytest.MonkeyPatch) -> None:
    from recalld.surfaces import mcp_server

    monkeypatch.setenv("RECALLD_HOME", str(leaky.path))

    def no_spawn(log_path: Path) -> subprocess.Popen[bytes]:
        raise AssertionError("the daemon runs already")

    link = mcp_server.DaemonLink(spawn=no_spawn)
    for target in (leaky.sessions / "codex-cat.jsonl", leaky.memory / "ops.md"):
        out = mcp_server.run_tool(link, "memory_get", {"path": str(target)})
        assert "[REDACTED:" in out.text
        assert not _leaks(out.text) and not _leaks(json.dumps(out.structured)), target
    found = mcp_server.run_tool(link, "memory_search", {"query": "lighthouse deploy key"})
    assert not _leaks(found.text + json.dumps(found.structured))


def test_mcp_quotes_a_failed_start_log_redacted(home: Path) -> None:
    """The agent sees the tail of the daemon's log when it cannot start: written by the daemon
    before its log was scrubbed (a crash), so the tail is redacted on its way out."""
    from recalld.surfaces import mcp_server

    def spawn(log_path: Path) -> subprocess.Popen[bytes]:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"config error near {SHAPES['curl'][0]}\n{RSA_PEM}")
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    link = mcp_server.DaemonLink(start_timeout=10, spawn=spawn)
    with pytest.raises(mcp_server.ToolError) as failed:
        mcp_server.run_tool(link, "memory_get", {"path": "a.md"})
    text = mcp_server.describe_error(failed.value)
    assert "exited with code 3" in text and "[REDACTED:" in text
    assert not _leaks(text)


# -- item 10: checks at read time, not from the watcher ------------------------------------------


ENV = "HARBOR_DB_PASSWORD=plain-env-value-0042\n"


def _refused(c: Client, path: Path, decoded: bool = False) -> str:
    try:
        got = c.get(str(path), decoded=decoded)
    except RecalldClientError as exc:
        assert exc.code == "forbidden", exc
        return str(exc)
    raise AssertionError(f"served {got['text'][:200]!r}")


def test_get_refuses_an_indexed_file_that_became_a_link_while_paused(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="rcd-link-", dir="/tmp"))
    try:
        mem, sessions = home / "memory", home / "sessions"
        for name in ("a.md", "b.md", "c.md"):
            write(mem / name, f"# {name}\n\nThe lighthouse keeper logs the tide.\n")
        write(mem / ".env", ENV)
        write(sessions / "chat.jsonl", transcript("claude", "ls", "a.md b.md"))
        write(sessions / "auth-profiles.json", '{"token": "plain-env-value-0042"}\n')
        (home / "config.toml").write_text(
            f'[memory]\npaths = ["{mem}"]\n[sessions]\npaths = ["{sessions}/*.jsonl"]\n'
            '[embedding]\nprovider = "none"\n[sync]\ndebounce_s = 0.3\n'
        )
        assert _cli(home, "sync", "--json").returncode == 0
        # Without a daemon (the CLI's in-process get): a note now a link to .env is refused.
        (mem / "a.md").unlink()
        (mem / "a.md").symlink_to(mem / ".env")
        done = _cli(home, "get", str(mem / "a.md"))
        assert done.returncode != 0 and "plain-env-value" not in done.stdout + done.stderr
        assert "not a file recalld indexes" in done.stderr
        d = DaemonProcess(home).start()
        try:
            d.wait_idle()
            with Client(d.socket) as c:
                assert c.call("pause", {"paused": True})["paused"] is True
                (mem / "b.md").unlink()
                (mem / "b.md").symlink_to(mem / ".env")
                os.rename(sessions / "chat.jsonl", sessions / "chat.old")
                (sessions / "chat.jsonl").symlink_to(sessions / "auth-profiles.json")
                outside = tmp_path / "elsewhere.md"
                outside.write_text(ENV)
                (mem / "c.md").unlink()
                (mem / "c.md").symlink_to(outside)
                for path in (mem / "a.md", mem / "b.md", sessions / "chat.jsonl", mem / "c.md"):
                    for decoded in (False, True):
                        message = _refused(c, path, decoded)
                        assert "plain-env-value" not in message
                hits = c.search("lighthouse keeper", min_score=0.0)["results"]
                assert hits and "plain-env-value" not in json.dumps(hits)
                assert c.status()["daemon"]["paused"] is True  # the watcher never saw any of it
            done = _cli(home, "get", str(mem / "b.md"))  # the CLI through the daemon
            assert done.returncode != 0 and "plain-env-value" not in done.stdout + done.stderr
        finally:
            d.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_search_helper_serves_no_secret(home: Path) -> None:
    """Snippets answered by the search helper process go through the same gate (the helper
    starts with the local model on, as in test_search_helper)."""
    from test_search_helper import _hammer, _helper, _until_ready

    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n")
    write(home / "memory" / "ops.md", NOTE)
    for i in range(30):
        write(home / "memory" / f"n{i}.md", f"# Note {i}\n\nThe lighthouse deploy key {i}.\n")
    queries = ["lighthouse deploy key", "rotate the lighthouse key", "harbor cluster", "curl"]
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        before = _until_ready(d, queries)["searches"]

        def clean(query: str, result: Any) -> None:
            assert not _leaks(json.dumps(result)), query

        _hammer(d, queries, 3.0, clean)
        assert _helper(d)["searches"] > before  # some answers came from the helper
    finally:
        d.stop()
