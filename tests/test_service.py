"""``recalld service``: rendered systemd unit and launchd plist, install/uninstall steps."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from recalld.surfaces import cli, service
from recalld.surfaces.service import LAUNCHD, SYSTEMD, CommandResult, Layout

REPO = Path(__file__).resolve().parents[1]


class Recorder:
    """A fake runner: records each command, answers from a script (default: success)."""

    def __init__(self, answers: dict[str, CommandResult | type[BaseException]] | None = None):
        self.calls: list[list[str]] = []
        self.answers = answers or {}

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        for prefix, answer in self.answers.items():
            if " ".join(argv).startswith(prefix):
                if isinstance(answer, CommandResult):
                    return answer
                raise answer(prefix)
        return CommandResult(0, "")


# templates ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["recalld.service", "dev.recalld.plist"])
def test_service_files_match_package_templates(name: str) -> None:
    shipped = REPO / "daemon" / "recalld" / "data" / name
    assert (REPO / "service_files" / name).read_bytes() == shipped.read_bytes()
    assert service.template(name) == shipped.read_text()


def test_fill_drops_empty_placeholder_lines_and_rejects_unknown() -> None:
    assert service.fill("a\n{x}\nb={y}\n", {"x": "", "y": "1"}) == "a\nb=1\n"
    with pytest.raises(KeyError, match="unknown placeholder"):
        service.fill("{nope}\n", {})


def test_systemd_quote() -> None:
    assert service.systemd_quote("/usr/bin/recalld") == "/usr/bin/recalld"
    assert service.systemd_quote("/a b/c") == '"/a b/c"'
    assert service.systemd_quote("/x%y") == "/x%%y"
    assert service.systemd_quote('/q"\\') == '"/q\\"\\\\"'


# the systemd unit -----------------------------------------------------------------------------

KNOWN_KEYS = {
    "Unit": {"Description", "StartLimitIntervalSec", "StartLimitBurst"},
    "Service": {
        "Type",
        "ExecStart",
        "ExecReload",
        "Environment",
        "Restart",
        "RestartSec",
        "TimeoutStopSec",
        "StandardOutput",
        "StandardError",
        "SyslogIdentifier",
        "UMask",
        "NoNewPrivileges",
        "ProtectSystem",
        "ProtectHome",
        "ReadWritePaths",
        "RuntimeDirectory",
        "RuntimeDirectoryMode",
        "PrivateTmp",
        "PrivateDevices",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "ProtectHostname",
        "RestrictNamespaces",
        "RestrictRealtime",
        "RestrictSUIDSGID",
        "LockPersonality",
        "SystemCallArchitectures",
        "SystemCallFilter",
        "SystemCallErrorNumber",
        "RestrictAddressFamilies",
    },
    "Install": {"WantedBy"},
}


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A strict parser of the unit syntax: sections, Key=value lines, known keys only."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: str | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            assert line.endswith("]"), f"line {n}: bad section header {raw!r}"
            current = line[1:-1]
            assert current in KNOWN_KEYS, f"line {n}: unknown section {current}"
            assert current not in sections, f"line {n}: section {current} repeated"
            sections[current] = {}
            continue
        assert current is not None, f"line {n}: key outside a section"
        key, eq, value = line.partition("=")
        assert eq and key == key.strip() and key, f"line {n}: not Key=value: {raw!r}"
        assert key in KNOWN_KEYS[current], f"line {n}: unknown key {key} in [{current}]"
        assert value.strip(), f"line {n}: empty value for {key}"
        sections[current].setdefault(key, []).append(value)
    return sections


def systemd_verify(unit: Path, tmp: Path) -> str:
    """Complaints of ``systemd-analyze --user verify`` about ``unit`` (empty: none)."""
    runtime = tmp / "xdg-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), SYSTEMD_LOG_LEVEL="notice")
    done = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    # verify exits 0 on unknown keys and unparsable values; it only says so on stderr.
    problems = [line for line in (done.stdout + done.stderr).splitlines() if unit.name in line]
    if done.returncode != 0:
        problems.append(f"exit status {done.returncode}: {done.stderr.strip()}")
    return "\n".join(problems)


needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


def check_unit(text: str, layout: Layout) -> dict[str, dict[str, list[str]]]:
    unit = parse_unit(text)
    svc = unit["Service"]
    assert svc["Type"] == ["simple"]
    exec_start = svc["ExecStart"][0]
    assert exec_start.endswith(" serve") and exec_start.startswith(layout.command[0])
    assert svc["Restart"] == ["on-failure"] and int(svc["RestartSec"][0]) > 0
    assert svc["StandardOutput"] == svc["StandardError"] == ["journal"]
    assert svc["NoNewPrivileges"] == ["yes"]
    assert svc["ProtectSystem"] == ["strict"] and svc["ProtectHome"] == ["read-only"]
    assert f"-{layout.data_dir}" in svc["ReadWritePaths"][0]
    assert unit["Install"]["WantedBy"] == ["default.target"]
    return unit


@needs_systemd_analyze
def test_systemd_verify_catches_mistakes(tmp_path: Path) -> None:
    """The check below is not vacuous: a typo and a bad value are reported."""
    bad = tmp_path / "recalld.service"
    text = service.render(SYSTEMD).replace("RestartSec=", "RestartSecs=")
    bad.write_text(text.replace("ProtectHome=read-only", "ProtectHome=sometimes"))
    problems = systemd_verify(bad, tmp_path)
    assert "RestartSecs" in problems and "protect home" in problems.lower()


@pytest.mark.parametrize("with_home", [True, False], ids=["RECALLD_HOME", "platform-dirs"])
def test_systemd_unit(
    with_home: bool, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not with_home:
        monkeypatch.delenv("RECALLD_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "user"))
        for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
            monkeypatch.delenv(var, raising=False)
    layout = Layout.current(SYSTEMD)
    text = service.render(SYSTEMD, layout)
    svc = check_unit(text, layout)["Service"]
    if with_home:
        assert svc["Environment"] == [f"RECALLD_HOME={home}"]
        assert svc["ReadWritePaths"] == [f"-{home}"]
        assert "RuntimeDirectory" not in svc
        assert svc["PrivateTmp"] == ["no"]  # the test home is under /tmp
    else:
        assert "Environment" not in svc
        user = tmp_path / "user"
        assert svc["ReadWritePaths"] == [f"-{user}/.local/share/recalld -{user}/.config/recalld"]
        assert svc["RuntimeDirectory"] == ["recalld"]
        assert svc["RuntimeDirectoryMode"] == ["0700"]
        assert svc["PrivateTmp"] == ["no"]  # tmp_path is under /tmp too
    if shutil.which("systemd-analyze"):
        unit = tmp_path / "recalld.service"
        unit.write_text(text)
        assert systemd_verify(unit, tmp_path) == ""


def test_private_tmp_when_nothing_lives_in_tmp() -> None:
    layout = Layout(
        command=("/opt/recalld/bin/recalld",),
        environment=(("RECALLD_HOME", "/home/ann/my notes/recalld"),),
        data_dir=Path("/home/ann/my notes/recalld"),
        log_dir=Path("/home/ann/my notes/recalld/logs"),
        writable=(Path("/home/ann/my notes/recalld"),),
        runtime_directory=None,
    )
    svc = parse_unit(service.render(SYSTEMD, layout))["Service"]
    assert svc["PrivateTmp"] == ["yes"]
    assert svc["Environment"] == ['"RECALLD_HOME=/home/ann/my notes/recalld"']
    assert svc["ReadWritePaths"] == ['"-/home/ann/my notes/recalld"']
    assert svc["ExecStart"] == ["/opt/recalld/bin/recalld serve"]


# the launchd agent ----------------------------------------------------------------------------


@pytest.mark.parametrize("with_home", [True, False], ids=["RECALLD_HOME", "platform-dirs"])
def test_launchd_plist(
    with_home: bool, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not with_home:
        monkeypatch.delenv("RECALLD_HOME")
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    layout = Layout.current(LAUNCHD)
    plist = plistlib.loads(service.render(LAUNCHD, layout).encode())
    assert plist["Label"] == "dev.recalld"
    assert plist["ProgramArguments"] == [*layout.command, "serve"]
    assert Path(plist["ProgramArguments"][0]).is_absolute()
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardOutPath"] == f"{layout.log_dir}/recalld.out.log"
    assert plist["StandardErrorPath"] == f"{layout.log_dir}/recalld.err.log"
    if with_home:
        assert plist["EnvironmentVariables"] == {"RECALLD_HOME": str(home)}
        assert layout.log_dir == home / "logs"
    else:
        assert "EnvironmentVariables" not in plist


def test_launchd_plist_escapes_xml() -> None:
    layout = Layout(
        command=("/Users/a&b/<bin>/python", "-m", "recalld"),
        environment=(("RECALLD_HOME", "/Users/a&b/r"),),
        data_dir=Path("/Users/a&b/r"),
        log_dir=Path("/Users/a&b/r/logs"),
        writable=(),
        runtime_directory=None,
    )
    plist = plistlib.loads(service.render(LAUNCHD, layout).encode())
    assert plist["ProgramArguments"] == ["/Users/a&b/<bin>/python", "-m", "recalld", "serve"]
    assert plist["EnvironmentVariables"]["RECALLD_HOME"] == "/Users/a&b/r"


# executable -----------------------------------------------------------------------------------


def test_executable_prefers_console_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    monkeypatch.setattr(sys, "executable", str(python))
    assert service.executable() == [str(python), "-m", "recalld"]
    script = python.parent / "recalld"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert service.executable() == [str(script)]


# install / uninstall --------------------------------------------------------------------------


def run_main(action: str, user: Path, runner: Recorder, platform: str = "linux") -> tuple[int, str]:
    lines: list[str] = []
    rc = service.main(action, platform=platform, runner=runner, user_home=user, out=lines.append)
    return rc, "\n".join(lines)


def test_systemd_install_and_uninstall(home: Path, tmp_path: Path) -> None:
    user = tmp_path / "user"
    runner = Recorder()
    rc, out = run_main("install", user, runner)
    unit = user / ".config" / "systemd" / "user" / "recalld.service"
    assert rc == 0, out
    assert unit.read_text() == service.render(SYSTEMD)
    assert runner.calls == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", "recalld.service"],
    ]
    assert f"wrote {unit}" in out and "$ systemctl --user enable --now recalld.service" in out
    assert (home / "logs").is_dir() and (home / "memory").is_dir()
    # The suite runs from a checkout's .venv: the unit depends on that folder, and says so.
    root = Path(__file__).resolve().parents[1]
    assert f"from the checkout {root}: moving or deleting that folder stops it" in out
    assert f"pipx install {root}" in out

    runner = Recorder()
    rc, out = run_main("uninstall", user, runner)
    assert rc == 0, out
    assert not unit.exists() and f"removed {unit}" in out
    assert runner.calls == [
        ["systemctl", "--user", "disable", "--now", "recalld.service"],
        ["systemctl", "--user", "daemon-reload"],
    ]


def test_an_install_outside_any_checkout_needs_no_warning(tmp_path: Path) -> None:
    tool = tmp_path / "pipx" / "venvs" / "recalld"
    package = tool / "lib" / "site-packages" / "recalld" / "__init__.py"
    assert service.clone_warning([str(tool / "bin" / "recalld")], package) is None
    (tmp_path / "clone" / ".git").mkdir(parents=True)  # a worktree's .git is a file: either
    inside = tmp_path / "clone" / ".venv" / "bin" / "recalld"
    assert service.checkout_of([str(inside)], package) == tmp_path / "clone"
    editable = tmp_path / "clone" / "daemon" / "recalld" / "__init__.py"
    assert service.checkout_of([str(tool / "bin" / "recalld")], editable) == tmp_path / "clone"


def test_systemd_missing_still_writes_the_unit(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "user"
    rc, _ = run_main("install", user, Recorder({"systemctl": FileNotFoundError}))
    assert rc == 1
    assert (user / ".config" / "systemd" / "user" / "recalld.service").is_file()
    err = capsys.readouterr().err
    assert "systemctl is not available" in err and "recalld serve" in err


def test_systemctl_failure_is_reported(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "user"
    bus = CommandResult(1, "Failed to connect to bus: No medium found")
    runner = Recorder({"systemctl --user daemon-reload": bus})
    rc, out = run_main("install", user, runner)
    assert rc == 1
    assert "Failed to connect to bus" in out
    assert len(runner.calls) == 1  # stopped at the first failure
    assert "`systemctl --user daemon-reload` failed with status 1" in capsys.readouterr().err
    # Uninstall still removes the file when systemctl cannot be reached, and its advice is how
    # to finish removing the service, not how to enable it.
    rc, out = run_main("uninstall", user, Recorder({"systemctl": FileNotFoundError}))
    assert rc == 1 and "removed" in out
    assert not (user / ".config" / "systemd" / "user" / "recalld.service").exists()
    err = capsys.readouterr().err
    assert "systemctl --user disable --now recalld.service" in err, err
    assert "enable" not in err.replace("disable", "") and "is written" not in err
    run_main("install", user, Recorder())
    rc, out = run_main("uninstall", user, Recorder({"systemctl --user disable": bus}))
    assert rc == 1 and "removed" in out
    err = capsys.readouterr().err
    assert "`systemctl --user disable --now recalld.service` failed with status 1" in err
    assert "is removed, but the service may still run" in err


def test_launchd_install_and_uninstall(home: Path, tmp_path: Path) -> None:
    user = tmp_path / "user"
    uid = os.getuid()
    plist_path = user / "Library" / "LaunchAgents" / "dev.recalld.plist"
    # First install: nothing to boot out (fails harmlessly), bootstrap succeeds.
    runner = Recorder({"launchctl bootout": CommandResult(3, "No such process")})
    rc, out = run_main("install", user, runner, "darwin")
    assert rc == 0, out
    assert plistlib.loads(plist_path.read_bytes())["Label"] == "dev.recalld"
    assert runner.calls == [
        ["launchctl", "bootout", f"gui/{uid}/dev.recalld"],
        ["launchctl", "bootstrap", f"gui/{uid}", str(plist_path)],
    ]
    # An older launchctl without bootstrap: fall back to load -w.
    runner = Recorder({"launchctl bootstrap": CommandResult(5, "Input/output error")})
    rc, out = run_main("install", user, runner, "darwin")
    assert rc == 0, out
    assert runner.calls[-1] == ["launchctl", "load", "-w", str(plist_path)]

    runner = Recorder()
    rc, out = run_main("uninstall", user, runner, "darwin")
    assert rc == 0, out
    assert runner.calls == [["launchctl", "bootout", f"gui/{uid}/dev.recalld"]]
    assert not plist_path.exists()


def test_print_and_unsupported_platform(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.full_main(["service", "print"]) == 0
    printed = capsys.readouterr().out
    if sys.platform.startswith("linux"):
        assert printed.rstrip("\n") == service.render(SYSTEMD).rstrip("\n")
    assert service.main("print", platform="win32") == 1
    assert "no service manager support" in capsys.readouterr().err


def test_install_hands_a_running_daemon_over(home: Path, tmp_path: Path) -> None:
    from daemon_process import DaemonProcess

    (home / "config.toml").write_text("[sessions]\npaths = []\n")
    daemon = DaemonProcess(home).start()
    try:
        rc, out = run_main("install", tmp_path / "user", Recorder())
        assert rc == 0, out
        assert f"stopped the recalld daemon that was running (pid {daemon.proc.pid})" in out
        assert daemon.proc is not None and daemon.proc.wait(20) == 0
    finally:
        daemon.stop()


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_a_refused_start_restarts_the_daemon_it_stopped(tmp_path: Path, platform: str) -> None:
    """The running daemon is stopped only once the manager answers, and started again in the
    background when the service itself does not start (the launchd form tries both commands)."""
    kind = service.manager_for(platform)
    assert kind is not None
    lines: list[str] = []
    steps: list[str] = []
    refused = CommandResult(1, "refused")
    runner = Recorder(
        {
            "systemctl --user enable": refused,
            "launchctl bootstrap": refused,
            "launchctl load": refused,
        }
    )
    installer = service.Installer(
        kind, service.Layout.current(kind), tmp_path / "unit", runner, lines.append,
        stop_running=lambda: steps.append("stop") or "stopped the daemon",
        restart=lambda: steps.append("restart") or "runs again",
    )  # fmt: skip
    with pytest.raises(service.ServiceError):
        installer.install()
    assert steps == ["stop", "restart"] and "runs again" in lines
    if kind == SYSTEMD:  # nothing was stopped where the manager cannot even reload
        steps.clear()
        runner = Recorder({"systemctl --user daemon-reload": refused})
        installer.runner = runner
        with pytest.raises(service.ServiceError):
            installer.install()
        assert steps == [] and len(runner.calls) == 1
