"""Shared by the test_security_* modules (issue 8): a home with a daemon, files inside and
outside its roots (the module-scoped ``secure`` fixture: a real ``recalld serve`` over an index
left readable by others), the secrets its transcript holds, and a call that answers its error
code instead of raising."""

from __future__ import annotations

import json
import os
import shutil
import stat
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
from recalld_client import Client, RecalldClientError

MARKER = "OUTSIDE-MARKER-7f3a9c"  # in every file that get must refuse

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
