"""``recalld integrate`` with the real agent CLIs (npm, pinned: tests/agent_clis.py).

Each test runs in a fresh HOME: after ``recalld integrate``, the agent's own ``mcp list``
starts ``recalld mcp`` and does the MCP handshake itself; ``recalld doctor`` does it too.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_clis import install
from agent_env import agent_env, recalld
from conftest import write
from daemon_process import DaemonProcess

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="session")
def agents_bin() -> Path:
    folder, why = install()
    if folder is None:
        pytest.skip(why)
    return folder


@pytest.fixture
def trial(agents_bin: Path) -> Iterator[tuple[dict[str, str], Path]]:
    home = Path(tempfile.mkdtemp(prefix="rcd-a-", dir="/tmp"))
    env = agent_env(home, str(agents_bin))
    write(home / "rh" / "memory" / "pelican.md", "# pelican\n\nThe pelican API pins protobuf 5.\n")
    yield env, home
    import shutil

    shutil.rmtree(home, ignore_errors=True)


def agent(env: dict[str, str], *argv: str, cwd: Path | None = None) -> str:
    """Run an agent CLI; its output (stdout and stderr)."""
    proc = subprocess.run(
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd or env["HOME"],
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"{argv}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_claude_code_connects_to_recalld(trial: tuple[dict[str, str], Path]) -> None:
    env, home = trial
    # The user's own server and hook stay.
    write(
        home / ".claude" / "settings.json",
        json.dumps(
            {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}
        ),
    )
    done = recalld(env, "integrate", "claude-code")
    assert done.returncode == 0 and "changed by `claude mcp add`" in done.stdout, done.stdout
    agent(env, "claude", "mcp", "add", "--scope", "user", "mine", "--", "/bin/true")
    listed = agent(env, "claude", "mcp", "list")
    line = next(ln for ln in listed.splitlines() if ln.startswith("recalld:"))
    assert "Connected" in line and line.split(": ", 1)[1].startswith("/"), listed
    got = agent(env, "claude", "mcp", "get", "recalld")
    assert "Args: mcp" in got and "Scope: User config" in got
    command = next(ln.split(":", 1)[1].strip() for ln in got.splitlines() if "Command:" in ln)
    assert Path(command).is_absolute() and Path(command).name == "recalld", got
    second = recalld(env, "integrate", "claude-code")
    assert second.stdout.count("unchanged") == 3, second.stdout
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert settings["hooks"]["Stop"][0]["hooks"][0]["command"] == "notify-send done"
    removed = recalld(env, "integrate", "claude-code", "--remove")
    assert removed.returncode == 0, removed.stderr
    after = agent(env, "claude", "mcp", "list")
    assert "recalld:" not in after and "mine:" in after
    assert json.loads((home / ".claude" / "settings.json").read_text()) == {
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}
    }


@pytest.mark.slow
def test_codex_lists_recalld_enabled_and_doctor_does_the_handshake(
    trial: tuple[dict[str, str], Path],
) -> None:
    env, home = trial
    daemon = DaemonProcess(home / "rh", env={"HOME": str(home), "PATH": env["PATH"]})
    daemon.start()
    try:
        done = recalld(env, "integrate", "codex")
        assert done.returncode == 0 and "changed by `codex mcp add`" in done.stdout, done.stdout
        listed = agent(env, "codex", "mcp", "list")
        row = next(ln for ln in listed.splitlines() if ln.startswith("recalld "))
        assert "enabled" in row and " mcp " in row, listed
        doctor = recalld(env, "doctor", "--json")
        report = json.loads(doctor.stdout)
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["daemon"]["ok"] and checks["index"]["ok"]
        assert checks["codex: MCP server"]["ok"], checks["codex: MCP server"]
        assert "memory_search" in checks["codex: MCP server"]["detail"]
        assert not checks["service"]["ok"] and "recalld service install" in checks["service"]["fix"]
        assert doctor.returncode != 0 and report["ok"] is False  # the service is not installed
        # Claude Code is installed (on PATH) but not wired: doctor says what to run.
        assert checks["claude-code: MCP server"]["fix"] == "`recalld integrate claude-code`"
        assert recalld(env, "integrate", "codex", "--remove").returncode == 0
        assert not (home / ".codex" / "config.toml").exists()  # it was not there before
        # `codex mcp add` drops comments in [mcp_servers]: a commented file is edited by recalld.
        commented = '# mine\n[mcp_servers.other]\ncommand = "other"  # keep me\n'
        write(home / ".codex" / "config.toml", commented)
        again = recalld(env, "integrate", "codex")
        assert "MCP server         ~/.codex/config.toml: changed\n" in again.stdout, again.stdout
        assert (home / ".codex" / "config.toml").read_text().startswith(commented)
        assert "recalld " in agent(env, "codex", "mcp", "list")
    finally:
        daemon.stop()


@pytest.mark.slow
def test_gemini_cli_connects_in_a_trusted_folder(trial: tuple[dict[str, str], Path]) -> None:
    env, home = trial
    done = recalld(env, "integrate", "gemini-cli")
    assert done.returncode == 0 and "changed by `gemini mcp add`" in done.stdout, done.stdout
    # Gemini CLI runs MCP servers only in folders the user trusts.
    write(home / ".gemini" / "trustedFolders.json", json.dumps({str(home): "TRUST_FOLDER"}))
    # Its health check gives a server 5 s unless the entry sets a timeout: recalld registers
    # one, so the first start of `recalld mcp` on a busy machine still answers in time.
    entry = json.loads((home / ".gemini" / "settings.json").read_text())["mcpServers"]["recalld"]
    assert entry["timeout"] == 90_000, entry
    listed = agent(env, "gemini", "mcp", "list")
    row = next(ln for ln in listed.splitlines() if "recalld:" in ln)
    assert "Connected" in row, listed
    config = (home / "rh" / "config.toml").read_text()
    assert "~/.gemini/tmp/*/chats/session-*.jsonl" in config


@pytest.mark.slow
def test_a_real_gemini_cli_session_is_read(trial: tuple[dict[str, str], Path]) -> None:
    """The real Gemini CLI, its API stood in for at the network edge, writes a session file;
    recalld reads its question, tool call, tool result and answer, each once."""
    from fake_gemini_api import FakeGeminiApi
    from recalld.ingest.sessions.formats import GEMINI_CLI, parse_file

    env, home = trial
    project = home / "tern"
    notes = write(project / "importer-notes.txt", "load_rows() drops rows whose region is NULL\n")
    write(
        home / ".gemini" / "settings.json",
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}),
    )
    write(home / ".gemini" / "trustedFolders.json", json.dumps({str(project): "TRUST_FOLDER"}))
    answer = "The tern importer skips NULL regions in load_rows()."
    with FakeGeminiApi(str(notes), answer) as api:
        run_env = {**env, "GEMINI_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": api.url}
        said = agent(run_env, "gemini", "-p", "Why does the tern importer drop rows?", cwd=project)
    assert answer in said
    files = list((home / ".gemini" / "tmp").glob("*/chats/session-*.jsonl"))
    assert len(files) == 1, files
    messages, stats, fmt = parse_file(files[0])
    assert fmt == GEMINI_CLI and stats.skipped_unknown == 0
    kinds = [(m.role, m.kind) for m in messages]
    assert kinds == [
        ("user", "text"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "text"),
    ], (kinds, files[0].read_text()[:3000])
    assert messages[0].text == "Why does the tern importer drop rows?"
    assert str(notes) in messages[1].text and "read_file" in messages[1].text
    assert "region is NULL" in messages[2].text and messages[2].tool == "read_file"
    assert messages[3].text == answer
