"""``recalld mcp``'s link to the daemon: a client that starts the daemon when none answers."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from recalld import paths
from recalld.surfaces.mcp_arguments import ToolError

# The MCP server's logger: what the shim says is read in one place.
log = logging.getLogger("recalld.surfaces.mcp_server")

START_TIMEOUT_S = 60.0

T = TypeVar("T")


class DaemonLink:
    """A client of this home's daemon that starts the daemon when nothing answers."""

    def __init__(
        self,
        *,
        start_timeout: float = START_TIMEOUT_S,
        spawn: Callable[[Path], subprocess.Popen[bytes]] | None = None,
    ) -> None:
        from recalld_client import Client

        self.socket = paths.socket_path()
        # check_home: another home's daemon at this socket is refused (WrongDaemon), not written to.
        self.client = Client(self.socket, timeout=60.0, check_home=True)
        self.start_timeout = start_timeout
        self.log_path = paths.log_dir() / "daemon.log"
        self._spawn = spawn or spawn_daemon
        self._lock = threading.Lock()

    def call(self, fn: Callable[[Any], T]) -> T:
        """``fn(client)``, starting the daemon first if it is not running (once per call)."""
        from recalld_client import ConnectionLost, DaemonNotRunning

        try:
            return fn(self.client)
        except (DaemonNotRunning, ConnectionLost):
            self.ensure_running()
            return fn(self.client)

    def ensure_running(self) -> None:
        """Start the daemon unless one answers; wait until it does (or raise ToolError)."""
        from recalld_client import is_running

        with self._lock:  # concurrent tool calls must not start two daemons
            if is_running(self.socket, timeout=1.0):
                return
            log.info("no recalld daemon at %s: starting one (log: %s)", self.socket, self.log_path)
            proc = self._spawn(self.log_path)
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline:
                if is_running(self.socket, timeout=1.0):
                    return
                if proc.poll() is not None and not is_running(self.socket, timeout=1.0):
                    raise ToolError(
                        f"the recalld daemon exited with code {proc.returncode} while starting: "
                        f"{self._log_tail()} (full log: {self.log_path})"
                    )
                time.sleep(0.1)
            raise ToolError(
                f"the recalld daemon did not start within {self.start_timeout:.0f} s "
                f"(log: {self.log_path}); run `recalld serve` to see why"
            )

    def _log_tail(self, lines: int = 5) -> str:
        from recalld.ingest.redactor import redact  # lines written before the log was scrubbed

        try:
            with self.log_path.open("rb") as fh:
                fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65_536))  # a key's block is in there whole
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return "no log written"
        tail = [line for line in redact(text, "served")[0].splitlines() if line.strip()]
        return " | ".join(tail[-lines:]) or "empty log"

    def close(self) -> None:
        """Close the connection (the daemon keeps running for other tools)."""
        self.client.close()


def spawn_daemon(log_path: Path) -> subprocess.Popen[bytes]:
    """``recalld serve`` detached, marked as started on demand (it stops when long idle)."""
    from recalld.surfaces.daemon_spawn import spawn_daemon as spawn

    return spawn(log_path, "mcp")
