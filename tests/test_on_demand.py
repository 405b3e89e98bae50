"""A daemon started on demand (by ``recalld mcp``) says so and stops once idle; one started by
``recalld serve`` or ``recalld start`` does not stop by itself."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import write
from daemon_process import DaemonProcess, stop_process, wait_for
from recalld.surfaces import mcp_server
from recalld_client import Client, is_running


@pytest.mark.slow
def test_a_daemon_started_by_mcp_is_announced_and_stops_when_idle(home: Path) -> None:
    write(home / "config.toml", "[sessions]\npaths = []\n[daemon]\non_demand_idle_s = 3\n")
    write(home / "memory" / "note.md", "# Note\n\nThe deploy runs on Kubernetes.\n")
    link = mcp_server.DaemonLink(start_timeout=120)  # the shim's own start: spawn_daemon
    link.ensure_running()
    proc_pid = None
    try:
        with Client(home / "run" / "recalld.sock") as client:
            daemon = client.status()["daemon"]
            proc_pid = daemon["pid"]
            assert daemon["started_by"] == "mcp" and daemon["on_demand"] is True
            assert daemon["idle_stop"]["after_s"] == 3.0
            assert daemon["idle_stop"]["key"] == "daemon.on_demand_idle_s"
            stream = client.watch()  # what the tray shows
            assert next(stream)["on_demand"] == "mcp"
            stream.close()
            # Requests keep it alive: a search every 0.3 s for 6 s (twice the limit).
            for _ in range(20):
                client.search("Kubernetes")
                time.sleep(0.3)
        assert is_running(home / "run" / "recalld.sock")
        wait_for(lambda: not is_running(home / "run" / "recalld.sock", timeout=0.5), timeout=60)
        log = (home / "logs" / "daemon.log").read_text(errors="replace")
        assert "started on demand by mcp and idle for" in log
        # A later tool call starts it again.
        assert link.call(lambda c: c.status())["daemon"]["pid"] != proc_pid
    finally:
        link.close()
        if is_running(home / "run" / "recalld.sock"):
            with Client(home / "run" / "recalld.sock") as client:
                client.shutdown()


@pytest.mark.slow
def test_a_daemon_started_by_hand_keeps_running_when_idle(home: Path) -> None:
    write(home / "config.toml", "[sessions]\npaths = []\n[daemon]\non_demand_idle_s = 0.5\n")
    daemon = DaemonProcess(home).start(timeout=120)
    try:
        with daemon.client() as client:
            status = client.status()["daemon"]
            assert status["started_by"] == "serve" and status["on_demand"] is False
            assert "idle_stop" not in status
        time.sleep(3)
        assert daemon.proc is not None and daemon.proc.poll() is None
    finally:
        assert daemon.proc is not None
        stop_process(daemon.proc)


def test_status_says_no_config_file_rather_than_loaded(home: Path) -> None:
    from recalld.surfaces.overview import status_head

    daemon = DaemonProcess(home, env={"HOME": str(home)}).start(timeout=120)
    try:
        with daemon.client() as client:
            status = client.status()
        assert status["config"]["exists"] is False
        line = next(x for x in status_head(status) if x.startswith("config:"))
        assert "no file: the defaults" in line and "loaded" not in line
        write(home / "config.toml", "[sync]\ndebounce_s = 0.4\n")
        with daemon.client() as client:
            wait_for(lambda: client.status()["config"]["exists"] is True, timeout=30)
            line = next(x for x in status_head(client.status()) if x.startswith("config:"))
        assert "loaded" in line and "no file" not in line
    finally:
        assert daemon.proc is not None
        stop_process(daemon.proc)
