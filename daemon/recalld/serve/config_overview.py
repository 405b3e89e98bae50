"""The serve log's first lines: where the notes are, what is watched, which config is read.

A new user's first question is where the notes go and what recalld looks at; the log answers it
before anything else (``recalld status`` does the same with :mod:`recalld.surfaces.overview`).
"""

from __future__ import annotations

from pathlib import Path

from recalld import paths
from recalld.config import Config


def describe_config(config: Config, config_path: Path) -> list[str]:
    """The serve log's first lines: memory folders, transcript globs, index, config file."""
    roots = config.memory_roots()
    missing = [str(r) for r in roots if not r.is_dir()]
    globs = config.session_globs()
    state = (
        "edits apply live, SIGHUP reloads"
        if config_path.exists()
        else "not present: defaults; create it to configure, it is read when saved"
    )
    lines = [
        f"notes: memory folders {', '.join(map(str, roots))}"
        + (f" (not there yet: {', '.join(missing)})" if missing else ""),
        f"transcripts: {', '.join(globs) if globs else 'none (sessions.paths is empty)'}",
        f"index: {paths.index_path(config.base_dir)}",
        f"config: {config_path} ({state})",
    ]
    return lines
