"""``recalld hook session-start|sync``: the commands Claude Code runs at its hook events.

``session-start`` (SessionStart) reads the hook's JSON on stdin (``cwd``, ``session_id``,
``source``), asks the daemon for the memory that matters in that folder and prints it as
``hookSpecificOutput.additionalContext``, within ``integrate.context_tokens``, each item with its
citation; it prints nothing when nothing is relevant. ``sync`` (PreCompact, SessionEnd) asks the
daemon to read ``transcript_path`` now and returns once the daemon has queued it.

A hook must never block or break the agent: a daemon that is down, bad input or a deadline
passed all end in exit 0 with one line on stderr. Only the client is imported (no numpy, no
onnxruntime): this runs before every session starts.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

DEADLINE_S = {"session-start": 4.0, "sync": 2.0}  # within the timeouts written into settings.json
MAX_INPUT_BYTES = 1 << 20
CHARS_PER_TOKEN = 4  # an estimate: the agent counts with its own tokenizer, not ours
NOTES, SESSIONS = 4, 3  # items of each kind at most
MIN_ITEM_CHARS = 120  # an item that cannot show this much of itself is left out


class HookFailed(Exception):
    """Why the hook did nothing (said on stderr; the exit status stays 0)."""


def add_parser(sub: Any) -> None:
    """The ``hook`` subcommand of :mod:`recalld.surfaces.cli` (for --help; the console script
    runs :func:`main` directly)."""
    p = sub.add_parser("hook", help="Claude Code hook commands (JSON on stdin)")
    p.add_argument(
        "event",
        choices=sorted(DEADLINE_S),
        help="session-start: memory for this project; sync: index the transcript now",
    )


def main(argv: Sequence[str]) -> int:
    """Run one hook; always exit 0 (Claude Code would show a failure to the user)."""
    event = argv[0] if argv else ""
    if event not in DEADLINE_S:
        print(f"recalld hook: unknown hook {event!r} (session-start or sync)", file=sys.stderr)
        return 0
    deadline = time.monotonic() + DEADLINE_S[event]
    try:
        data = read_input(deadline)
        if event == "session-start":
            out = session_start(data, deadline)
            if out:
                sys.stdout.write(json.dumps(out) + "\n")
        else:
            sync(data, deadline)
    except HookFailed as exc:
        print(f"recalld hook {event}: {exc}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - a hook never breaks the agent
        print(f"recalld hook {event}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


def read_input(deadline: float) -> dict[str, Any]:
    """The hook's JSON object from stdin, read until EOF or the deadline."""
    import selectors

    raw = b""
    stdin = sys.stdin.buffer
    with selectors.DefaultSelector() as sel:
        try:
            sel.register(stdin, selectors.EVENT_READ)
        except (ValueError, OSError):  # not selectable (Windows): read it whole
            raw = stdin.read(MAX_INPUT_BYTES + 1)
        else:
            while len(raw) <= MAX_INPUT_BYTES:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    raise HookFailed("no hook input on stdin in time")
                piece = os.read(stdin.fileno(), 1 << 16)
                if not piece:
                    break
                raw += piece
    if len(raw) > MAX_INPUT_BYTES:
        raise HookFailed("the hook input is over 1 MiB")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise HookFailed(f"the hook input is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise HookFailed("the hook input is not a JSON object")
    return data


def _client(deadline: float) -> Any:
    from recalld_client import Client

    left = deadline - time.monotonic()
    if left <= 0:
        raise HookFailed("out of time before asking the daemon")
    return Client(connect_timeout=min(1.0, left), timeout=left, reconnect=False)


def _ask(deadline: float, method: str, *args: Any, **params: Any) -> Any:
    """One request; a daemon that is down or slow is a HookFailed."""
    from recalld_client.errors import RecalldClientError

    try:
        with _client(deadline) as client:
            return getattr(client, method)(*args, **params)
    except (RecalldClientError, OSError) as exc:
        raise HookFailed(
            f"the recalld daemon did not answer ({exc}); start it: recalld serve"
        ) from exc


# --- session-start --------------------------------------------------------------------------------


class Item(NamedTuple):  # not a dataclass: importing dataclasses costs every session start
    """One piece of memory for the session, and where it is."""

    citation: str
    text: str
    kind: str  # "note" or "session"


def session_start(data: dict[str, Any], deadline: float) -> dict[str, Any] | None:
    """The hook's output for a session starting in ``data["cwd"]``, or None (nothing relevant)."""
    cwd = data.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise HookFailed("the hook input has no absolute cwd")
    session = data.get("session_id")
    items = project_memory(cwd, deadline, session if isinstance(session, str) else "")
    text = render(cwd, items, context_tokens())
    if not text:
        return None
    return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}


def context_tokens() -> int:
    """``integrate.context_tokens`` (the default when the config cannot be read)."""
    from recalld.config import SETTINGS, Config
    from recalld.errors import ConfigError

    try:
        return Config.load().int("integrate.context_tokens")
    except ConfigError as exc:
        print(f"recalld hook: {exc}; using the default budget", file=sys.stderr)
        default = next(s.default for s in SETTINGS if s.key == "integrate.context_tokens")
        assert isinstance(default, int)
        return default


def claude_transcript_folder(cwd: str) -> Path:
    """The folder Claude Code keeps the transcripts of sessions run in ``cwd`` in."""
    base = os.environ.get("CLAUDE_CONFIG_DIR") or str(Path.home() / ".claude")
    return Path(base) / "projects" / re.sub(r"[^A-Za-z0-9]", "-", cwd)


def project_memory(cwd: str, deadline: float, session_id: str = "") -> list[Item]:
    """What matters for the project in ``cwd``: notes that name it, the last sessions run there
    (not the session ``session_id`` itself: a resumed session has its own text already).

    The one place that decides; once search takes project and date filters it can ask for
    them here instead of matching the project's name in the results.
    """
    name = Path(cwd).name
    if not name:
        return []
    notes = _ask(deadline, "search", name, sources=["memory"], max_results=NOTES * 2)
    needle = name.lower()
    hits = [
        hit
        for hit in notes.get("results", [])
        if needle in (hit["path"] + " " + hit["snippet"]).lower() or cwd in hit["snippet"]
    ][:NOTES]
    items = [item for hit in hits if (item := _note_item(hit, deadline)) is not None]
    folder = claude_transcript_folder(cwd)
    if folder.is_dir():
        sessions = _ask(
            deadline,
            "search",
            f"{name} decided next",
            sources=["sessions"],
            path_prefix=str(folder) + os.sep,
            max_results=SESSIONS,
            min_score=0.0,
        )
        own = f"{session_id}.jsonl" if session_id else None
        items += [
            Item(h["citation"], h["snippet"], "session")
            for h in sessions.get("results", [])
            if own is None or Path(h["path"]).name != own
        ]
    return items


def _note_item(hit: dict[str, Any], deadline: float) -> Item | None:
    """A note hit as an item: its snippet, or, for a note's front matter chunk (``---`` title,
    tags ``---``: it names the project but says nothing a session can use), the lines of the
    note's next matching place (one slot per short note puts them in ``also``), else nothing."""
    if not (int(hit.get("start_line") or 0) == 1 and hit["snippet"].lstrip().startswith("---")):
        return Item(hit["citation"], hit["snippet"], "note")
    also = hit.get("also") or []
    if not also:
        return None
    got = _ask(deadline, "get", also[0]["citation"])
    return Item(also[0]["citation"], got.get("text", ""), "note")


def render(cwd: str, items: list[Item], budget_tokens: int) -> str:
    """The items as the session's context, within ``budget_tokens`` (estimated); "" for none."""
    if not items:
        return ""
    head = (
        f"recalld memory for {Path(cwd).name} ({cwd}). Each item ends with its citation; "
        "open one with the memory_get tool (or `recalld get CITATION`):"
    )
    budget = budget_tokens * CHARS_PER_TOKEN - len(head)
    lines = [head]
    for item in items:
        label = "note" if item.kind == "note" else "earlier session"
        tail = f" [{item.citation}]"
        room = budget - len(label) - len(tail) - 4
        if room < MIN_ITEM_CHARS:
            break
        text = " ".join(item.text.split())
        if len(text) > room:
            text = text[: room - 1].rstrip() + "…"
        line = f"- {label}: {text}{tail}"
        lines.append(line)
        budget -= len(line) + 1
    return "\n".join(lines) if len(lines) > 1 else ""


# --- sync -----------------------------------------------------------------------------------------


def sync(data: dict[str, Any], deadline: float) -> None:
    """Ask the daemon to index the session's transcript now (returns once it is queued)."""
    path = data.get("transcript_path")
    if not isinstance(path, str) or not os.path.isabs(path):
        raise HookFailed("the hook input has no absolute transcript_path")
    from recalld_client.errors import RecalldClientError

    try:
        with _client(deadline) as client:
            client.call("sync", {"paths": [path]})
    except (RecalldClientError, OSError) as exc:
        raise HookFailed(f"the recalld daemon did not take the sync ({exc})") from exc
