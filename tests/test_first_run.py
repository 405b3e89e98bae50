"""The first five minutes, through the real ``recalld`` command in a fresh HOME (no RECALLD_HOME):
``init`` finds the notes and transcripts already there, ``start`` runs the daemon in the
background, a search finds a note, ``stop`` ends it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import write

RECALLD = [sys.executable, "-m", "recalld"]


@pytest.fixture
def user_home() -> Iterator[Path]:
    """A HOME laid out like a user's: a vault, ~/notes, Documents folders, agent transcripts."""
    home = Path(tempfile.mkdtemp(prefix="rcd-h-", dir="/tmp"))  # short: the socket lives here
    (home / "Documents/Vault/.obsidian").mkdir(parents=True)
    write(home / "Documents/Vault/daily/2026-01-02.md", "# Standup\n\nWe ship on Friday.\n")
    for i in range(6):
        write(home / f"notes/n{i}.md", f"# Note {i}\n\nThe deploy runs on Kubernetes {i}.\n")
        write(home / f"Documents/Work/deep/w{i}.md", f"# Work {i}\n")
    write(home / "Documents/Few/one.md", "# too few notes to be a notes folder\n")
    write(home / "Documents/Vault2/.obsidian/app.json", "{}")  # an empty vault: still a vault
    write(home / "notes/inner/.obsidian/app.json", "{}")  # inside ~/notes: not listed twice
    write(home / ".claude/projects/-home-me-app/s1.jsonl", "{}\n")
    write(home / ".codex/sessions/2026/01/02/rollout-1.jsonl", "{}\n")
    write(home / ".gemini/tmp/abc123/chats/session-1.json", "{}")
    write(home / ".openclaw/workspace/memory/2026-01-01.md", "# OpenClaw memory\n")
    write(home / ".cache/junk/.obsidian/x", "")  # hidden folders are not searched
    (home / "run").mkdir(mode=0o700)
    yield home
    import shutil

    shutil.rmtree(home, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "XDG_"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(home / "run"))
    return env


def recalld(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RECALLD, *args],
        env=_env(home),
        cwd=home,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_init_proposes_what_it_finds_and_writes_only_when_confirmed(user_home: Path) -> None:
    config = user_home / ".config/recalld/config.toml"
    asked = recalld(user_home, "init")  # no terminal, no --yes: it shows and writes nothing
    assert asked.returncode == 1 and not config.exists()
    assert "recalld init --yes" in asked.stdout and "input is not a terminal" in asked.stdout
    for found in ("Documents/Vault", "Documents/Vault2", "notes", "Documents/Work"):
        assert f"{user_home}/{found}  " in asked.stdout, asked.stdout
    assert "Documents/Few" not in asked.stdout and "inner" not in asked.stdout
    assert ".cache" not in asked.stdout
    assert "Claude Code sessions, 1 file" in asked.stdout
    assert "Codex sessions, 1 file" in asked.stdout
    assert "Gemini CLI chats, 1 file  (not indexed" in asked.stdout

    written = recalld(user_home, "init", "--yes")
    assert written.returncode == 0, written.stderr
    assert f"wrote {config}" in written.stdout
    steps = written.stdout.split("Next:\n", 1)[1].splitlines()
    assert [s.split()[:2] for s in steps] == [
        ["recalld", "start"],
        ["recalld", "sync"],
        ["recalld", "search"],
    ]
    settings = tomllib.loads(config.read_text())
    assert settings["memory"]["paths"] == [
        str(user_home / p)
        for p in ("Documents/Vault", "Documents/Vault2", "notes", "Documents/Work")
    ] + [str(user_home / ".openclaw/workspace/memory")]
    assert "paths" not in settings["sessions"]  # the defaults read Claude Code and Codex
    assert config.stat().st_mode & 0o077 == 0

    again = recalld(user_home, "init", "--yes")
    assert again.returncode == 0 and "already says this" in again.stdout

    config.write_text('[memory]\npaths = ["/elsewhere"]\n')
    kept = recalld(user_home, "init", "--yes")
    assert kept.returncode == 1 and "left as it is" in kept.stdout
    assert config.read_text() == '[memory]\npaths = ["/elsewhere"]\n'
    forced = recalld(user_home, "init", "--yes", "--force", str(user_home / "notes"))
    assert forced.returncode == 0, forced.stderr
    assert (config.parent / "config.toml.bak").read_text() == '[memory]\npaths = ["/elsewhere"]\n'
    assert tomllib.loads(config.read_text())["memory"]["paths"] == [str(user_home / "notes")]

    missing = recalld(user_home, "init", "--yes", "--force", str(user_home / "nope"))
    assert missing.returncode != 0 and "not a folder" in missing.stderr


@pytest.mark.slow
def test_init_start_search_stop_in_a_fresh_home(user_home: Path) -> None:
    assert recalld(user_home, "init", "--yes").returncode == 0
    started = recalld(user_home, "start")
    pid = None
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "recalld is running (pid " in started.stdout
        pid = int(started.stdout.split("(pid ", 1)[1].split(")", 1)[0])
        log = user_home / ".local/share/recalld/logs/daemon.log"
        assert f"log: {log}" in started.stdout and log.exists()
        assert "already running" in recalld(user_home, "start").stdout

        found = recalld(user_home, "sync", "--wait")
        assert found.returncode == 0, found.stderr
        answer = recalld(user_home, "search", "Kubernetes deploy")
        assert answer.returncode == 0, answer.stderr
        assert f"{user_home}/notes/n" in answer.stdout.splitlines()[0]
        status = recalld(user_home, "status", "--json")
        assert '"started_by": "start"' in status.stdout

        stopped = recalld(user_home, "stop")
        assert stopped.returncode == 0 and "recalld stopped" in stopped.stdout
        assert "not running" in recalld(user_home, "stop").stdout
        pid = None
    finally:
        if pid is not None:  # a failed check must not leave a daemon behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_no_warning_without_xdg_runtime_dir(user_home: Path) -> None:
    """ssh sessions, containers and cron have no XDG_RUNTIME_DIR: every command used to print
    platformdirs' RuntimeDirWarning before its answer."""
    env = {k: v for k, v in _env(user_home).items() if k != "XDG_RUNTIME_DIR"}
    probe = "from recalld_client import locations; print(locations.socket_path())"
    shown = subprocess.run(
        [sys.executable, "-W", "default", "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""
    assert shown.stdout.strip().endswith("recalld.sock")


def _fake_systemctl(home: Path, fails: str) -> dict[str, str]:
    """An env whose ``systemctl`` fails the way it does without a user bus (SSH, containers):
    every call when ``fails`` is "all", only ``enable`` when it is "enable"."""
    bin_dir = home / f"fakebin-{fails}"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "systemctl"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "{fails}" = all ] || [ "$2" = enable ]; then\n'
        '  echo "Failed to connect to bus: No medium found" >&2; exit 1\nfi\nexit 0\n'
    )
    script.chmod(0o755)
    env = _env(home)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    return env


def _pid_of(home: Path, env: dict[str, str]) -> int | None:
    status = subprocess.run(
        [*RECALLD, "status", "--json"], env=env, cwd=home, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    pid = json.loads(status.stdout).get("daemon", {}).get("pid") if status.stdout else None
    return int(pid) if pid is not None else None


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="systemd user services are Linux-only")
def test_a_service_install_the_manager_refuses_never_leaves_no_daemon(user_home: Path) -> None:
    """Without a user bus the unit is written but cannot be enabled: the daemon that ran keeps
    running, and ``start``/``stop`` still work although the unit file exists."""
    assert recalld(user_home, "init", "--yes").returncode == 0
    run = lambda env, *a: subprocess.run(  # noqa: E731
        [*RECALLD, *a], env=env, cwd=user_home, capture_output=True, text=True, timeout=240
    )
    no_bus, no_enable = _fake_systemctl(user_home, "all"), _fake_systemctl(user_home, "enable")
    pids: list[int] = []
    try:
        assert run(no_bus, "start").returncode == 0
        first = _pid_of(user_home, no_bus)
        assert first is not None
        pids.append(first)
        refused = run(no_bus, "service", "install")
        assert refused.returncode == 1 and "Failed to connect to bus" in refused.stdout
        assert "stopped the recalld daemon" not in refused.stdout
        assert (user_home / ".config/systemd/user/recalld.service").is_file()
        assert _pid_of(user_home, no_bus) == first  # untouched

        stopped = run(no_bus, "stop")  # the unit is installed; its manager cannot stop it
        assert stopped.returncode == 0 and "recalld stopped" in stopped.stdout, stopped.stderr
        assert _pid_of(user_home, no_bus) is None
        started = run(no_bus, "start")
        assert started.returncode == 0, started.stderr
        assert "instead of as the service" in started.stdout
        assert "logs/daemon.log" in started.stdout
        second = _pid_of(user_home, no_bus)
        assert second is not None and second != first
        pids.append(second)

        handed = run(no_enable, "service", "install")  # reload works, enable does not
        assert handed.returncode == 1
        assert f"stopped the recalld daemon that was running (pid {second})" in handed.stdout
        assert "recalld runs again in the background" in handed.stdout, handed.stdout
        third = None
        for _ in range(100):
            third = _pid_of(user_home, no_bus)
            if third is not None:
                break
            time.sleep(0.2)
        assert third is not None and third != second
        pids.append(third)
        # The manager says it stopped the service, but this daemon is not the service's.
        assert run(no_enable, "stop").returncode == 0
        assert _pid_of(user_home, no_bus) is None
        pids.clear()
    finally:
        for pid in pids:  # a failed check must not leave a daemon behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_init_reads_gemini_clis_jsonl_chats(tmp_path: Path) -> None:
    """Gemini CLI saves its chats as session-*.jsonl, which recalld reads: init proposes them
    (an older CLI's .json chats beside them change nothing)."""
    home = tmp_path / "home"
    write(home / "notes/n.md", "# Note\n\nThe deploy runs on Kubernetes.\n")
    write(home / ".gemini/tmp/abc123/chats/session-1.jsonl", '{"sessionId": "s"}\n')
    write(home / ".gemini/tmp/abc123/chats/old.json", "{}")
    (home / "run").mkdir(mode=0o700)
    asked = recalld(home, "init")
    assert "Gemini CLI chats, 1 file" in asked.stdout and "not indexed" not in asked.stdout
    assert asked.stdout.count("Gemini CLI chats") == 1
    assert recalld(home, "init", "--yes").returncode == 0
    settings = tomllib.loads((home / ".config/recalld/config.toml").read_text())
    assert "~/.gemini/tmp/*/chats/session-*.jsonl" in settings["sessions"]["paths"]
