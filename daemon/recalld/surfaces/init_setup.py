"""``recalld init``: find the notes and transcripts already on this machine, propose a config,
write it when confirmed, and say the next three commands.

It asks nothing it can infer: the only question is the confirmation (``--yes`` answers it for
scripts). An existing config is never replaced silently: it is kept unless ``--force``, and then
saved beside the new one as ``config.toml.bak``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from recalld import paths
from recalld.config import DEFAULT_SESSION_GLOBS
from recalld.surfaces import exit_codes
from recalld.surfaces.folder_discovery import Found, memory_folders, transcript_folders

NEXT_STEPS = (
    ("recalld start", "the daemon in the background: it indexes, then keeps watching"),
    ("recalld sync --wait", "wait for the first indexing, with a progress bar"),
    ('recalld search "what did we decide"', "ask your memory"),
)


def add_parser(sub: Any) -> None:
    """The ``init`` subcommand."""
    p = sub.add_parser(
        "init",
        help="find your notes and agent transcripts, write a config, say what to run next",
        description="Looks for Obsidian vaults, ~/notes, Markdown folders in ~/Documents, "
        "OpenClaw memory and agent transcripts (Claude Code, Codex, OpenClaw, Gemini CLI), "
        "proposes a config and writes it when you confirm.",
    )
    p.add_argument(
        "folders",
        nargs="*",
        type=Path,
        metavar="FOLDER",
        help="memory folders to use instead of the ones found",
    )
    p.add_argument("-y", "--yes", action="store_true", help="write without asking")
    p.add_argument("--force", action="store_true", help="replace an existing config (kept as .bak)")


def run(args: argparse.Namespace, *, ask: Callable[[str], str] | None = None) -> int:
    """``recalld init``: the exit status (0 written or already so, 1 nothing written)."""
    out = sys.stdout
    target = (args.config or paths.config_path()).expanduser()
    home = paths.user_home()
    memory, transcripts = _proposal(args.folders, home)
    text = render_config(memory, transcripts)
    _describe(out, memory, transcripts, args.folders)
    out.write(f"\nProposed config ({target}):\n\n{_indent(text)}\n")
    if target.exists():
        old = target.read_text(encoding="utf-8", errors="replace")
        if old == text:
            out.write(f"{target} already says this: nothing to write.\n")
            _next_steps(out)
            return exit_codes.OK
        if not args.force:
            out.write(
                f"{target} exists and is left as it is (it differs from the proposal above). "
                "Run `recalld init --force` to replace it (the old one is kept as "
                f"{target.name}.bak), or edit it yourself.\n"
            )
            return exit_codes.ERROR
    if not args.yes and not _confirmed(target, ask):
        asked = ask is not None or sys.stdin.isatty()
        why = "" if asked else " (not asked: input is not a terminal)"
        out.write(f"Nothing written{why}. `recalld init --yes` writes it without asking.\n")
        return exit_codes.ERROR
    write_config(target, text, out)
    _next_steps(out)
    return exit_codes.OK


def _proposal(folders: Sequence[Path], home: Path) -> tuple[list[Found], list[Found]]:
    if folders:
        missing = [f for f in folders if not f.expanduser().is_dir()]
        if missing:
            from recalld.errors import BadRequest

            raise BadRequest(f"not a folder: {missing[0]}")
        memory = [Found(f.expanduser().resolve(), "given", 0) for f in folders]
    else:
        memory = memory_folders(home, paths.default_memory_dir())
    return memory, transcript_folders(home)


def render_config(memory: Sequence[Found], transcripts: Sequence[Found]) -> str:
    """The TOML text: the memory folders, and transcript globs only when the defaults miss one."""
    lines = ["# Written by `recalld init`; every key is described in the README.", ""]
    lines.append("[memory]")
    if memory:
        lines.append("paths = [")
        lines += [f"    {_toml_str(str(f.path))},  # {f.what}" for f in memory]
        lines.append("]")
    else:
        lines.append(f"# paths = []  (none found: notes go to {paths.default_memory_dir()})")
    extra = [t.glob for t in transcripts if t.readable and t.glob not in DEFAULT_SESSION_GLOBS]
    lines += ["", "[sessions]"]
    if extra:
        globs = [*DEFAULT_SESSION_GLOBS, *extra]
        lines.append("paths = [" + ", ".join(_toml_str(g) for g in globs) + "]")
    else:
        lines.append("# paths: the default globs read Claude Code, Codex and OpenClaw transcripts")
    return "\n".join(lines) + "\n"


def write_config(target: Path, text: str, out: TextIO) -> None:
    """Write ``text`` to ``target`` (0600), keeping an existing file as ``.bak``."""
    from recalld.security import private_umask

    with private_umask():
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            backup = target.with_name(target.name + ".bak")
            target.replace(backup)
            out.write(f"kept the old config as {backup}\n")
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    out.write(f"wrote {target}\n")


def _describe(
    out: TextIO, memory: Sequence[Found], transcripts: Sequence[Found], given: Sequence[Path]
) -> None:
    if given:
        out.write("Memory folders (given):\n")
    elif memory:
        out.write("Found these notes:\n")
    else:
        out.write(
            "Found no notes folder (Obsidian vault, ~/notes, Markdown folders in ~/Documents). "
            f"recalld will use {paths.default_memory_dir()}; or run `recalld init FOLDER`.\n"
        )
    for f in memory:
        count = f" ({_files(f.files, 'Markdown file')})" if f.files else ""
        out.write(f"  {f.path}  {f.what}{count}\n")
    if transcripts:
        out.write("Found these agent transcripts:\n")
    for t in transcripts:
        note = "" if t.readable else "  (not indexed: recalld reads JSONL transcripts only)"
        out.write(f"  {t.path}  {t.what}, {_files(t.files, 'file')}{note}\n")


def _confirmed(target: Path, ask: Callable[[str], str] | None) -> bool:
    if ask is None:
        if not sys.stdin.isatty():
            return False
        ask = input
    try:
        answer = ask(f"Write it to {target}? [Y/n] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("", "y", "yes")


def _next_steps(out: TextIO) -> None:
    out.write("\nNext:\n")
    width = max(len(cmd) for cmd, _ in NEXT_STEPS)
    for cmd, why in NEXT_STEPS:
        out.write(f"  {cmd.ljust(width)}   # {why}\n")


def _files(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" if line else "\n" for line in text.splitlines())
