"""Shared by test_search_helper and test_search_helper_outside_daemon: the notes the
helper searches, and whether a (helper) process is still alive."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import write

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


def _notes(root: Path, n: int = 40) -> None:
    for i in range(n):
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 5 + 3) % len(WORDS)]
        write(
            root / f"note-{i:02d}.md",
            f"# Note {i}\n\nThe {a} team wrote about {b} on day {i}.\n\n"
            f"Deploy steps for service {i}: build, test, ship. Sam said the budget is {i * 10}.\n"
            f"Rollback: restore the database snapshot {i}.\n",
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (its parent, the daemon, may not have reaped it yet).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
