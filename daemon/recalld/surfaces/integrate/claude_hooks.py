"""recalld's hooks in a Claude Code ``settings.json``, merged with the user's own.

``SessionStart`` runs ``recalld hook session-start`` (memory for this project into the session);
``PreCompact`` and ``SessionEnd`` run ``recalld hook sync`` (the transcript is indexed now).
recalld's hooks are recognised by their command (``... recalld hook session-start|sync``), so a
moved install is updated in place and ``--remove`` takes out only them.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from recalld.surfaces.integrate.agent import Edit
from recalld.surfaces.integrate.config_edit import Unparsable, dump_json, load_json

# event -> (hook subcommand, timeout in seconds: Claude Code's own limit on the command)
EVENTS = {
    "SessionStart": ("session-start", 10),
    "PreCompact": ("sync", 5),
    "SessionEnd": ("sync", 5),
}
_OURS = re.compile(r"recalld\S*(?:\s+-m\s+recalld)?\s+hook\s+(session-start|sync)\s*$")


def hook_command(recalld: list[str], sub: str) -> str:
    """The shell command Claude Code runs for one hook."""
    return shlex.join([*recalld, "hook", sub])


def ours(hook: Any) -> bool:
    return isinstance(hook, dict) and bool(_OURS.search(str(hook.get("command", ""))))


def hooks_edit(recalld: list[str]) -> Edit:
    """An edit that adds (or takes out) recalld's three hooks, leaving every other hook alone."""

    def edit(path: Path, old: bytes | None, remove: bool) -> bytes | None:
        doc = load_json(path, old)
        hooks = doc.get("hooks")
        if hooks is not None and not isinstance(hooks, dict):
            raise Unparsable(path, "its hooks is not an object")
        if any(not isinstance(v, list) for v in (hooks or {}).values()):
            raise Unparsable(path, "a hooks event does not hold a list")
        changed = False
        for event, (sub, timeout) in EVENTS.items():
            groups: list[Any] = (hooks or {}).get(event, [])
            if remove:
                changed |= _take_out(groups)
                if hooks and event in hooks and not groups:
                    del hooks[event]
            else:
                want = {
                    "type": "command",
                    "command": hook_command(recalld, sub),
                    "timeout": timeout,
                }
                if hooks is None:
                    hooks = doc["hooks"] = {}
                changed |= _put_in(hooks.setdefault(event, groups), want)
        if remove and hooks is not None and not hooks:
            del doc["hooks"]
        return dump_json(doc, old) if changed else old

    return edit


def _take_out(groups: list[Any]) -> bool:
    """Remove recalld's hooks from an event's groups (and groups left empty)."""
    changed = False
    for group in list(groups):
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list) or not any(ours(h) for h in inner):
            continue
        inner[:] = [h for h in inner if not ours(h)]
        changed = True
        if not inner:
            groups.remove(group)
    return changed


def _put_in(groups: list[Any], want: dict[str, Any]) -> bool:
    """Add ``want`` to an event's groups unless it is there; fix a recalld hook that differs."""
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        for hook in inner if isinstance(inner, list) else []:
            if ours(hook) and hook.get("command", "").endswith(want["command"].split()[-1]):
                if all(hook.get(k) == v for k, v in want.items()):
                    return False
                hook.update(want)
                return True
    groups.append({"hooks": [want]})
    return True
