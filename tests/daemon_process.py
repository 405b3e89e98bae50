"""A real ``recalld serve`` subprocess for end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import env_for
from recalld_client import Client, is_running


class DaemonProcess:
    """Starts, waits for, and stops a daemon for one RECALLD_HOME."""

    def __init__(
        self,
        home: Path,
        *,
        env: dict[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
        log: Path | None = None,
    ) -> None:
        self.home = home
        self.socket = home / "run" / "recalld.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = log or home / "daemon.log"
        self.env = env or {}  # added to the home's environment
        self.preexec_fn = preexec_fn  # e.g. dropping capabilities (async-signal-safe calls only)

    def start(self, timeout: float = 60.0) -> DaemonProcess:
        env = env_for(self.home)
        env.update(self.env)
        with self.log.open("ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "recalld.surfaces.cli", "serve"],
                env=env,
                stdout=logf,
                stderr=subprocess.STDOUT,
                preexec_fn=self.preexec_fn,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log_tail()}")
            if is_running(self.socket, timeout=0.5):
                return self
            time.sleep(0.02)
        raise TimeoutError(f"daemon did not start: {self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the daemon's log (for assertion messages)."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def client(self, **kw: Any) -> Client:
        return Client(self.socket, **kw)

    def wait_idle(self, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the daemon has nothing pending and is idle."""
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while time.monotonic() < deadline:
                st = c.status()
                if st["state"] == "idle" and st["daemon"]["pending"] == 0 and st["last_sync"]:
                    return dict(st)
                time.sleep(0.1)
        raise TimeoutError("daemon did not become idle")

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, up to 20 s to exit, then SIGKILL (nothing when it has exited already)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def wait_for(pred: Callable[[], bool], timeout: float = 30.0, step: float = 0.05) -> float:
    """Poll until ``pred()``; returns the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if pred():
            return time.monotonic() - start
        time.sleep(step)
    raise TimeoutError("condition not met")
