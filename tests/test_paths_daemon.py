"""The path rule through a running daemon's watcher (issue 14, items 2, 5, 8).

Links out of the root created while the daemon runs, a note that turns binary or too big, and a
file name that is not UTF-8: the watcher batch follows the same rule as a full sync.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import linked_vaults, write
from daemon_process import DaemonProcess, wait_for
from recalld_client import Client

SECRET = "zanzibarsecret"


@pytest.fixture
def daemon(home: Path) -> Iterator[DaemonProcess]:
    (home / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[sessions]\npaths = []\n'
        "[memory]\nmax_file_bytes = 2000\n[sync]\ndebounce_s = 0.3\n"
    )
    write(home / "memory" / "start.md", "# Start\n\nindexed on start-up\n")
    d = DaemonProcess(home).start()
    d.wait_idle()
    yield d
    d.stop()


def found(c: Client, word: str) -> list[str]:
    return [r["path"] for r in c.search(word, mode="keyword")["results"]]


def skipped(c: Client) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in c.status()["skipped_files"]}


def test_links_out_created_while_running_are_not_indexed(daemon: DaemonProcess, home: Path) -> None:
    mem = home / "memory"
    secret = write(home / "outside" / "passwd", f"root:x:0:0:{SECRET}:/root\n")
    write(home / "elsewhere" / "x.md", f"# Elsewhere\n\n{SECRET} in a linked folder\n")
    with daemon.client() as c:
        (mem / "passwd.txt").symlink_to(secret)
        (mem / "dirlink.md").symlink_to(home / "elsewhere", target_is_directory=True)
        write(mem / "marker.md", "# Marker\n\nwombat marker note\n")
        wait_for(lambda: bool(found(c, "wombat")), timeout=20)
        wait_for(lambda: str(mem / "dirlink.md") in skipped(c), timeout=10)
        time.sleep(1.0)  # a few debounce periods more: nothing else may turn up
        assert found(c, SECRET) == []
        reasons = skipped(c)
        assert "link out" in reasons[str(mem / "passwd.txt")], reasons
        c.sync(wait=True)  # a full sync agrees
        assert found(c, SECRET) == []


@pytest.mark.parametrize("change", ["binary", "oversize"])
def test_a_note_that_turns_binary_or_too_big_while_running(
    daemon: DaemonProcess, home: Path, change: str
) -> None:
    note = write(home / "memory" / "note.md", f"# Note\n\n{SECRET} old text\n")
    with daemon.client() as c:
        wait_for(lambda: found(c, SECRET) == [str(note)], timeout=20)
        if change == "binary":
            note.write_bytes(b"\x00\x01binary" * 10)
        else:
            note.write_text("# Note\n\n" + "grown past the limit " * 200)
        took = wait_for(lambda: found(c, SECRET) == [], timeout=20)
        reason = skipped(c)[str(note)]
        assert ("binary" if change == "binary" else "max_file_bytes") in reason
        assert c.status()["counts"]["files"] == 1  # start.md only
        print(f"{change}: old text gone {took:.2f} s after the change")


def test_an_undecodable_name_created_while_running(daemon: DaemonProcess, home: Path) -> None:
    mem = home / "memory"
    with daemon.client() as c:
        with open(os.path.join(os.fsencode(mem), b"caf\xe9.md"), "w") as fh:
            fh.write("# Bad\n\nplatypus undecodable\n")
        write(mem / "good.md", "# Good\n\nplatypus good\n")
        wait_for(lambda: found(c, "platypus") == [str(mem / "good.md")], timeout=20)
        wait_for(lambda: f"{mem}/caf\\xe9.md" in skipped(c), timeout=10)
        write(mem / "later.md", "# Later\n\nplatypus later\n")  # the watcher still works
        wait_for(lambda: len(found(c, "platypus")) == 2, timeout=20)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_memory_root_symlink_repointed_while_running(home: Path) -> None:
    """The daemon watches the folder the root's symlink leads to; re-pointed, it follows."""
    one, two, link = linked_vaults(home)
    write(one / "old.md", "# Old\n\nthe quartzite ledger\n")
    write(two / "new.md", "# New\n\nthe obsidian lantern\n")
    (home / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[sessions]\npaths = []\n'
        f'[memory]\npaths = ["{link}"]\n[sync]\ndebounce_s = 0.3\n'
    )
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        with d.client() as c:
            assert found(c, "quartzite") == [str(one.resolve() / "old.md")]
            link.unlink()
            link.symlink_to(two)
            wait_for(lambda: found(c, "lantern") == [str(two.resolve() / "new.md")], timeout=30)
            assert c.status()["memory_roots"] == [str(two.resolve())]
            wait_for(lambda: found(c, "quartzite") == [], timeout=30)  # not under a root now
            # ... and the new folder is watched: an edit there is found without a sync
            write(two / "later.md", "# Later\n\nthe basalt compass\n")
            wait_for(lambda: found(c, "basalt") == [str(two.resolve() / "later.md")], timeout=30)
            assert "memory folders now lead elsewhere" in d.log.read_text()
    finally:
        d.stop()
