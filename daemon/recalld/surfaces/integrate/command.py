"""The ``recalld integrate`` command line: arguments, what is printed, exit codes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from recalld import paths
from recalld.surfaces import exit_codes, mcp_sdk
from recalld.surfaces.integrate import apply, claude_hooks, transcripts
from recalld.surfaces.integrate.agent import Agent, FileEdit, mcp_command
from recalld.surfaces.integrate.config_edit import Ledger, Unparsable, load_json, read_bytes
from recalld.surfaces.integrate.registry import NAMES, agents


def add_parser(sub: Any) -> None:
    """The ``integrate`` subcommand of :mod:`recalld.surfaces.cli`."""
    p = sub.add_parser(
        "integrate",
        help="register recalld with an agent (MCP server, hooks, transcripts)",
        description="Register recalld's MCP server with an agent (through its own CLI when it "
        "is installed), add Claude Code's hooks, and index the agent's transcripts. A second "
        "run changes nothing; --remove undoes it.",
    )
    p.add_argument("agent", nargs="?", choices=NAMES, help="the agent to wire recalld into")
    p.add_argument(
        "--scope",
        choices=["user", "project"],
        default="user",
        help="user (default): every project; project: this folder only",
    )
    p.add_argument(
        "--print", action="store_true", dest="dry_run", help="show the changes without making them"
    )
    p.add_argument("--remove", action="store_true", help="undo what integrate did")
    p.add_argument(
        "--list",
        action="store_true",
        dest="list_",
        help="which agents are installed and wired to recalld",
    )


def run(args: argparse.Namespace) -> int:
    """``recalld integrate``: exit 0 when done, 1 when a config could not be read."""
    if args.list_:
        print_list()
        return exit_codes.OK
    if args.agent is None:
        print(
            "recalld integrate: name an agent (" + ", ".join(NAMES) + ") or --list", file=sys.stderr
        )
        return exit_codes.USAGE
    agent = agents()[args.agent]
    if args.scope not in agent.scopes:
        print(
            f"recalld integrate: {agent.title} has only the {agent.scopes[0]} scope",
            file=sys.stderr,
        )
        return exit_codes.USAGE
    if not args.remove and (sdk := mcp_sdk.missing()) is not None:
        # A server that cannot start would show as "failed to connect" in the agent, later.
        if not args.dry_run:
            print(
                f"recalld integrate: nothing changed. {sdk}; then run this again.", file=sys.stderr
            )
            return exit_codes.ERROR
        print(f"recalld integrate: {sdk}", file=sys.stderr)
    edits = all_edits(agent, args.scope)
    try:
        outcomes = apply.carry_out(
            agent, edits, Ledger(paths.data_dir()), remove=args.remove, dry_run=args.dry_run
        )
    except Unparsable as exc:
        print(f"recalld integrate: {exc}", file=sys.stderr)
        return exit_codes.CONFIG
    verb = "Taking recalld out of" if args.remove else "Wiring recalld into"
    if args.dry_run:
        verb = f"Nothing changed (--print); {verb[0].lower()}{verb[1:]}"
    print(f"{verb} {agent.title} ({args.scope} scope):")
    for o in outcomes:
        note = f" ({o.note})" if o.note else ""
        print(f"  {o.what:<18} {_home(o.path)}: {o.action}{note}")
    if not args.dry_run and not args.remove:
        print(f"Start a new {agent.title} session to load it; `recalld doctor` checks it all.")
    return exit_codes.OK


def all_edits(agent: Agent, scope: str) -> list[FileEdit]:
    """The agent's edits and, for recalld's own config, its transcript folder."""
    glob_edit = transcripts.glob_edit(agent.transcripts)
    return [
        *agent.edits(scope, mcp_command()),
        FileEdit(paths.config_path(), "transcript folder", glob_edit, shared=True),
    ]


def _home(path: Path) -> str:
    return transcripts.shown_glob(str(path))


def wiring(agent: Agent) -> dict[str, Any]:
    """What is installed and registered for one agent (for --list and doctor)."""
    out: dict[str, Any] = {"agent": agent.name, "title": agent.title, "cli": agent.cli_path()}
    out["installed"] = agent.present()
    out["scopes"] = {}
    for scope in agent.scopes:
        reg = agent.registration(scope)
        out["scopes"][scope] = (
            None if reg is None else {"file": str(reg.path), "command": reg.command}
        )
    if agent.name == "claude-code":
        out["hooks"] = claude_hooks_present()
    try:
        out["transcripts_indexed"] = transcripts_covered(agent)
    except Unparsable:
        out["transcripts_indexed"] = False
    out["transcripts"] = agent.transcripts
    return out


def transcripts_covered(agent: Agent) -> bool:
    """Whether recalld's config already indexes the agent's transcripts."""
    config = paths.config_path()
    old = read_bytes(config)
    return transcripts.glob_edit(agent.transcripts)(config, old, False) == old


def claude_hooks_present() -> list[str]:
    """The Claude Code events (user or project scope) whose recalld hook is in place."""
    from recalld.surfaces.integrate.claude_code import settings_file

    found: set[str] = set()
    for scope in ("user", "project"):
        path = settings_file(scope)
        try:
            hooks = load_json(path, read_bytes(path)).get("hooks")
        except Unparsable:
            continue
        for event in claude_hooks.EVENTS:
            groups = hooks.get(event) if isinstance(hooks, dict) else None
            for group in groups if isinstance(groups, list) else []:
                inner = group.get("hooks") if isinstance(group, dict) else None
                if isinstance(inner, list) and any(claude_hooks.ours(h) for h in inner):
                    found.add(event)
    return sorted(found)


def print_list() -> None:
    """``recalld integrate --list``."""
    for agent in agents().values():
        w = wiring(agent)
        state = "installed" if w["installed"] else "not found"
        cli = f" ({w['cli']})" if w["cli"] else ""
        print(f"{agent.name:<12} {state}{cli}")
        for scope, reg in w["scopes"].items():
            where = f"{_home(Path(reg['file']))}: {' '.join(reg['command'])}" if reg else "-"
            print(
                f"  MCP server ({scope}): {'registered in ' + where if reg else 'not registered'}"
            )
        if "hooks" in w:
            print(f"  hooks: {', '.join(w['hooks']) or 'none'}")
        said = "indexed" if w["transcripts_indexed"] else "not indexed"
        print(f"  transcripts {_home(Path(w['transcripts']))}: {said}")
