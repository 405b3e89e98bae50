"""Several agents integrated at once: recalld's config.toml, which they share, keeps each one's
transcript globs until that agent is taken out (no agent CLI on PATH: the file-edit path)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_env import agent_env, recalld
from recalld.config import Config

MINE = "# mine\n[search]\nmax_results = 8\n"
GEMINI = "~/.gemini/tmp/*/chats/session-*.jsonl"


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rcd-h-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _globs(config: Path) -> list[str]:
    return Config.load(config).list("sessions.paths")


def _integrate(env: dict[str, str], *args: str) -> str:
    done = recalld(env, "integrate", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_removing_one_agent_keeps_the_others_globs_then_the_last_restores(home: Path) -> None:
    # Claude Code's folder moved: its glob is not one of the defaults, so it is added too.
    env = {**agent_env(home), "CLAUDE_CONFIG_DIR": str(home / "cc")}
    claude = "~/cc/projects/**/*.jsonl"
    config = home / "rh" / "config.toml"
    config.parent.mkdir()
    config.write_text(MINE)
    _integrate(env, "gemini-cli")
    _integrate(env, "claude-code")
    assert GEMINI in _globs(config) and claude in _globs(config)
    out = _integrate(env, "gemini-cli", "--remove")
    assert "restored" not in out.split("transcript folder")[1], out
    assert GEMINI not in _globs(config) and claude in _globs(config)
    out = _integrate(env, "claude-code", "--remove")
    assert config.read_text() == MINE, out  # the last one out: the bytes from before recalld


def test_removing_an_agent_whose_glob_was_a_default_leaves_the_others(home: Path) -> None:
    env = agent_env(home)
    config = home / "rh" / "config.toml"
    _integrate(env, "gemini-cli")
    assert "transcript folder" in _integrate(env, "claude-code")  # covered: unchanged
    out = _integrate(env, "claude-code", "--remove")
    assert "rh/config.toml: unchanged" in out, out
    assert GEMINI in _globs(config) and "~/.claude/projects/**/*.jsonl" in _globs(config)
    listed = recalld(env, "integrate", "--list").stdout
    assert f"transcripts {GEMINI}: indexed" in listed, listed
    _integrate(env, "gemini-cli", "--remove")
    assert not config.exists()  # recalld created it: gone again


def test_the_users_edit_between_two_integrations_stays(home: Path) -> None:
    env = {**agent_env(home), "CLAUDE_CONFIG_DIR": str(home / "cc")}
    config = home / "rh" / "config.toml"
    config.parent.mkdir()
    config.write_text(MINE)
    _integrate(env, "gemini-cli")
    config.write_text(config.read_text() + "# keep this note\n")
    _integrate(env, "claude-code")
    _integrate(env, "claude-code", "--remove")
    _integrate(env, "gemini-cli", "--remove")
    text = config.read_text()
    assert "# keep this note" in text and text.startswith(MINE), text
    assert GEMINI not in _globs(config) and "~/cc/projects/**/*.jsonl" not in _globs(config)
