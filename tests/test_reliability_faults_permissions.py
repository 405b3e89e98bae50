"""Fault scenario against a real daemon: files without read permission.

The daemon's CAP_DAC_OVERRIDE is dropped so that ``chmod 000`` really gives EACCES; the
unreadable paths are skipped, reported, and what was indexed before is kept.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import write
from recalld.ingest.indexer import content_hash
from reliability_faults_support import indexed_hash, memory_config, names
from reliability_support import (
    Daemon,
    check_consistent,
    check_matches_disk,
    drop_file_permission_override,
)


@pytest.fixture
def unprivileged() -> Iterator[Any]:
    """How to start a daemon for which file modes apply (root: drop the DAC capabilities)."""
    yield drop_file_permission_override if os.geteuid() == 0 else None


@pytest.mark.timeout(180)
def test_unreadable_files_are_skipped_reported_and_kept(home: Path, unprivileged: Any) -> None:
    memory = home / "memory"
    for i in range(3):
        write(memory / f"ok{i}.md", f"# Ok {i}\n\nThe pelican {i} is readable.\n")
    secret = write(memory / "secret.md", "# Secret\n\nThe first version of the secret.\n")
    inner = write(memory / "locked" / "inner.md", "# Inner\n\nThe inner vault list.\n")
    memory_config(home, [memory])
    index = home / "index.sqlite"
    daemon = Daemon(home, preexec_fn=unprivileged).start()
    try:
        daemon.full_sync()
        with daemon.client() as c:
            assert c.status()["counts"]["memory_files"] == 5
            old_secret = content_hash(secret.read_bytes())
            old_inner = content_hash(inner.read_bytes())
            secret.write_text("# Secret\n\nThe second version of the secret.\n")
            secret.chmod(0)
            inner.write_text("# Inner\n\nThe inner vault list, updated.\n")
            (memory / "locked").chmod(0)
            fresh = write(memory / "fresh.md", "# Fresh\n\nNobody may read this.\n")
            fresh.chmod(0)
            write(memory / "ok9.md", "# Ok 9\n\nThe pelican 9 arrived late.\n")
            report = daemon.full_sync()["report"]
            reasons = {Path(s["path"]).name: s["reason"] for s in report["skipped"]}
            assert set(reasons) == {"secret.md", "fresh.md", "inner.md"}, reasons
            assert all("Permission denied" in r for r in reasons.values()), reasons
            assert report["files_kept"] == 1 and report["files_skipped"] == 3, report
            st = c.status()
            assert st["skipped_total"] == 3, st["skipped_files"]
            assert {Path(s["path"]).name for s in st["skipped_files"]} == set(reasons)
            # The rest is indexed; what could not be read stays as it was indexed.
            assert st["counts"]["memory_files"] == 6
            assert "ok9.md" in names(c.search("pelican 9 arrived late"))
            assert indexed_hash(index, secret) == old_secret
            assert indexed_hash(index, inner) == old_inner
            assert indexed_hash(index, fresh) is None
            assert "inner.md" in names(c.search("inner vault list"))

            # Permissions back: everything is indexed at its current content, nothing skipped.
            secret.chmod(0o644)
            fresh.chmod(0o644)
            (memory / "locked").chmod(0o755)
            daemon.full_sync()
            st = c.status()
            assert st["skipped_files"] == [] and st["skipped_total"] == 0
            assert "secret.md" in names(c.search("second version of the secret"))
    finally:
        for path in (memory / "locked", secret, memory / "fresh.md"):
            if path.exists():
                path.chmod(0o755)
        daemon.stop()
    check_consistent(index, "after unreadable files")
    assert check_matches_disk(index, [memory], "permissions restored") == 7
