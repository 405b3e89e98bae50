"""A real ``recalld serve`` subprocess on a prepared RECALLD_HOME (as tests/daemon_process.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.common import USER_ENV, rss_mb, rss_parts_mb
from recalld_client import Client, is_running


class Daemon:
    """Start, wait for, sample and stop one daemon."""

    def __init__(self, home: Path, extra_env: dict[str, str] | None = None) -> None:
        self.home = home
        self.extra_env = extra_env or {}
        self.socket = home / "run" / "recalld.sock"
        self.log = home / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        """The environment the bench was started with, this home, no config override."""
        env = dict(USER_ENV)
        env.update(self.extra_env)
        env["RECALLD_HOME"] = str(self.home)
        env.pop("RECALLD_CONFIG", None)
        return env

    def start(self, timeout: float = 120.0) -> Daemon:
        """Spawn ``recalld serve`` and wait until it answers ``hello``."""
        with self.log.open("ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "recalld", "serve"],
                env=self.env(),
                stdout=logf,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.tail()}")
            if is_running(self.socket, timeout=0.5):
                return self
            time.sleep(0.02)
        raise TimeoutError(f"daemon did not start: {self.tail()}")

    @property
    def pid(self) -> int:
        """The daemon's process id."""
        assert self.proc is not None
        return self.proc.pid

    def client(self, timeout: float = 120.0) -> Client:
        """A client of this daemon."""
        return Client(self.socket, timeout=timeout)

    def wait_idle(self, timeout: float = 1800.0, poll: float = 0.1) -> dict[str, Any]:
        """Wait until the startup reconcile (or any queued sync) and the read-ahead are done."""
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while time.monotonic() < deadline:
                st: dict[str, Any] = dict(c.status())
                busy = st["state"] != "idle" or st["daemon"]["pending"] or not st["last_sync"]
                # reading the common words' postings ahead is background work too
                if not busy and not (st.get("keyword_postings") or {}).get("preloading"):
                    return st
                time.sleep(poll)
        raise TimeoutError("daemon did not become idle")

    def rss(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB."""
        return rss_mb(self.pid)

    def rss_parts(self) -> dict[str, float]:
        """VmRSS, VmHWM, RssAnon, RssFile, RssShmem in MiB: the daemon's plus its child
        processes' (the search helper, while one runs), summed; peaks summed too."""
        total = rss_parts_mb(self.pid)
        for child in _children(self.pid):
            try:
                parts = rss_parts_mb(child)
            except OSError:
                continue  # it exited meanwhile
            for key, value in parts.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def tail(self, chars: int = 3000) -> str:
        """The end of the daemon's log."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> Daemon:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (all its threads' children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return found
