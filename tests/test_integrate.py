"""``recalld integrate`` editing the agents' files itself (no agent CLI on PATH)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_env import agent_env, recalld
from recalld.surfaces import exit_codes

CODEX_CONFIG = """# my codex settings
model = "o3"  # the good one

[mcp_servers.other]
command = "other-server"   # keep me
args = ["--flag"]

[profiles.fast]
model = "o4-mini"
"""

CLAUDE_SETTINGS = {
    "model": "opus",
    "hooks": {
        "SessionStart": [
            {"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}
        ],
        "PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt.sh"}]}],
    },
    "permissions": {"allow": ["Bash(ls:*)"]},
}


@pytest.fixture
def fresh_home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rcd-h-", dir="/tmp"))
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_codex_toml_keeps_comments_is_idempotent_and_remove_restores(fresh_home: Path) -> None:
    env = agent_env(fresh_home)
    config = fresh_home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_CONFIG)
    first = recalld(env, "integrate", "codex")
    assert first.returncode == 0, first.stderr
    text = config.read_text()
    lines = iter(text.splitlines())
    assert all(line in lines for line in CODEX_CONFIG.splitlines())  # all kept, in order
    exe = str(Path(env["RECALLD_HOME"]).parent)  # sanity: the fixture's paths
    assert exe == str(fresh_home)
    assert '[mcp_servers.recalld]\ncommand = "/' in text and 'args = ["mcp"]' in text
    after = config.read_bytes()
    second = recalld(env, "integrate", "codex")
    assert second.returncode == 0 and "unchanged" in second.stdout
    assert config.read_bytes() == after  # a second run changes no byte
    removed = recalld(env, "integrate", "codex", "--remove")
    assert removed.returncode == 0 and "restored" in removed.stdout, removed.stdout
    assert config.read_text() == CODEX_CONFIG


def test_claude_code_keeps_the_users_hooks_and_servers(fresh_home: Path) -> None:
    env = agent_env(fresh_home)
    settings = fresh_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(CLAUDE_SETTINGS, indent=4) + "\n")
    claude_json = fresh_home / ".claude.json"
    claude_json.write_text(json.dumps({"numStartups": 3, "mcpServers": {"gh": {"command": "gh"}}}))
    done = recalld(env, "integrate", "claude-code")
    assert done.returncode == 0, done.stderr
    got = json.loads(settings.read_text())
    assert settings.read_text().startswith('{\n    "model"')  # the file's own indent
    assert got["model"] == "opus" and got["permissions"] == CLAUDE_SETTINGS["permissions"]
    start = got["hooks"]["SessionStart"]
    assert start[0] == CLAUDE_SETTINGS["hooks"]["SessionStart"][0]  # the user's hook first
    assert start[1]["hooks"][0]["command"].endswith("recalld hook session-start")
    assert got["hooks"]["PostToolUse"] == CLAUDE_SETTINGS["hooks"]["PostToolUse"]
    for event in ("PreCompact", "SessionEnd"):
        assert got["hooks"][event][0]["hooks"][0]["command"].endswith("recalld hook sync")
    servers = json.loads(claude_json.read_text())["mcpServers"]
    assert servers["gh"] == {"command": "gh"}
    assert Path(servers["recalld"]["command"]).is_absolute() and servers["recalld"]["args"] == [
        "mcp"
    ]
    before = (settings.read_bytes(), claude_json.read_bytes())
    assert recalld(env, "integrate", "claude-code").returncode == 0
    assert (settings.read_bytes(), claude_json.read_bytes()) == before
    # The user changes the file after: --remove takes out recalld's hooks only.
    got["hooks"]["Stop"] = [{"hooks": [{"type": "command", "command": "notify"}]}]
    settings.write_text(json.dumps(got, indent=4) + "\n")
    removed = recalld(env, "integrate", "claude-code", "--remove")
    assert removed.returncode == 0, removed.stderr
    left = json.loads(settings.read_text())
    assert left["hooks"] == {**CLAUDE_SETTINGS["hooks"], "Stop": got["hooks"]["Stop"]}
    assert json.loads(claude_json.read_text()) == {
        "numStartups": 3,
        "mcpServers": {"gh": {"command": "gh"}},
    }


def test_a_config_that_cannot_be_parsed_is_never_touched(fresh_home: Path) -> None:
    env = agent_env(fresh_home)
    broken = fresh_home / ".claude.json"
    broken.write_text('{"mcpServers": {')
    done = recalld(env, "integrate", "claude-code")
    assert done.returncode == exit_codes.CONFIG
    assert str(broken) in done.stderr and "not valid JSON" in done.stderr
    assert broken.read_text() == '{"mcpServers": {'
    assert not (fresh_home / ".claude").exists()  # nothing else changed either


def test_print_shows_the_change_and_makes_none(fresh_home: Path) -> None:
    env = agent_env(fresh_home)
    shown = recalld(env, "integrate", "gemini-cli", "--print")
    assert shown.returncode == 0, shown.stderr
    assert '+    "recalld": {' in shown.stdout and "would change" in shown.stdout
    assert "~/.gemini/tmp/*/chats/session-*.jsonl" in shown.stdout  # the transcript glob
    assert not (fresh_home / ".gemini").exists() and not (fresh_home / "rh").exists()


def test_gemini_adds_its_transcripts_to_sessions_paths_and_remove_restores(
    fresh_home: Path,
) -> None:
    env = agent_env(fresh_home)
    config = fresh_home / "rh" / "config.toml"
    config.parent.mkdir()
    config.write_text("# mine\n[search]\nmax_results = 8\n")
    assert recalld(env, "integrate", "gemini-cli").returncode == 0
    text = config.read_text()
    assert text.startswith("# mine\n[search]\nmax_results = 8\n")
    assert '"~/.claude/projects/**/*.jsonl",' in text  # the defaults stay indexed
    assert '"~/.gemini/tmp/*/chats/session-*.jsonl",' in text
    from recalld.config import Config

    assert "~/.gemini/tmp/*/chats/session-*.jsonl" in Config.load(config).list("sessions.paths")
    listed = recalld(env, "integrate", "--list")
    assert (
        "gemini-cli" in listed.stdout and "registered in ~/.gemini/settings.json" in listed.stdout
    )
    assert recalld(env, "integrate", "gemini-cli", "--remove").returncode == 0
    assert config.read_text() == "# mine\n[search]\nmax_results = 8\n"
    assert not (fresh_home / ".gemini" / "settings.json").exists()


def test_codex_has_no_project_scope(fresh_home: Path) -> None:
    done = recalld(agent_env(fresh_home), "integrate", "codex", "--scope", "project")
    assert done.returncode == exit_codes.USAGE and "only the user scope" in done.stderr


@pytest.mark.slow
def test_doctor_without_a_daemon_fails_and_says_what_to_do(fresh_home: Path) -> None:
    env = agent_env(fresh_home)
    assert recalld(env, "integrate", "codex").returncode == 0  # registered, agent not installed
    done = recalld(env, "doctor", "--json")
    assert done.returncode == exit_codes.ERROR
    report = json.loads(done.stdout)
    assert report["ok"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks["daemon"]) == {"name", "ok", "detail", "fix"}
    assert not checks["daemon"]["ok"] and "recalld serve" in checks["daemon"]["fix"]
    assert not checks["index"]["ok"] and "not running" in checks["index"]["detail"]
    # The registered command answers a real MCP handshake even with no daemon running yet.
    assert checks["codex: MCP server"]["ok"], checks["codex: MCP server"]
    assert "claude-code: MCP server" not in checks  # not installed, not wired: not checked
    human = recalld(env, "doctor")
    assert "FAIL daemon" in human.stdout and "fix: start it" in human.stdout
    # the index, provider and pending-work checks share the daemon's fix: named, not repeated
    assert human.stdout.count("fix: start it") == 1
    assert human.stdout.count("fix: as for daemon") == 3


def test_claude_code_project_scope_writes_the_projects_files(fresh_home: Path) -> None:
    env = agent_env(fresh_home)
    project = fresh_home / "proj"
    project.mkdir()
    done = recalld(env, "integrate", "claude-code", "--scope", "project", cwd=project)
    assert done.returncode == 0, done.stderr
    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert servers["recalld"]["args"] == ["mcp"]
    hooks = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    assert set(hooks) == {"SessionStart", "PreCompact", "SessionEnd"}
    assert not (fresh_home / ".claude.json").exists()  # the user scope is left alone
    assert (
        recalld(
            env, "integrate", "claude-code", "--scope", "project", "--remove", cwd=project
        ).returncode
        == 0
    )
    assert not (project / ".mcp.json").exists()
    assert not (project / ".claude" / "settings.json").exists()


# Loaded by the interpreter at start-up (``sitecustomize``): the MCP SDK looks not installed, as
# after `make link` or `make run`, which install only the runtime pins.
NO_MCP_SDK = """
import sys


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == "mcp" or name.startswith("mcp."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def _without_mcp_sdk(env: dict[str, str], home: Path) -> dict[str, str]:
    site = home / "no-mcp-sdk"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_MCP_SDK)
    paths = [str(site), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def test_without_the_mcp_sdk_integrate_changes_nothing_and_says_what_to_install(
    fresh_home: Path,
) -> None:
    env = agent_env(fresh_home)
    bare = _without_mcp_sdk(env, fresh_home)
    server = recalld(bare, "mcp")
    assert server.returncode == 1 and "make extras" in server.stderr, server.stderr
    settings = fresh_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(CLAUDE_SETTINGS))
    before = {p: p.read_bytes() for p in fresh_home.rglob("*") if p.is_file()}
    done = recalld(bare, "integrate", "claude-code")
    assert done.returncode == exit_codes.ERROR
    assert "nothing changed" in done.stderr and "MCP SDK" in done.stderr, done.stderr
    assert "make extras" in done.stderr  # run from a checkout: the Makefile's target
    after = {p: p.read_bytes() for p in fresh_home.rglob("*") if p.is_file()}
    assert after == before  # no server registered, no hook, no config written
    shown = recalld(bare, "integrate", "claude-code", "--print")
    assert shown.returncode == 0 and "MCP SDK" in shown.stderr
    # Registered with the SDK there, then checked without it: doctor names the fix.
    assert recalld(env, "integrate", "codex").returncode == 0
    report = json.loads(recalld(bare, "doctor", "--json").stdout)
    check = {c["name"]: c for c in report["checks"]}["codex: MCP server"]
    assert not check["ok"] and "MCP SDK" in check["detail"], check
    assert check["fix"].startswith("`make extras` in "), check
