"""Removing indexed files: whether one a sync did not find is really gone, and its rows' removal.

A transient problem (an unmounted root, a folder without read permission) must not wipe what is
indexed, so a missing file is checked before its rows go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from recalld.index.index_health import is_index_failure
from recalld.index.store import FileChange, FileRow, Store
from recalld.ingest.path_rule import PathRule
from recalld.ingest.sync_report import Progress, SyncReport, skip_file

# The indexer's logger by name: its log lines keep their source after the split.
log = logging.getLogger("recalld.ingest.indexer")

ChangeHook = Callable[[FileChange], None]


class Removals:
    """The indexer's removals and its change hook (a mixin: the attributes are the Indexer's)."""

    store: Store
    rule: PathRule
    progress: Progress
    on_change: ChangeHook | None
    unavailable_roots: dict[Path, str]  # roots whose files must not be removed now

    def _really_gone(self, key: str, report: SyncReport) -> bool:
        """Whether an indexed file that a sync did not find is really gone (else keep its rows).

        Rows are kept while the file's root is unavailable (missing, unmounted) and while the
        file exists but could not be looked at (a folder without read permission, an I/O
        error): a transient problem must not wipe what is indexed. A file the path rule refuses
        now (a link out, a folder link on its way, no longer a regular file) is gone.
        """
        path = Path(key)
        root = self.rule.root_of(path)
        if root is not None and root in self.unavailable_roots:
            report.files_kept += 1
            return False
        verdict = self.rule.check(path)
        if verdict.transient:
            report.files_kept += 1
            skip_file(report, path, f"kept as indexed: {verdict.reason}")
            return False
        if verdict.ok:
            report.files_kept += 1
            skip_file(report, path, "kept as indexed: its folder could not be listed")
            return False
        return True

    def _remove(self, key: str, report: SyncReport, counted: bool = True) -> None:
        try:
            self._apply(self.store.remove_file(key))
        except Exception as exc:  # one bad row never stops the others
            if is_index_failure(exc):
                raise
            log.exception("removing %s from the index failed", key)
            return
        if counted:
            report.files_removed += 1
            self.progress.files_removed += 1

    def _drop_stale(
        self, key: str, known: FileRow | None, report: SyncReport, skipped: str | None = None
    ) -> None:
        """A file that can no longer be indexed loses its old rows: its old text must not stay
        searchable while ``get`` shows what the file is now. A file ``skipped`` (the reason) is
        counted once, as skipped: the sync's counts add up to the files it checked."""
        if known is not None:
            self._remove(key, report, counted=skipped is None)
        if skipped is not None:
            skip_file(report, key, skipped)

    def _vanished(self, key: str, known: FileRow | None, report: SyncReport) -> None:
        """A file listed, then gone before it was read: its rows go now (not at the next sync)
        and it counts as removed, so the sync's counts still add up to the files it checked."""
        if known is not None:
            self._remove(key, report)
        else:
            report.files_removed += 1
            self.progress.files_removed += 1

    def _apply(self, change: FileChange) -> None:
        if self.on_change is not None:
            self.on_change(change)
