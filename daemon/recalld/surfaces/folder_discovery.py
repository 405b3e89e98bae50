"""Where a user's notes and agent transcripts already are: what ``recalld init`` proposes.

Looked for, in a bounded walk of the home folder (hidden folders, caches and package trees are
skipped, and the walk stops after :data:`MAX_FOLDERS_VISITED` folders so that a huge home still
answers in a second):

- memory folders: Obsidian vaults (a folder holding ``.obsidian/``), ``~/notes`` and the like,
  ``~/Documents/*`` folders with at least :data:`MIN_NOTES` Markdown files, OpenClaw's
  ``~/.openclaw/workspace/memory``, and recalld's own default memory folder when it has notes;
- transcript folders: Claude Code, Codex, OpenClaw (read by default) and Gemini CLI (its
  ``session-*.jsonl`` chats proposed; an older Gemini CLI's ``.json`` chats, which the
  transcript reader does not read, are said, not proposed).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MIN_NOTES = 5  # a Documents folder with fewer Markdown files is not taken for a notes folder
MAX_FOLDERS_VISITED = 20_000
MAX_DEPTH = 4  # below the home folder: ~/a/b/c/vault/.obsidian is found
NOTE_ENDINGS = (".md", ".markdown")
NOTES_NAMES = ("notes", "Notes", "wiki", "Wiki", "journal", "Journal", "Zettelkasten")
SKIPPED = frozenset(
    {"node_modules", "site-packages", "__pycache__", "venv", "Library", "AppData", "snap", "go"}
)


@dataclass(frozen=True)
class Found:
    """One folder found: what it is and how many files of interest it holds (bounded count)."""

    path: Path
    what: str
    files: int
    glob: str = ""  # transcripts: the sessions.paths glob that reads them
    readable: bool = True  # False: found, but recalld cannot index this format


# Agent transcript layouts: (folder under home, what, glob of its files, read by recalld).
TRANSCRIPTS = (
    (".claude/projects", "Claude Code sessions", "~/.claude/projects/**/*.jsonl", True),
    (".codex/sessions", "Codex sessions", "~/.codex/sessions/**/rollout-*.jsonl", True),
    (".openclaw/agents", "OpenClaw sessions", "~/.openclaw/agents/*/sessions/*.jsonl", True),
    (".gemini/tmp", "Gemini CLI chats", "~/.gemini/tmp/*/chats/session-*.jsonl", True),
    (".gemini/tmp", "Gemini CLI chats", "~/.gemini/tmp/*/chats/*.json", False),  # older CLIs
)


def memory_folders(home: Path, own_memory: Path | None = None) -> list[Found]:
    """Folders of notes under ``home``, outermost only (a vault inside a found folder is not
    listed twice: it would be indexed twice)."""
    found: list[Found] = []
    budget = [MAX_FOLDERS_VISITED]  # shared by every count below: a huge home stays quick

    def notes_in(folder: Path) -> int:
        return count_notes(folder, budget=budget)

    for vault in _vaults(home):
        found.append(Found(vault, "Obsidian vault", notes_in(vault)))
    for name in NOTES_NAMES:
        folder = home / name
        if folder.is_dir() and (n := notes_in(folder)):
            found.append(Found(folder, "notes folder", n))
    documents = home / "Documents"
    if documents.is_dir():
        for child in sorted(_subfolders(documents)):
            if (n := notes_in(child)) >= MIN_NOTES:
                found.append(Found(child, "Markdown folder in Documents", n))
    openclaw = home / ".openclaw" / "workspace" / "memory"
    if openclaw.is_dir():
        found.append(Found(openclaw, "OpenClaw memory", notes_in(openclaw)))
    if own_memory is not None and own_memory.is_dir() and (n := notes_in(own_memory)):
        found.append(Found(own_memory, "recalld's own memory folder", n))
    return _outermost(found)


def transcript_folders(home: Path) -> list[Found]:
    """Agent transcript folders under ``home`` that hold at least one transcript."""
    out: list[Found] = []
    for rel, what, glob, readable in TRANSCRIPTS:
        folder = home / rel
        if not folder.is_dir() or (not readable and any(f.path == folder for f in out)):
            continue  # absent, or read already in a format recalld reads
        pattern = glob.removeprefix(f"~/{rel}/")  # the part under ``folder``
        files = sum(1 for _ in _limited(folder.glob(pattern), 10_000))
        if files:
            out.append(Found(folder, what, files, glob, readable))
    return out


def count_notes(folder: Path, limit: int = 100_000, budget: list[int] | None = None) -> int:
    """Markdown files under ``folder`` (hidden and skipped folders left out), up to ``limit``;
    ``budget``: folders left to visit, shared between calls (default: a budget of its own)."""
    n = 0
    budget = [MAX_FOLDERS_VISITED] if budget is None else budget
    for _dirpath, _dirs, files in _walk(folder, depth=64, budget=budget):
        n += sum(1 for f in files if f.lower().endswith(NOTE_ENDINGS))
        if n >= limit:
            break
    return n


def _vaults(home: Path) -> Iterator[Path]:
    budget = [MAX_FOLDERS_VISITED]
    for dirpath, dirs, _files in _walk(home, depth=MAX_DEPTH, budget=budget, keep={".obsidian"}):
        if ".obsidian" in dirs:
            dirs.remove(".obsidian")
            yield Path(dirpath)


def _walk(
    top: Path, *, depth: int, budget: list[int], keep: frozenset[str] | set[str] = frozenset()
) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` without hidden or skipped folders (but those in ``keep``), ``depth`` levels
    deep, sharing a budget of folders visited; unreadable folders are passed over."""
    base = str(top).rstrip(os.sep).count(os.sep)
    for dirpath, dirs, files in os.walk(top, onerror=lambda _e: None):
        budget[0] -= 1
        if budget[0] < 0:
            return
        dirs[:] = sorted(
            d for d in dirs if (not d.startswith(".") or d in keep) and d not in SKIPPED
        )
        if dirpath.count(os.sep) - base >= depth:
            dirs[:] = [d for d in dirs if d in keep]
        yield dirpath, dirs, files


def _subfolders(folder: Path) -> Iterator[Path]:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir() and not entry.name.startswith(".") and entry.name not in SKIPPED:
            yield Path(entry.path)


def _limited(items: Iterator[Path], limit: int) -> Iterator[Path]:
    for i, item in enumerate(items):
        if i >= limit:
            return
        yield item


def _outermost(found: list[Found]) -> list[Found]:
    unique: dict[Path, Found] = {}
    for f in found:
        unique.setdefault(f.path.resolve(), f)
    return [f for p, f in unique.items() if not any(o != p and p.is_relative_to(o) for o in unique)]
