"""Which files of a memory folder are indexed: one filter class shared by the walker and watcher."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_IGNORED = (
    "*.swp",
    "*.swo",
    "*.swx",
    "*~",
    ".#*",
    "#*#",
    "*.tmp",
    "*.part",
    "*.crdownload",
    "4913",  # vim's probe file
)


@dataclass(frozen=True)
class PathFilter:
    """Accepts files with a known extension outside dot folders, rejects editor litter."""

    extensions: tuple[str, ...] = (".md", ".markdown", ".txt")
    ignored: tuple[str, ...] = DEFAULT_IGNORED
    ignored_dirs: frozenset[str] = field(
        default_factory=lambda: frozenset({"node_modules", "__pycache__"})
    )

    def dir_ok(self, name: str) -> bool:
        """Whether to descend into a folder of this name."""
        return not name.startswith(".") and name not in self.ignored_dirs

    def name_ok(self, name: str) -> bool:
        """Whether a file of this name should be indexed (extension, not editor litter)."""
        if name.startswith(".") or not name.lower().endswith(self.extensions):
            return False
        return _ignored_re(self.ignored).match(name) is None

    def file_ok(self, path: Path, root: Path | None = None) -> bool:
        """Whether ``path`` (under ``root``) should be indexed."""
        if not self.name_ok(path.name):
            return False
        if root is not None:
            try:
                rel = path.relative_to(root)
            except ValueError:
                return False
            if any(not self.dir_ok(part) for part in rel.parts[:-1]):
                return False
        return True

    def walk(self, root: Path) -> Iterator[tuple[Path, bool]]:
        """(path, is a symlink) of indexable files under ``root``; linked folders not followed.

        Folders are pruned on the way down, so names are all that is left to check per file
        (a no-op resync of 10k files spends its time here).
        """
        if not root.is_dir():
            return
        stack = [str(root)]
        while stack:
            folder = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
            except OSError:
                continue  # vanished or unreadable: the next sync sees it again
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if self.dir_ok(entry.name):
                            stack.append(entry.path)
                    elif self.name_ok(entry.name):
                        yield Path(entry.path), entry.is_symlink()
                except OSError:
                    continue


@functools.lru_cache(maxsize=8)
def _ignored_re(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for all ignore globs (fnmatch per pattern per file is slow at 10k files)."""
    if not patterns:
        return re.compile(r"(?!)")
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def make_filter(extensions: Sequence[str]) -> PathFilter:
    """A filter for the configured extensions."""
    exts = tuple(e.lower() if e.startswith(".") else "." + e.lower() for e in extensions)
    return PathFilter(extensions=exts)
