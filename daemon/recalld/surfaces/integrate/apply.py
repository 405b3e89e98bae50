"""Carrying an integration out: every file parsed first, then changed (or shown, or undone).

Per file: nothing is written when the edit changes no byte (a second run is a no-op); the old
bytes are backed up before the first change (:class:`.config_edit.Ledger`); the agent's own CLI
makes the change when it is installed (and the file edit when the CLI fails); ``--remove`` puts
the old bytes back when nothing else changed the file (no other agent's integration either),
else takes out only this agent's recalld entries.
"""

from __future__ import annotations

import difflib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from recalld.surfaces.integrate.agent import Agent, FileEdit
from recalld.surfaces.integrate.config_edit import Ledger, Unparsable, atomic_write, read_bytes

CLI_TIMEOUT_S = 60.0


@dataclass
class Outcome:
    """What happened to one file."""

    path: Path
    what: str
    action: str  # "unchanged", "changed", "changed by <cli>", "restored", "would change"
    note: str = ""


def plan(edits: list[FileEdit], remove: bool) -> list[tuple[FileEdit, bytes | None, bytes | None]]:
    """(edit, old bytes, new bytes) for every file; raises Unparsable before anything changes."""
    out = []
    for fe in edits:
        old = read_bytes(fe.path)
        out.append((fe, old, fe.edit(fe.path, old, remove)))
    return out


def diff(path: Path, old: bytes | None, new: bytes | None) -> str:
    """A unified diff of the change to ``path``."""
    a = (old or b"").decode("utf-8", "replace").splitlines(keepends=True)
    b = (new or b"").decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, f"{path} (now)", f"{path} (after)"))


def carry_out(
    agent: Agent,
    edits: list[FileEdit],
    ledger: Ledger,
    *,
    remove: bool = False,
    dry_run: bool = False,
    say: Callable[[str], None] = print,
) -> list[Outcome]:
    """Make (or show) the changes; raises Unparsable, having changed nothing, for a bad file."""
    outcomes = []
    for fe, old, new in plan(edits, remove):
        if remove and fe.shared and not ledger.changed_by(fe.path, agent.name):
            new = old  # what is there is another agent's or the user's, not this agent's
        if new == old:
            if remove and not dry_run:
                ledger.released(fe.path, agent.name, old)
            outcomes.append(Outcome(fe.path, fe.what, "unchanged"))
            continue
        if dry_run:
            say(diff(fe.path, old, new))
            cli = agent.cli_path() if (fe.cli_remove if remove else fe.cli_add) else None
            argv = [agent.cli, *(fe.cli_remove if remove else fe.cli_add)]
            note = f"through `{' '.join(argv)}`" if cli else ""
            outcomes.append(Outcome(fe.path, fe.what, "would change", note))
            continue
        if remove and ledger.restore(fe.path, agent.name):
            outcomes.append(Outcome(fe.path, fe.what, "restored", "as it was before recalld"))
            continue
        if remove:
            outcomes.append(_change(agent, fe, new, remove))
            ledger.released(fe.path, agent.name, old)
            continue
        kept = ledger.before_change(fe.path, old, agent.name)
        outcomes.append(_change(agent, fe, new, remove))
        ledger.after_change(fe.path, kept)
    return outcomes


def _change(agent: Agent, fe: FileEdit, new: bytes | None, remove: bool) -> Outcome:
    """One file changed through the agent's CLI when it has the command, else edited here."""
    args = fe.cli_remove if remove else fe.cli_add
    cli = agent.cli_path() if args else None
    note = ""
    if cli is not None:
        failure = _run_cli([cli, *args])
        current = read_bytes(fe.path)
        try:
            done = failure is None and fe.edit(fe.path, current, remove) == current
        except Unparsable:
            done = False
        if done:
            return Outcome(fe.path, fe.what, f"changed by `{agent.cli} {args[0]} {args[1]}`")
        note = f"`{agent.cli} {' '.join(args[:2])}` {failure or 'left it undone'}: edited the file"
        new = fe.edit(fe.path, current, remove)  # from what the CLI may have left
    if new is None:
        fe.path.unlink(missing_ok=True)
    else:
        atomic_write(fe.path, new)
    return Outcome(fe.path, fe.what, "changed", note)


def _run_cli(argv: list[str]) -> str | None:
    """Run the agent's CLI; None when it succeeded, else what went wrong (one line)."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"failed ({exc})"
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"exited {proc.returncode} ({last[0][:200]})"
    return None
