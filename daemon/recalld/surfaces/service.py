"""``recalld service install|uninstall|print``: the daemon as a systemd user unit or launchd agent.

The templates are package data (``recalld/data/recalld.service``, ``dev.recalld.plist``; copies
live in ``service_files/`` at the repository root) with ``{placeholders}`` filled in here with the
real executable and this home's folders. A placeholder alone on a line that renders empty (no
``RECALLD_HOME``, say) removes the line.

Commands (``systemctl``, ``launchctl``) go through a :data:`Runner`, so tests record them instead
of running them. When the service manager is missing or refuses, the file is still written, the
failure is reported, the exit status is non-zero, and a daemon that was running still runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import escape

from recalld import paths, security

UNIT_NAME = "recalld.service"
LABEL = "dev.recalld"
PLIST_NAME = f"{LABEL}.plist"

SYSTEMD = "systemd"
LAUNCHD = "launchd"


@dataclass(frozen=True)
class CommandResult:
    """What a command did: its exit status and its combined output."""

    returncode: int
    output: str = ""


Runner = Callable[[Sequence[str]], CommandResult]
"""Runs one command; raises ``FileNotFoundError`` when the program does not exist."""


def run_command(argv: Sequence[str]) -> CommandResult:
    """The real runner: the command with a time limit, output captured."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return CommandResult(124, f"{argv[0]} did not finish within 60 s")
    return CommandResult(done.returncode, (done.stdout + done.stderr).strip())


# what goes into the files -------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The values the templates need, taken from this process and this home."""

    command: tuple[str, ...]  # argv before "serve"
    environment: tuple[tuple[str, str], ...]  # RECALLD_HOME / RECALLD_CONFIG when set
    data_dir: Path
    log_dir: Path
    writable: tuple[Path, ...]  # folders the sandboxed daemon may write
    runtime_directory: str | None  # systemd RuntimeDirectory= (a name under $XDG_RUNTIME_DIR)
    create: tuple[Path, ...] = field(default=())  # folders install makes first

    @classmethod
    def current(cls, kind: str) -> Layout:
        """The layout of this interpreter and the ``RECALLD_HOME`` / platform folders."""
        env = tuple(
            (name, str(Path(value).expanduser().resolve()))
            for name in ("RECALLD_HOME", "RECALLD_CONFIG")
            if (value := paths.env(name))
        )
        data, logs = paths.data_dir(), paths.log_dir()
        writable = [data]
        if not paths.env("RECALLD_CONFIG"):
            writable.append(paths.config_path().parent)
        runtime_name = None
        if kind != SYSTEMD:
            pass  # launchd runs the agent unsandboxed: no list of writable folders
        elif not paths.env("RECALLD_HOME"):
            # Under the user manager the socket folder is $XDG_RUNTIME_DIR/recalld, on a tmpfs
            # emptied at logout that ProtectSystem=strict would not let the daemon recreate:
            # systemd makes it (RuntimeDirectory=), whatever the installing shell's variables.
            runtime_name = "recalld"
        else:
            writable.append(paths.runtime_dir())
        return cls(
            command=tuple(executable()),
            environment=env,
            data_dir=data,
            log_dir=logs,
            writable=tuple(_outermost(writable)),
            runtime_directory=runtime_name,
            create=(data, logs, paths.default_memory_dir()),
        )


def executable() -> list[str]:
    """The ``recalld`` console script beside this interpreter, else ``python -m recalld``."""
    python = Path(sys.executable).absolute()
    name = "recalld.exe" if sys.platform == "win32" else "recalld"
    script = python.parent / name
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(python), "-m", "recalld"]


def checkout_of(command: Sequence[str], package: Path | None = None) -> Path | None:
    """The source checkout (a folder with ``.git``) the service would run from, if any: the
    executable's, or that of the ``recalld`` package it imports (an editable install)."""
    if package is None:
        import recalld

        package = Path(recalld.__file__).resolve()
    for start in (Path(command[0]).absolute(), package):
        for folder in start.parents:
            if (folder / ".git").exists():
                return folder
    return None


def clone_warning(command: Sequence[str], package: Path | None = None) -> str | None:
    """What to say when the service would break with the checkout it runs from."""
    clone = checkout_of(command, package)
    if clone is None:
        return None
    return (
        f"note: the service runs {command[0]}, from the checkout {clone}: moving or deleting "
        "that folder stops it. For an install that outlives the checkout: "
        f"`pipx install {clone}` (or `uv tool install {clone}`), then run "
        "`~/.local/bin/recalld service install` again"
    )


def _under_tmp(folder: Path) -> bool:
    return any(folder.is_relative_to(t) for t in (Path("/tmp"), Path("/var/tmp")))


def _outermost(folders: Sequence[Path]) -> list[Path]:
    """The folders without duplicates and without those inside another listed one."""
    unique = list(dict.fromkeys(folders))
    return [f for f in unique if not any(o != f and f.is_relative_to(o) for o in unique)]


# rendering ------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def template(name: str) -> str:
    """The text of a template shipped in ``recalld/data``."""
    return (resources.files("recalld") / "data" / name).read_text(encoding="utf-8")


def fill(text: str, values: dict[str, str]) -> str:
    """Substitute ``{name}``; a line holding only a placeholder that renders empty goes away."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        whole = _PLACEHOLDER.fullmatch(stripped)
        rendered = _PLACEHOLDER.sub(lambda m: _value(values, m[1]), line)
        if whole is not None and not rendered.strip():
            continue
        out.append(rendered)
    return "".join(out)


def _value(values: dict[str, str], name: str) -> str:
    try:
        return values[name]
    except KeyError:
        raise KeyError(f"the service template uses an unknown placeholder {{{name}}}") from None


def systemd_quote(word: str) -> str:
    """One word for ExecStart= / Environment= / ReadWritePaths=, quoted when it must be."""
    word = word.replace("%", "%%")  # systemd expands %-specifiers in these settings
    if word and not re.search(r"[\s\"'\\;$]", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_systemd(layout: Layout) -> str:
    """The systemd user unit for ``layout``."""
    env = " ".join(systemd_quote(f"{k}={v}") for k, v in layout.environment)
    runtime = (
        f"RuntimeDirectory={layout.runtime_directory}\nRuntimeDirectoryMode=0700"
        if layout.runtime_directory
        else ""
    )
    return fill(
        template(UNIT_NAME),
        {
            "exec_start": " ".join(systemd_quote(w) for w in layout.command),
            "environment": f"Environment={env}" if env else "",
            # "-": a folder missing at start is skipped rather than failing the whole unit.
            "read_write_paths": " ".join(systemd_quote(f"-{p}") for p in layout.writable),
            # A private /tmp would hide a recalld folder that lives there (and the socket with it).
            "private_tmp": "no" if any(_under_tmp(p) for p in layout.writable) else "yes",
            "runtime_directory": runtime,
        },
    )


def render_launchd(layout: Layout) -> str:
    """The launchd agent property list for ``layout``."""
    args = "\n".join(f"\t\t<string>{escape(w)}</string>" for w in layout.command)
    env = ""
    if layout.environment:
        items = "\n".join(
            f"\t\t<key>{escape(k)}</key>\n\t\t<string>{escape(v)}</string>"
            for k, v in layout.environment
        )
        env = f"\t<key>EnvironmentVariables</key>\n\t<dict>\n{items}\n\t</dict>"
    return fill(
        template(PLIST_NAME),
        {
            "label": LABEL,
            "program_arguments": args,
            "environment": env,
            "log_dir": escape(str(layout.log_dir)),
        },
    )


def manager_for(platform: str) -> str | None:
    """``systemd`` on Linux, ``launchd`` on macOS, None elsewhere."""
    if platform.startswith("linux"):
        return SYSTEMD
    if platform == "darwin":
        return LAUNCHD
    return None


def render(kind: str, layout: Layout | None = None) -> str:
    """The service file of ``kind`` (``systemd`` or ``launchd``)."""
    layout = layout or Layout.current(kind)
    return render_systemd(layout) if kind == SYSTEMD else render_launchd(layout)


def unit_file(kind: str, user_home: Path, config_home: Path | None = None) -> Path:
    """Where the service manager looks for the file."""
    if kind == SYSTEMD:
        return (config_home or user_home / ".config") / "systemd" / "user" / UNIT_NAME
    return user_home / "Library" / "LaunchAgents" / PLIST_NAME


# install / uninstall ------------------------------------------------------------------------


class ServiceError(Exception):
    """A step failed; the message says which and what to do."""


@dataclass
class Installer:
    """Writes or removes the service file and drives the service manager, reporting each step."""

    kind: str
    layout: Layout
    target: Path
    runner: Runner = run_command
    out: Callable[[str], None] = print
    uid: int = field(default_factory=lambda: os.getuid() if hasattr(os, "getuid") else 0)
    stop_running: Callable[[], str | None] = lambda: stop_running_daemon()
    restart: Callable[[], str | None] = lambda: restart_daemon()
    removing: bool = False

    def install(self) -> None:
        """Write the file and enable + start the service."""
        for folder in self.layout.create:
            folder.mkdir(parents=True, exist_ok=True)
        security.private_log_dir(self.layout.log_dir)  # launchd writes the logs there
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.target.write_text(render(self.kind, self.layout), encoding="utf-8")
        self.out(f"wrote {self.target}")
        if warning := clone_warning(self.layout.command):
            self.out(warning)
        if self.kind == SYSTEMD:
            # The manager is asked first: where it cannot be reached (no user bus in an SSH or
            # container session) a daemon already running must keep running.
            self._run(["systemctl", "--user", "daemon-reload"])
            self._hand_over(["systemctl", "--user", "enable", "--now", UNIT_NAME])
            self.out("recalld runs as a systemd user service; logs: journalctl --user -u recalld")
        else:
            domain = f"gui/{self.uid}"
            # A reinstall replaces a loaded agent; bootout fails harmlessly when none is loaded.
            self._run(["launchctl", "bootout", f"{domain}/{LABEL}"], check=False)
            self._hand_over(
                ["launchctl", "bootstrap", domain, str(self.target)],
                ["launchctl", "load", "-w", str(self.target)],
            )
            self.out(f"recalld runs as a launchd agent; logs: {self.layout.log_dir}")

    def _hand_over(self, start: list[str], fallback: list[str] | None = None) -> None:
        """Stop a daemon running outside the service, then start the service; undo if it fails.

        One daemon per home: one started by hand or by `recalld mcp` would hold the socket and
        make the service's own exit at once. If the service then does not start, the daemon that
        was stopped is started again in the background, so an install never leaves none running.
        """
        stopped = self.stop_running()
        if stopped:
            self.out(stopped)
        try:
            if fallback is None:
                self._run(start)
            elif not self._run(start, check=False):
                self._run(fallback)
        except ServiceError:
            if stopped and (note := self.restart()):
                self.out(note)
            raise

    def uninstall(self) -> None:
        """Stop and disable the service, then remove the file (even if stopping failed)."""
        self.removing = True  # a failure's advice is then how to finish removing it
        error: ServiceError | None = None
        try:
            if self.kind == SYSTEMD:
                if self.target.exists():
                    self._run(["systemctl", "--user", "disable", "--now", UNIT_NAME])
            else:
                domain = f"gui/{self.uid}"
                if not self._run(["launchctl", "bootout", f"{domain}/{LABEL}"], check=False):
                    self._run(["launchctl", "unload", "-w", str(self.target)], check=False)
        except ServiceError as exc:
            error = exc
        if self.target.exists():
            self.target.unlink()
            self.out(f"removed {self.target}")
        else:
            self.out(f"{self.target} was not installed")
        if self.kind == SYSTEMD and error is None:
            self._run(["systemctl", "--user", "daemon-reload"])
        if error is not None:
            raise error

    def _run(self, argv: list[str], *, check: bool = True) -> bool:
        self.out("$ " + " ".join(argv))
        try:
            result = self.runner(argv)
        except FileNotFoundError:
            raise ServiceError(
                f"{argv[0]} is not available here, so the service manager was not told; "
                f"{self._hint()}"
            ) from None
        if result.output:
            self.out("  " + result.output.replace("\n", "\n  "))
        if result.returncode != 0 and check:
            raise ServiceError(
                f"`{' '.join(argv)}` failed with status {result.returncode}; {self._hint()}"
            )
        return result.returncode == 0

    def _hint(self) -> str:
        if self.removing:
            return self._removal_hint()
        if self.kind == SYSTEMD:
            return (
                f"{self.target} is written: run `systemctl --user daemon-reload && systemctl "
                f"--user enable --now {UNIT_NAME}` in your login session (no user manager "
                "here? `loginctl enable-linger $USER`), or run `recalld serve` yourself"
            )
        return (
            f"{self.target} is written: run `launchctl bootstrap gui/{self.uid} {self.target}` "
            "in your login session, or run `recalld serve` yourself"
        )

    def _removal_hint(self) -> str:
        stop = (
            f"systemctl --user disable --now {UNIT_NAME} && systemctl --user daemon-reload"
            if self.kind == SYSTEMD
            else f"launchctl bootout gui/{self.uid}/{LABEL}"
        )
        return (
            f"{self.target} is removed, but the service may still run until it is stopped: run "
            f"`{stop}` in your login session (a `recalld serve` started by hand stops with "
            "Ctrl-C or `kill` of the pid `recalld status` shows)"
        )


def stop_running_daemon(timeout: float = 15.0) -> str | None:
    """Ask a daemon already running for this home to stop; what was done, or None if none ran."""
    from recalld_client import Client, RecalldClientError, is_running

    if not is_running():
        return None
    try:
        with Client(timeout=10.0, reconnect=False) as client:
            pid = client.hello().get("pid")
            client.shutdown()
    except RecalldClientError as exc:
        return f"a recalld daemon runs and did not stop ({exc}); stop it, the service then starts"
    deadline = time.monotonic() + timeout
    while is_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    return f"stopped the recalld daemon that was running (pid {pid}) so the service runs it"


def restart_daemon() -> str | None:
    """Start again in the background the daemon :func:`stop_running_daemon` stopped (None when
    one still answers: it did not stop, or something else started one)."""
    from recalld.surfaces.daemon_spawn import log_path, spawn_daemon
    from recalld_client import is_running

    if is_running():
        return None
    proc = spawn_daemon(log_path(), "start")
    return (
        f"the service did not start, so recalld runs again in the background (pid {proc.pid}; "
        f"log: {log_path()})"
    )


def main(
    action: str,
    *,
    platform: str | None = None,
    runner: Runner | None = None,
    user_home: Path | None = None,
    out: Callable[[str], None] | None = None,
) -> int:
    """Entry point of ``recalld service ACTION`` (install, uninstall, print); the exit status."""
    say = out or print
    kind = manager_for(platform or sys.platform)
    if kind is None:
        print(
            f"recalld service: no service manager support on {platform or sys.platform}; "
            "start `recalld serve` at logon yourself (e.g. with Task Scheduler)",
            file=sys.stderr,
        )
        return 1
    layout = Layout.current(kind)
    if action == "print":
        say(render(kind, layout).rstrip("\n"))
        return 0
    config_home = None
    if user_home is None:
        user_home = Path.home()
        xdg = paths.env("XDG_CONFIG_HOME")
        config_home = Path(xdg) if xdg else None
    installer = Installer(
        kind, layout, unit_file(kind, user_home, config_home), runner or run_command, say
    )
    try:
        if action == "install":
            installer.install()
        elif action == "uninstall":
            installer.uninstall()
        else:
            print(f"recalld service: unknown action {action!r}", file=sys.stderr)
            return 2
    except ServiceError as exc:
        print(f"recalld service: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"recalld service: {exc}", file=sys.stderr)
        return 1
    return 0
