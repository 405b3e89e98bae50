"""``recalld start`` / ``recalld stop``: the daemon in the background, and how it was started.

``start`` goes through the service manager when the service is installed (``recalld service
install``), else runs ``recalld serve`` detached with its output in ``daemon.log``; either way it
waits until the daemon answers and says where the log is. ``stop`` is the reverse. ``make run``
(``recalld serve``) stays the foreground form.

A daemon started for a caller that did not ask for one (``recalld mcp``, a hook) is *on demand*:
:func:`spawn_daemon` marks it with ``RECALLD_STARTED_BY``, so that ``status`` announces it and it
stops after ``daemon.on_demand_idle_s`` without a request (see serve/idle_stop.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.serve.idle_stop import STARTED_BY_ENV
from recalld.surfaces import exit_codes

START_TIMEOUT_S = 120.0  # the first start loads the model and opens (or creates) the index
STOP_TIMEOUT_S = 30.0


def add_parsers(sub: Any) -> None:
    """The ``start`` and ``stop`` subcommands."""
    s = sub.add_parser("start", help="run the daemon in the background (via the service if any)")
    s.add_argument(
        "--timeout", type=float, default=START_TIMEOUT_S, help="seconds to wait for it to answer"
    )
    sub.add_parser("stop", help="stop the background daemon (or the service)")


def log_path() -> Path:
    """Where a daemon started in the background writes its log."""
    return paths.log_dir() / "daemon.log"


def spawn_daemon(log: Path, started_by: str, config: Path | None = None) -> subprocess.Popen[bytes]:
    """``recalld serve`` in its own session, detached from this process's stdio."""
    from recalld.security import open_private_log

    kwargs: dict[str, Any] = {}
    if sys.platform == "win32":
        kwargs["creationflags"] = (
            subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.DETACHED_PROCESS  # type: ignore[attr-defined,unused-ignore]
        )
    else:
        # Its own session: the caller's process group being killed must not kill the daemon.
        kwargs["start_new_session"] = True
    argv = [sys.executable, "-m", "recalld"]
    if config is not None:
        argv += ["--config", str(config.expanduser().resolve())]
    env = dict(os.environ, **{STARTED_BY_ENV: started_by})
    with open_private_log(log) as logf:  # 0600 in a 0700 folder: logs quote notes
        return subprocess.Popen(
            [*argv, "serve"],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            close_fds=True,
            cwd=os.path.expanduser("~"),
            env=env,
            **kwargs,
        )


def start(args: argparse.Namespace) -> int:
    """``recalld start``: the exit status (0 once a daemon answers)."""
    from recalld_client import is_running

    if pid := _running_pid():
        print(f"recalld is already running (pid {pid}); log: {_log_place()}")
        return exit_codes.OK
    service = _installed_service()
    if service is not None:
        if not _service_command(service, "start"):
            return exit_codes.ERROR
        proc = None
    else:
        proc = spawn_daemon(log_path(), "start", args.config)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if is_running(timeout=1.0):
            print(f"recalld is running (pid {_running_pid()}); log: {_log_place()}")
            print("stop it with `recalld stop`; follow its indexing with `recalld status --watch`")
            return exit_codes.OK
        if proc is not None and proc.poll() is not None and not is_running(timeout=1.0):
            print(
                f"recalld: the daemon exited with code {proc.returncode} while starting:\n"
                f"{_log_tail()}\n(full log: {log_path()})",
                file=sys.stderr,
            )
            return exit_codes.ERROR
        time.sleep(0.2)
    print(
        f"recalld: the daemon did not answer within {args.timeout:.0f} s; log: {_log_place()}",
        file=sys.stderr,
    )
    return exit_codes.UNAVAILABLE


def stop(_args: argparse.Namespace) -> int:
    """``recalld stop``: the exit status (0 once no daemon answers, or none ran)."""
    from recalld_client import Client, RecalldClientError, is_running

    service = _installed_service()
    if service is not None and is_running(timeout=1.0):
        # The service manager would restart a daemon that merely exited: it stops it itself.
        ok = _service_command(service, "stop")
    elif (pid := _running_pid()) is not None:
        try:
            with Client(timeout=10.0, reconnect=False) as client:
                client.shutdown()
        except RecalldClientError as exc:
            print(f"recalld: the daemon (pid {pid}) did not stop: {exc}", file=sys.stderr)
            return exit_codes.ERROR
        ok = True
    else:
        print("recalld is not running")
        return exit_codes.OK
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while ok and is_running(timeout=1.0):
        if time.monotonic() > deadline:
            print(f"recalld: still running after {STOP_TIMEOUT_S:.0f} s", file=sys.stderr)
            return exit_codes.ERROR
        time.sleep(0.2)
    if ok:
        print("recalld stopped")
    return exit_codes.OK if ok else exit_codes.ERROR


def _running_pid() -> int | None:
    from recalld_client import Client, RecalldClientError, TooManyConnections

    try:
        with Client(connect_timeout=1.0, timeout=2.0, reconnect=False) as client:
            pid = client.hello().get("pid")
    except TooManyConnections:
        return -1  # it runs and is full
    except RecalldClientError:
        return None
    return int(pid) if pid is not None else -1


def _installed_service() -> str | None:
    """``systemd`` / ``launchd`` when this user's service file is installed, else None."""
    from recalld.surfaces.service import manager_for, unit_file

    kind = manager_for(sys.platform)
    if kind is None:
        return None
    xdg = paths.env("XDG_CONFIG_HOME")
    target = unit_file(kind, Path.home(), Path(xdg) if xdg else None)
    return kind if target.exists() else None


def _service_command(kind: str, action: str) -> bool:
    """Start or stop the installed service; False (and why on stderr) when that failed."""
    from recalld.surfaces.service import LABEL, SYSTEMD, UNIT_NAME, run_command

    if kind == SYSTEMD:
        argv = ["systemctl", "--user", action, UNIT_NAME]
    else:
        domain = f"gui/{os.getuid()}/{LABEL}"
        argv = ["launchctl", "kickstart", domain] if action == "start" else [
            "launchctl", "kill", "SIGTERM", domain
        ]  # fmt: skip
    print(f"$ {' '.join(argv)}  (the service is installed)")
    try:
        result = run_command(argv)
    except FileNotFoundError:
        print(f"recalld: {argv[0]} is not available here", file=sys.stderr)
        return False
    if result.returncode != 0:
        print(f"recalld: `{' '.join(argv)}` failed: {result.output}", file=sys.stderr)
        return False
    return True


def _log_place() -> str:
    if _installed_service() == "systemd":
        return "journalctl --user -u recalld"
    return str(log_path())


def _log_tail(lines: int = 8) -> str:
    try:
        tail = log_path().read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log written)"
    return "\n".join(tail[-lines:]) or "(empty log)"
