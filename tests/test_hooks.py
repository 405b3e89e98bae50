"""``recalld hook session-start|sync`` against a real daemon, fed the JSON Claude Code sends."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_env import agent_env, recalld
from conftest import write
from daemon_process import DaemonProcess, wait_for

NOTE = """# Orchid service

Decision (orchid): the orchid ingest queue keeps 3 retries with jittered backoff; we chose
Redis streams over Kafka because the orchid team runs one node.
"""
OTHER = "# Gardening\n\nWater the tomatoes every morning in July.\n"
OPS = (
    "---\ntitle: Orchid ops\ntags: [orchid, ops]\naliases: [orchid runbook]\n---\n\n"
    "# Orchid ops\n\nThe orchid pager rota rotates weekly on Mondays.\n"
)


@pytest.fixture
def env_home() -> Iterator[tuple[dict[str, str], Path]]:
    path = Path(tempfile.mkdtemp(prefix="rcd-k-", dir="/tmp"))
    env = agent_env(path)
    rh = Path(env["RECALLD_HOME"])
    write(rh / "memory" / "orchid.md", NOTE)
    write(rh / "memory" / "garden.md", OTHER)
    write(rh / "memory" / "orchid-ops.md", OPS)
    write(rh / "config.toml", '[sessions]\npaths = ["~/.claude/projects/**/*.jsonl"]\n')
    yield env, path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _start(home: Path) -> DaemonProcess:
    daemon = DaemonProcess(home / "rh", env={"HOME": str(home)})
    daemon.start()
    daemon.wait_idle()
    return daemon


def _claude_line(role: str, text: str, cwd: str) -> str:
    return json.dumps(
        {
            "type": role,
            "cwd": cwd,
            "sessionId": "s1",
            "timestamp": "2026-12-01T10:00:00Z",
            "message": {"role": role, "content": text},
        }
    )


@pytest.mark.timeout(180)
def test_session_start_brings_the_project_note_and_sync_indexes_the_transcript(
    env_home: tuple[dict[str, str], Path],
) -> None:
    env, home = env_home
    cwd = "/work/orchid"
    daemon = _start(home)
    try:
        start = {
            "session_id": "s1",
            "transcript_path": "",
            "cwd": cwd,
            "hook_event_name": "SessionStart",
            "source": "startup",
        }
        out = recalld(env, "hook", "session-start", stdin=json.dumps(start))
        assert out.returncode == 0 and out.stderr == "", out.stderr
        ctx = json.loads(out.stdout)["hookSpecificOutput"]
        assert ctx["hookEventName"] == "SessionStart"
        text = ctx["additionalContext"]
        assert "Redis streams over Kafka" in text
        assert f"[{home / 'rh' / 'memory' / 'orchid.md'}#L1-L" in text  # with its citation
        assert "tomatoes" not in text
        assert "pager rota" in text and "aliases:" not in text  # the body, not its front matter
        # Nothing relevant: nothing printed.
        other = recalld(env, "hook", "session-start", stdin=json.dumps({**start, "cwd": "/w/zz9"}))
        assert other.returncode == 0 and other.stdout == "", other.stdout
        # A transcript of this folder, then PreCompact: the daemon reads it now.
        folder = home / ".claude" / "projects" / "-work-orchid"
        transcript = folder / "s1.jsonl"
        write(
            transcript,
            "\n".join(
                [
                    _claude_line("user", "orchid: why did the nightly export stall?", cwd),
                    _claude_line(
                        "assistant", "The orchid export stalled on a quokka lock timeout.", cwd
                    ),
                ]
            )
            + "\n",
        )
        pre = {
            "session_id": "s1",
            "transcript_path": str(transcript),
            "cwd": cwd,
            "hook_event_name": "PreCompact",
            "trigger": "auto",
            "custom_instructions": "",
        }
        t = time.monotonic()
        synced = recalld(env, "hook", "sync", stdin=json.dumps(pre))
        assert synced.returncode == 0 and synced.stderr == "", synced.stderr
        assert time.monotonic() - t < 10

        def found() -> bool:
            with daemon.client() as c:
                return bool(c.search("quokka lock", sources=["sessions"])["results"])

        wait_for(found, timeout=30)
        later = {**start, "session_id": "s2"}  # a new session in the same folder
        again = recalld(env, "hook", "session-start", stdin=json.dumps(later))
        assert "earlier session" in again.stdout and str(transcript) in again.stdout
        # Resuming s1 itself: its own transcript is not offered back to it.
        resumed = {**start, "source": "resume"}
        back = recalld(env, "hook", "session-start", stdin=json.dumps(resumed))
        assert "Redis streams" in back.stdout and str(transcript) not in back.stdout
        # The budget holds: a tiny integrate.context_tokens keeps the output short.
        cfg = home / "rh" / "config.toml"
        cfg.write_text(cfg.read_text() + "[integrate]\ncontext_tokens = 100\n")
        small = json.loads(recalld(env, "hook", "session-start", stdin=json.dumps(start)).stdout)
        assert len(small["hookSpecificOutput"]["additionalContext"]) <= 100 * 4
    finally:
        daemon.stop()


@pytest.mark.timeout(120)
def test_sync_refuses_a_file_outside_the_transcript_globs(
    env_home: tuple[dict[str, str], Path],
) -> None:
    env, home = env_home
    daemon = _start(home)
    try:
        secret = write(home / "secret.jsonl", '{"role": "user", "content": "pw"}\n')
        end = {
            "session_id": "s",
            "transcript_path": str(secret),
            "cwd": str(home),
            "hook_event_name": "SessionEnd",
            "reason": "exit",
        }
        out = recalld(env, "hook", "sync", stdin=json.dumps(end))
        assert out.returncode == 0 and out.stdout == ""
        assert len(out.stderr.splitlines()) == 1 and "not a transcript" in out.stderr
    finally:
        daemon.stop()


@pytest.mark.parametrize(
    ("event", "stdin", "said"),
    [
        ("session-start", '{"cwd": "/work/orchid", "source": "startup"}', "did not answer"),
        ("sync", '{"transcript_path": "/tmp/x.jsonl"}', "did not take the sync"),
        ("session-start", "not json", "not JSON"),
        ("session-start", "[1, 2]", "not a JSON object"),
        ("sync", "{}", "no absolute transcript_path"),
        ("bogus", "{}", "unknown hook"),
    ],
)
def test_a_hook_never_breaks_the_agent(
    env_home: tuple[dict[str, str], Path], event: str, stdin: str, said: str
) -> None:
    env, _ = env_home  # no daemon runs
    t = time.monotonic()
    out = recalld(env, "hook", event, stdin=stdin)
    assert out.returncode == 0 and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and said in out.stderr, out.stderr
    assert time.monotonic() - t < 8


def test_a_hook_with_stdin_left_open_gives_up_in_time(
    env_home: tuple[dict[str, str], Path],
) -> None:
    import subprocess
    import sys

    env, _ = env_home
    exe = Path(sys.executable).parent / "recalld"
    t = time.monotonic()
    proc = subprocess.Popen(
        [str(exe), "hook", "sync"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.wait(timeout=15) == 0  # stdin is never written nor closed
    finally:
        if proc.poll() is None:
            proc.kill()
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.close()
    assert time.monotonic() - t < 15
    assert (
        proc.stderr.read().decode().strip() == "recalld hook sync: no hook input on stdin in time"
    )
