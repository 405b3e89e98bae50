"""Which files of a memory folder are indexed: one filter class shared by the walker and watcher."""

from __future__ import annotations

import fnmatch
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

    def file_ok(self, path: Path, root: Path | None = None) -> bool:
        """Whether ``path`` (under ``root``) should be indexed."""
        name = path.name
        if name.startswith(".") or any(fnmatch.fnmatch(name, pat) for pat in self.ignored):
            return False
        if not name.lower().endswith(self.extensions):
            return False
        if root is not None:
            try:
                rel = path.relative_to(root)
            except ValueError:
                return False
            if any(not self.dir_ok(part) for part in rel.parts[:-1]):
                return False
        return True

    def walk(self, root: Path) -> Iterator[Path]:
        """Indexable files under ``root`` (symlinked folders are not followed)."""
        import os

        if not root.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if self.dir_ok(d))
            base = Path(dirpath)
            for name in sorted(filenames):
                path = base / name
                if self.file_ok(path, root):
                    yield path


def make_filter(extensions: Sequence[str]) -> PathFilter:
    """A filter for the configured extensions."""
    exts = tuple(e.lower() if e.startswith(".") else "." + e.lower() for e in extensions)
    return PathFilter(extensions=exts)
