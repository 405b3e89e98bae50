"""``recalld doctor``: every thing a user relies on, checked, each failure with what to do.

Checks: the daemon answers; the service is installed and enabled; the index and the embedding
provider are healthy; each agent that is installed or wired has recalld registered, and the
registered command answers an MCP handshake (done here, with the MCP SDK's client); its
transcript folder is found and indexed; no work is stuck; the shared store (when configured)
answers. ``--json`` prints
``{"ok", "checks": [{"name", "ok", "detail", "fix"}]}``; the exit status is 0 only when all hold.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.surfaces import exit_codes, mcp_sdk

HANDSHAKE_TIMEOUT_S = 30.0
START_DAEMON = "start it: `recalld serve` (or `recalld service install` to keep it running)"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def add_parser(sub: Any) -> None:
    """The ``doctor`` subcommand of :mod:`recalld.surfaces.cli`."""
    p = sub.add_parser("doctor", help="check the daemon, service, index and agent integrations")
    p.add_argument("--json", action="store_true", help="print the checks as one JSON object")


def run(args: argparse.Namespace) -> int:
    checks = run_checks()
    ok = all(c.ok for c in checks)
    if args.json:
        print(json.dumps({"ok": ok, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        first_with: dict[str, str] = {}  # a fix already printed: named, not repeated
        for c in checks:
            print(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
            if not c.ok and c.fix:
                seen = first_with.setdefault(c.fix, c.name)
                print(f"     fix: {c.fix}" if seen == c.name else f"     fix: as for {seen}")
        print("all good" if ok else f"{sum(not c.ok for c in checks)} check(s) failed")
    return exit_codes.OK if ok else exit_codes.ERROR


def run_checks() -> list[Check]:
    """Every check, in the order a user would fix them."""
    daemon, status = check_daemon()
    checks = [daemon, check_service()]
    checks += check_index(status)
    checks += check_shared(status)
    from recalld.surfaces.integrate.registry import agents

    for agent in agents().values():
        checks += check_agent(agent, status)
    return checks


def check_daemon() -> tuple[Check, dict[str, Any] | None]:
    from recalld_client import Client
    from recalld_client.errors import RecalldClientError, WrongDaemon

    try:
        with Client(connect_timeout=2.0, timeout=10.0, reconnect=False) as client:
            hello = client.hello()
            status: dict[str, Any] = dict(client.status())
    except WrongDaemon as exc:  # it answers, for another home: what to do is in the message
        return Check("daemon", False, str(exc), ""), None
    except (RecalldClientError, OSError) as exc:
        return Check(
            "daemon", False, f"no answer at {paths.socket_path()} ({exc})", START_DAEMON
        ), None
    return Check("daemon", True, f"pid {hello.get('pid')}, version {hello.get('version')}"), status


def check_service() -> Check:
    from recalld.surfaces import service

    kind = service.manager_for(sys.platform)
    if kind is None:
        return Check("service", True, f"no service manager on {sys.platform}: run `recalld serve`")
    unit = service.unit_file(kind, Path.home())
    fix = "`recalld service install` (starts recalld at login and restarts it if it stops)"
    if not unit.exists():
        return Check("service", False, f"not installed ({unit} is missing)", fix)
    if kind == service.SYSTEMD and shutil.which("systemctl"):
        proc = subprocess.run(
            ["systemctl", "--user", "is-enabled", unit.name],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        state = proc.stdout.strip() or proc.stderr.strip() or f"exit {proc.returncode}"
        if state != "enabled":
            return Check("service", False, f"{unit} installed but {state}", fix)
        return Check("service", True, f"{unit} enabled")
    return Check("service", True, f"{unit} installed")


def check_index(status: dict[str, Any] | None) -> list[Check]:
    """Index health, provider state and pending work, from the daemon's status."""
    if status is None:
        why = "unknown: the daemon is not running"
        return [Check(n, False, why, START_DAEMON) for n in ("index", "provider", "pending work")]
    counts = status.get("counts") or {}
    problem = status.get("last_error") or status.get("config_error")
    index = Check(
        "index",
        problem is None,
        f"{counts.get('files', 0)} files, {counts.get('chunks', 0)} chunks, "
        f"state {status.get('state')}" + (f"; {problem}" if problem else ""),
        "see `recalld status`; `recalld reindex` rebuilds the index from your files",
    )
    health = (status.get("provider_health") or {}).get("state", "ok")
    degraded = status.get("degraded")
    provider = Check(
        "provider",
        degraded is None and health == "ok",
        f"{status.get('provider')} ({health})" + (f": {degraded}" if degraded else ""),
        "check [embedding] in the config (`recalld status` says why)",
    )
    daemon = status.get("daemon") or {}
    vectors = (status.get("vectors") or {}).get("vectors_pending", 0)
    skipped = status.get("skipped_total", 0)
    pending = Check(
        "pending work",
        True,
        f"{daemon.get('pending', 0)} files waiting, {vectors} vectors to compute, "
        f"{skipped} files skipped (`recalld status` lists them)",
    )
    return [index, provider, pending]


def check_shared(status: dict[str, Any] | None) -> list[Check]:
    """The shared store, when ``[shared]`` is set: on, answering, its last search fine."""
    shared = (status or {}).get("shared")
    if not isinstance(shared, dict):
        return []  # not configured (or no daemon: its check says so)
    name = "shared store"
    if not shared.get("on"):
        return [Check(name, False, f"off: {shared.get('why')}", "fix [shared] in config.toml")]
    where = f"{shared.get('collection')} at {shared.get('url')}"
    if shared.get("reachable") is False:
        why = str(shared.get("unreachable"))
        return [Check(name, False, f"{where}: {why}", _shared_fix(why, str(shared.get("url"))))]
    if shared.get("search_error"):
        detail = f"{where}: the last search of it failed: {shared['search_error']}"
        return [Check(name, False, detail, "`recalld status` says what waits and why")]
    push = shared.get("push") or {}
    return [
        Check(
            name,
            True,
            f"{where} answers; {push.get('pushed', 0)} file(s) pushed, "
            f"{push.get('waiting', 0)} waiting",
        )
    ]


def _shared_fix(why: str, url: str) -> str:
    """What to do about a store that does not answer: start it, or the login."""
    if "password authentication failed" in why:
        return (
            "check the member's password (RECALLD_SHARED_PASSWORD or shared.password_file); "
            "an administrator's `recalld shared add-member NAME --reset-password` sets a new one"
        )
    from recalld.shared.embedded import Embedded

    state = Embedded(paths.data_dir()).state() or {}
    if state.get("url") == url:  # the embedded store of this home
        return "start it: `recalld shared up`"
    return (
        "start the store's PostgreSQL (or ask its administrator), or check shared.url and the "
        "network; searches answer from this machine meanwhile"
    )


def check_agent(agent: Any, status: dict[str, Any] | None) -> list[Check]:
    """An agent's registration, its MCP handshake, hooks and transcripts (when it is here)."""
    regs = [r for s in agent.scopes if (r := agent.registration(s)) is not None]
    if not regs and not agent.present():
        return []
    name = agent.name
    fix = f"`recalld integrate {name}`"
    if not regs:
        return [
            Check(
                f"{name}: MCP server",
                False,
                f"{agent.title} is installed, recalld is not registered with it",
                fix,
            )
        ]
    reg = regs[0]
    checks = [check_handshake(name, reg.command, reg.path, fix)]
    if name == "claude-code":
        from recalld.surfaces.integrate.claude_hooks import EVENTS
        from recalld.surfaces.integrate.command import claude_hooks_present

        hooks = claude_hooks_present()
        missing = [e for e in EVENTS if e not in hooks]
        checks.append(
            Check(
                f"{name}: hooks",
                not missing,
                f"missing: {', '.join(missing)}" if missing else ", ".join(EVENTS),
                fix,
            )
        )
    checks.append(check_transcripts(agent, status))
    return checks


def check_handshake(name: str, command: list[str], where: Path, fix: str) -> Check:
    """Start the registered command and do an MCP handshake with it, as the agent would."""
    label = f"{name}: MCP server"
    if not command or not (os.path.isabs(command[0]) and os.access(command[0], os.X_OK)):
        return Check(
            label,
            False,
            f"{where} registers {command[:1]}, not an executable by absolute path",
            fix,
        )
    sdk = mcp_sdk.missing()
    if sdk is not None:  # the server cannot start (nor can the handshake be tried)
        return Check(label, False, f"registered in {where}, but {sdk}", mcp_sdk.how_to_install())
    try:
        tools = _handshake(command)
    except Exception as exc:  # noqa: BLE001 - any failure of the server is the check's answer
        return Check(
            label,
            False,
            f"{' '.join(command)} did not answer an MCP handshake ({type(exc).__name__}: {exc})",
            f"run `{' '.join(command)}` to see why; " + fix,
        )
    ok = "memory_search" in tools
    return Check(
        label,
        ok,
        f"registered in {where}, handshake answered: tools {', '.join(tools)}",
        "" if ok else fix,
    )


def _handshake(command: list[str]) -> list[str]:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))

    async def talk() -> list[str]:
        with anyio.fail_after(HANDSHAKE_TIMEOUT_S):
            async with stdio_client(server) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                return [t.name for t in (await s.list_tools()).tools]

    return anyio.run(talk)


def check_transcripts(agent: Any, status: dict[str, Any] | None) -> Check:
    """The agent's transcript folder: there, matched by sessions.paths, indexed by the daemon."""
    from recalld.paths import glob_base
    from recalld.surfaces.integrate.command import transcripts_covered

    label = f"{agent.name}: transcripts"
    base = glob_base(os.path.expanduser(agent.transcripts))
    if not transcripts_covered(agent):
        return Check(
            label,
            False,
            f"{agent.transcripts} is not in sessions.paths",
            f"`recalld integrate {agent.name}`",
        )
    found = len(glob.glob(os.path.expanduser(agent.transcripts), recursive=True))
    if not base.is_dir():
        return Check(label, True, f"{base} not there yet (no {agent.title} session has run)")
    indexed = ((status or {}).get("sessions") or {}).get("files")
    said = f"{found} found in {base}, {indexed} transcripts indexed in all"
    if status is None:
        return Check(label, False, f"{found} found in {base}; not indexed: no daemon", START_DAEMON)
    return Check(label, found == 0 or bool(indexed), said, "`recalld sync`")
