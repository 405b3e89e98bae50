"""Dirty paths into work for a sync: the files to read and the indexed rows to check for removal.

A watcher batch or an explicit ``sync`` names paths, not files: a folder moved in is walked, a
folder that vanished takes the rows under it along, and a path the rule refuses is reported.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from pathlib import Path

from recalld.index.store import FileRow, Store
from recalld.ingest.filters import PathFilter
from recalld.ingest.path_rule import PathRule, Verdict, inside, name_problem
from recalld.ingest.sync_report import SyncReport, skip_file


class DirtyPaths:
    """The indexer's expansion of dirty paths (a mixin: the attributes are the Indexer's)."""

    store: Store
    rule: PathRule
    filter: PathFilter
    _verdicts: dict[str, Verdict]  # admitted by this sync's listing
    _known: dict[str, FileRow] | None
    _sorted_keys: tuple[dict[str, FileRow], list[str]] | None  # _indexed_under's sorted rows

    def _expand(self, paths: Iterable[Path], report: SyncReport) -> tuple[list[Path], list[str]]:
        """Dirty paths (watcher batches, explicit sync paths) into files to read and rows to drop.

        A folder is walked (moved in, or scanned because it is not watched), and rows under it
        that the walk did not find are candidates for removal, as in a full sync.
        """
        files: dict[str, Path] = {}
        gone: list[str] = []
        for p in map(Path, paths):
            if self.rule.root_of(p) is None:
                continue
            verdict = self.rule.check(p)
            if verdict.ok:
                files.setdefault(str(p), p)
                self._verdicts[str(p)] = verdict
            elif name_problem(p):
                skip_file(report, p, verdict.reason)  # never stored, nothing to remove
            else:
                gone.extend(self._expand_one(p, verdict, files, report))
        return list(files.values()), sorted({g for g in gone if g not in files})

    def _expand_one(
        self, p: Path, verdict: Verdict, files: dict[str, Path], report: SyncReport
    ) -> list[str]:
        """Rows to check for removal for a refused dirty path; files found under a folder."""
        key = str(p)
        gone = [key] if self.store.file(key) is not None else []
        under = key + os.sep
        if _is_dir(p) and self.filter.dir_ok(p.name):
            real = _realpath(p)
            if real and inside(real, self.rule.real_roots):
                self._walk_moved_in(p, real, files, report)
            else:
                skip_file(report, p, "a folder link out of the memory folders: not followed")
            gone.extend(self._indexed_under(under))
        elif not os.path.lexists(p) and not gone:  # a folder that vanished: its files are gone
            gone.extend(self._indexed_under(under))
        elif verdict.reported and verdict.reason != "gone":
            skip_file(report, p, verdict.reason)
        return gone

    def _walk_moved_in(
        self, folder: Path, real: str, files: dict[str, Path], report: SyncReport
    ) -> None:
        """The files the rule admits under a dirty folder (its real path checked inside)."""
        for path, is_link in self.filter.walk(folder):
            found = self.rule.check_walked(path, folder, is_link, real)
            if found.ok:
                files.setdefault(str(path), path)
                self._verdicts[str(path)] = found
            elif found.reported and found.reason != "gone":
                skip_file(report, path, found.reason)

    def _indexed(self) -> dict[str, FileRow]:
        """The memory rows, loaded once per sync (a scan may name hundreds of folders)."""
        if self._known is None:
            self._known = self.store.files("memory")
        return self._known

    def _indexed_under(self, prefix: str) -> list[str]:
        """Indexed paths starting with ``prefix``, by bisection: a storm of 20,000 renames
        names 20,000 vanished paths, and a scan of every row for each took minutes."""
        known = self._indexed()
        if self._sorted_keys is None or self._sorted_keys[0] is not known:
            self._sorted_keys = (known, sorted(known))
        keys = self._sorted_keys[1]
        out = []
        for key in keys[bisect.bisect_left(keys, prefix) :]:
            if not key.startswith(prefix):
                break
            out.append(key)
        return out


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _realpath(path: Path) -> str:
    """The real path, or '' when a link changed while it was resolved (checked next time)."""
    try:
        return os.path.realpath(path)
    except OSError:
        return ""
