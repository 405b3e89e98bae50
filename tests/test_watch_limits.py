"""inotify limits reached (issue 14, item 6), for real: a daemon whose user has no watches or
no inotify instance left still indexes new notes, by scanning, and says so in ``status``.

The limits are per user. Lowering ``/proc/sys/fs/inotify/max_user_watches`` would hit every
process on the machine (other tests, other daemons) while it is low, so it is never touched:
the daemon runs under a uid of its own, and a helper under the same uid (inotify_hog.py) first
uses up that uid's watches or instances. This needs root (to switch uids); without it the test
skips and says why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import stop_process, wait_for
from recalld_client import Client, is_running

HOG = Path(__file__).with_name("inotify_hog.py")
FOLDERS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="switching to a uid of its own (per-user inotify limits) needs root",
    ),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is missing"),
]


@contextmanager
def as_uid(uid: int) -> Iterator[None]:
    """Act as ``uid`` (the daemon serves its own uid only; SO_PEERCRED sees the euid)."""
    os.setegid(uid)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


class UidDaemon:
    """A ``recalld serve`` under ``uid``, next to an inotify hog under the same uid."""

    def __init__(self, home: Path, uid: int) -> None:
        self.home, self.uid = home, uid
        self.procs: list[subprocess.Popen[bytes]] = []
        self.client: Client | None = None

    def spawn(self, args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        # setpriv, not Popen(user=...): the interpreter may live under /root, which only the
        # exec itself may traverse (setpriv keeps the capability until exec, then drops all).
        uid = str(self.uid)
        wrap = ["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups"]
        proc = subprocess.Popen([*wrap, *args], env=env_for(self.home), cwd="/", **kw)
        self.procs.append(proc)
        return proc

    def hog(self, leave_watches: int, leave_instances: int) -> subprocess.Popen[bytes]:
        files = self.home / "hog"
        files.mkdir()
        for i in range(1600):  # 1,600 files x up to 128 instances covers the watch limit
            (files / f"f{i}").touch()
        self.give_home()
        args = [sys.executable, str(HOG), str(files), str(leave_watches), str(leave_instances)]
        proc = self.spawn(args, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("ready"), line
        return proc

    def give_home(self) -> None:
        for path in [self.home, *self.home.rglob("*")]:
            os.chown(path, self.uid, self.uid, follow_symlinks=False)

    def start(self) -> Client:
        self.give_home()
        log = (self.home / "daemon.log").open("ab")
        self.spawn([sys.executable, "-m", "recalld.surfaces.cli", "serve"], stdout=log, stderr=log)
        socket = self.home / "run" / "recalld.sock"

        def up() -> bool:
            with as_uid(self.uid):
                return is_running(socket, timeout=0.5)

        wait_for(up, timeout=60, step=0.1)
        with as_uid(self.uid):
            self.client = Client(socket, reconnect=False)
            self.client.hello()
        return self.client

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        for proc in reversed(self.procs):
            stop_process(proc)


@pytest.fixture
def uid_home(home: Path) -> Iterator[tuple[Path, int]]:
    (home / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[sessions]\npaths = []\n'
        "[sync]\ndebounce_s = 0.3\nscan_interval_s = 1.0\n"
    )
    for name in FOLDERS:
        write(home / "memory" / name / "old.md", f"# Old {name}\n\nbaseline {name} entry\n")
    yield home, 61000 + os.getpid() % 1000  # a uid nobody else runs processes under


def found(client: Client, word: str) -> list[str]:
    return [
        Path(r["path"]).parent.name
        for r in client.search(word, mode="keyword", max_results=20)["results"]
    ]


def limits() -> tuple[int, int]:
    base = Path("/proc/sys/fs/inotify")
    return int((base / "max_user_watches").read_text()), int(
        (base / "max_user_instances").read_text()
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    ["watches-partial", "watches-none", "instances"],
)
def test_new_notes_are_indexed_by_scanning_when_inotify_limits_are_reached(
    uid_home: tuple[Path, int], case: str
) -> None:
    home, uid = uid_home
    max_watches, _ = limits()
    leave = {"watches-partial": (3, 2), "watches-none": (0, 2), "instances": (max_watches, 0)}
    daemon = UidDaemon(home, uid)
    try:
        hog = daemon.hog(*leave[case])
        client = daemon.start()
        wait_for(lambda: client.status()["counts"]["files"] == len(FOLDERS), timeout=60)
        warnings = client.status()["warnings"]
        expected = "instance limit" if case == "instances" else "watch limit"
        assert any(expected in w for w in warnings), warnings
        started = time.monotonic()
        for name in (*FOLDERS, "golf"):  # golf: a folder created now, past the limit
            write(home / "memory" / name / "new.md", f"# New {name}\n\nquokka {name} sighting\n")
        wait_for(lambda: len(found(client, "quokka")) == len(FOLDERS) + 1, timeout=30, step=0.1)
        seen_s = time.monotonic() - started
        (home / "memory" / FOLDERS[-1] / "new.md").unlink()  # deletes are found too
        wait_for(lambda: len(found(client, "quokka")) == len(FOLDERS), timeout=30)
        # The limit goes away (the hog exits): watching resumes and the warning goes.
        hog.terminate()
        hog.wait(60)  # freeing its watches is slow on a loaded machine (over 10 s seen)
        wait_for(lambda: not client.status()["warnings"], timeout=30, step=0.2)
        print(f"{case}: warning shown, {len(FOLDERS) + 1} new notes indexed in {seen_s:.1f} s")
    finally:
        daemon.stop()
