"""``recalld start`` / ``recalld stop``: the daemon in the background, and how it was started.

``start`` goes through the service manager when the service is installed (``recalld service
install``), else runs ``recalld serve`` detached with its output in ``daemon.log``; either way it
waits until the daemon answers and says where the log is. ``stop`` is the reverse. ``make run``
(``recalld serve``) stays the foreground form.

A daemon started for a caller that did not ask for one (``recalld mcp``, a hook) is *on demand*:
``daemon_spawn.spawn_daemon`` marks it with ``RECALLD_STARTED_BY``, so that ``status`` announces
it and it stops after ``daemon.on_demand_idle_s`` without a request (see serve/idle_stop.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.surfaces import exit_codes
from recalld.surfaces.daemon_spawn import log_path, spawn_daemon

START_TIMEOUT_S = 120.0  # the first start loads the model and opens (or creates) the index
STOP_TIMEOUT_S = 30.0
SERVICE_STOP_GRACE_S = 10.0  # then the daemon that still answers is not the service's


def add_parsers(sub: Any) -> None:
    """The ``start`` and ``stop`` subcommands."""
    s = sub.add_parser("start", help="run the daemon in the background (via the service if any)")
    s.add_argument(
        "--timeout", type=float, default=START_TIMEOUT_S, help="seconds to wait for it to answer"
    )
    sub.add_parser("stop", help="stop the background daemon (or the service)")


def start(args: argparse.Namespace) -> int:
    """``recalld start``: the exit status (0 once a daemon answers)."""
    from recalld_client import is_running

    if pid := _running_pid():
        print(f"recalld is already running (pid {pid}); log: {_log_place()}")
        return exit_codes.OK
    service = _installed_service()
    proc = None
    if service is None:
        proc = spawn_daemon(log_path(), "start", args.config)
    elif not _service_command(service, "start"):
        # The unit is installed but its manager cannot be reached here (no user bus in an SSH
        # or container session): the daemon still starts, the user is told why not as a service.
        print("recalld: starting it in the background instead of as the service")
        proc = spawn_daemon(log_path(), "start", args.config)
    log = _log_place() if proc is None else str(log_path())
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if is_running(timeout=1.0):
            print(f"recalld is running (pid {_running_pid()}); log: {log}")
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
        f"recalld: the daemon did not answer within {args.timeout:.0f} s; log: {log}",
        file=sys.stderr,
    )
    return exit_codes.UNAVAILABLE


def stop(_args: argparse.Namespace) -> int:
    """``recalld stop``: the exit status (0 once no daemon answers, or none ran)."""
    from recalld_client import is_running

    if not is_running(timeout=1.0):
        print("recalld is not running")
        return exit_codes.OK
    service = _installed_service()
    # The service manager would restart a daemon that merely exited: it stops it itself. A
    # daemon still answering after that is not the service's (started by hand, or by `start`
    # where the manager could not be reached): it is asked to exit itself.
    stopped = service is not None and _service_command(service, "stop")
    if not (stopped and _gone_within(SERVICE_STOP_GRACE_S)):
        if not _ask_to_exit():
            return exit_codes.ERROR
        if not _gone_within(STOP_TIMEOUT_S):
            print(f"recalld: still running after {STOP_TIMEOUT_S:.0f} s", file=sys.stderr)
            return exit_codes.ERROR
    # It no longer answers, but it still finishes its batch and closes the index: "stopped"
    # only once it has let go, so that a `recalld start` right after does not find it there.
    if (pid := _let_go_within(STOP_TIMEOUT_S)) is not None:
        print(
            f"recalld: the daemon (pid {pid}) still holds the index after {STOP_TIMEOUT_S:.0f} s",
            file=sys.stderr,
        )
        return exit_codes.ERROR
    print("recalld stopped")
    return exit_codes.OK


def _ask_to_exit() -> bool:
    """Ask the running daemon to shut down; False (and why on stderr) when it could not be."""
    from recalld_client import Client, RecalldClientError

    pid = _running_pid()
    if pid is None:
        return True  # it went in the meantime
    try:
        with Client(timeout=10.0, reconnect=False) as client:
            client.shutdown()
    except RecalldClientError as exc:
        print(f"recalld: the daemon (pid {pid}) did not stop: {exc}", file=sys.stderr)
        return False
    return True


def _gone_within(seconds: float) -> bool:
    from recalld_client import is_running

    deadline = time.monotonic() + seconds
    while is_running(timeout=1.0):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _let_go_within(seconds: float) -> int | None:
    """Wait until no daemon holds this home's lock: None, else the holder's pid."""
    from recalld.serve.instance import LOCK_NAME, lock_holder

    lock = paths.socket_path().parent / LOCK_NAME
    deadline = time.monotonic() + seconds
    while (pid := lock_holder(lock)) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid


def _running_pid() -> int | None:
    from recalld_client import Client, RecalldClientError, TooManyConnections, WrongDaemon

    try:
        with Client(connect_timeout=1.0, timeout=2.0, reconnect=False) as client:
            pid = client.hello().get("pid")
    except TooManyConnections:
        return -1  # it runs and is full
    except WrongDaemon:
        raise  # another home's daemon holds this socket: neither start nor stop it, say so
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
