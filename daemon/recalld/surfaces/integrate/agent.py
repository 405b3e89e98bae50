"""What an agent integration is: the files it changes, the agent's CLI, its transcript glob.

Each agent module (:mod:`.claude_code`, :mod:`.codex`, :mod:`.gemini_cli`) builds an
:class:`Agent`; :mod:`.apply` carries the edits out the same way for all of them.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SERVER_NAME = "recalld"  # the MCP server's name in every agent's config

# Old bytes (None: no file) and whether to take recalld out -> the new bytes. Raises
# config_edit.Unparsable for a file it cannot read.
Edit = Callable[[Path, "bytes | None", bool], "bytes | None"]


@dataclass(frozen=True)
class FileEdit:
    """One file an integration changes, and how.

    ``cli_add`` / ``cli_remove``: the agent's own command that makes the same change, used when
    the agent's CLI is installed (the agent then writes its file its own way). ``shared``: a file
    several agents change (recalld's config.toml): ``--remove`` takes an agent's entries out
    only when that agent put them there, never another's or the user's.
    """

    path: Path
    what: str  # "MCP server", "hooks", "transcript folder"
    edit: Edit
    cli_add: Sequence[str] = ()
    cli_remove: Sequence[str] = ()
    shared: bool = False


@dataclass(frozen=True)
class Registration:
    """The recalld MCP server as an agent's config holds it."""

    path: Path
    command: list[str]  # command and args


@dataclass(frozen=True)
class Agent:
    """An agent recalld can wire itself into."""

    name: str  # as typed after `recalld integrate`
    title: str
    cli: str  # the agent's executable name
    scopes: tuple[str, ...]
    transcripts: str  # the transcript glob recalld must index
    edits: Callable[[str, list[str]], list[FileEdit]]  # (scope, recalld command) -> edits
    registration: Callable[[str], Registration | None]  # scope -> the MCP entry, if any
    installed_marker: Callable[[], Path]  # the agent's own folder (there once it has run)

    def cli_path(self) -> str | None:
        """The agent's executable on PATH, if installed."""
        return shutil.which(self.cli)

    def present(self) -> bool:
        """Whether the agent is on this machine (its CLI on PATH or its config folder)."""
        return self.cli_path() is not None or self.installed_marker().exists()


def recalld_executable() -> list[str]:
    """``recalld`` by absolute path (the console script beside this interpreter, else on PATH),
    so that an agent starting it needs no PATH; else this interpreter with ``-m recalld``."""
    name = "recalld.exe" if sys.platform == "win32" else "recalld"
    beside = Path(sys.executable).parent / name  # not resolved: a venv's python is a link
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside.absolute())]
    found = shutil.which("recalld")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "recalld"]


def mcp_command() -> list[str]:
    """The command (and args) agents register for recalld's MCP server."""
    return [*recalld_executable(), "mcp"]


def home_path(env_name: str, default: Path) -> Path:
    """A folder an agent lets its users move with an environment variable."""
    value = os.environ.get(env_name)
    return Path(value).expanduser() if value else default
