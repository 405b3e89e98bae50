"""Fault scenario against a real daemon: a memory folder deleted, or its mount (a real
tmpfs) unmounted, then back: rows kept, the root reported missing, a resync on its return.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import write
from daemon_process import wait_for
from recalld.ingest.indexer import content_hash
from recalld_client import NotFound
from reliability_faults_support import indexed_hash, memory_config, mount_tmpfs, names, umount
from reliability_support import Daemon, check_consistent, check_matches_disk


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_memory_folder_deleted_or_unmounted_then_back(home: Path) -> None:
    stable, deleted, mounted = home / "stable", home / "gone", home / "usb"
    mount_tmpfs(mounted, "4m")
    try:
        for root, word in ((stable, "maple"), (deleted, "cobalt"), (mounted, "saffron")):
            for i in range(3):
                write(root / f"{word}{i}.md", f"# {word} {i}\n\nThe {word} crate {i} is here.\n")
        memory_config(home, [stable, deleted, mounted])
        index = home / "index.sqlite"
        daemon = Daemon(home).start()
        try:
            daemon.full_sync()
            with daemon.client() as c:
                assert c.status()["counts"]["memory_files"] == 9
                assert c.status()["missing_roots"] == []

                # A folder deleted: its rows stay (reported), search keeps answering.
                shutil.rmtree(deleted)
                wait_for(lambda: missing(c).get(str(deleted)) == "missing", timeout=30)
                wait_for(lambda: (c.status()["last_report"] or {}).get("files_kept") == 3)
                assert c.status()["counts"]["memory_files"] == 9
                assert "cobalt1.md" in names(c.search("cobalt crate 1"))
                with pytest.raises(NotFound):
                    c.get(str(deleted / "cobalt1.md"))
                assert missing_entry(c, deleted)["files_kept"] == 3

                # A mount going away leaves an empty folder: rows stay too.
                umount(mounted)
                wait_for(lambda: "not mounted" in missing(c).get(str(mounted), ""), timeout=30)
                wait_for(lambda: (c.status()["last_report"] or {}).get("files_kept") == 6)
                assert c.status()["counts"]["memory_files"] == 9
                assert "saffron2.md" in names(c.search("saffron crate 2"))
        finally:
            daemon.stop()

        # A restart while both are away keeps them too, and creates neither folder.
        daemon = Daemon(home).start()
        try:
            daemon.full_sync()
            assert not deleted.exists(), "the daemon must not create a missing memory folder"
            with daemon.client() as c:
                st = c.status()
                assert st["counts"]["memory_files"] == 9, st["counts"]
                assert set(missing(c)) == {str(deleted), str(mounted)}

                # The deleted folder comes back (one file gone, one changed, one new).
                write(deleted / "cobalt0.md", "# cobalt 0\n\nThe cobalt crate 0 was repainted.\n")
                write(deleted / "cobalt1.md", "# cobalt 1\n\nThe cobalt crate 1 is here.\n")
                write(deleted / "cobalt9.md", "# cobalt 9\n\nA new cobalt barrel 9.\n")
                back = time.monotonic()
                wait_for(lambda: str(deleted) not in missing(c), timeout=30)
                wait_for(lambda: "cobalt9.md" in names(c.search("cobalt barrel 9")), timeout=30)
                wait_for(lambda: "cobalt2.md" not in names(c.search("cobalt crate 2")))
                resync_deleted = time.monotonic() - back
                # ... and it is watched again.
                write(deleted / "cobalt7.md", "# cobalt 7\n\nThe cobalt lantern 7.\n")
                wait_for(lambda: "cobalt7.md" in names(c.search("cobalt lantern 7")), timeout=30)

                # The drive is mounted again with its files (one edited meanwhile).
                mount_tmpfs(mounted, "4m")
                back = time.monotonic()
                for i in range(3):
                    body = f"The saffron crate {i} is here.\n" if i else "Saffron crate 0 sold.\n"
                    write(mounted / f"saffron{i}.md", f"# saffron {i}\n\n{body}")
                wait_for(lambda: str(mounted) not in missing(c), timeout=30)
                wait_for(
                    lambda: (
                        "saffron0.md" in names(c.search("saffron crate 0 sold", mode="keyword"))
                        and indexed_hash(index, mounted / "saffron0.md")
                        == content_hash((mounted / "saffron0.md").read_bytes())
                    ),
                    timeout=30,
                )
                resync_mounted = time.monotonic() - back
                write(mounted / "saffron5.md", "# saffron 5\n\nA saffron kettle 5.\n")
                wait_for(lambda: "saffron5.md" in names(c.search("saffron kettle 5")), timeout=30)
            daemon.full_sync()
        finally:
            daemon.stop()
        check_consistent(index, "after the folders came back")
        assert check_matches_disk(index, [stable, deleted, mounted], "folders back") == 11
        print(f"folder back: resynced in {resync_deleted:.1f} s, mount: {resync_mounted:.1f} s")
    finally:
        umount(mounted)


def missing(c: Any) -> dict[str, str]:
    return {m["path"]: m["reason"] for m in c.status()["missing_roots"]}


def missing_entry(c: Any, root: Path) -> dict[str, Any]:
    return next(m for m in c.status()["missing_roots"] if m["path"] == str(root))
