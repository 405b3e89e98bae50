"""A daemon that serves another home is refused by every client path (issue: two HOMEs, one socket).

Without XDG_RUNTIME_DIR the socket is the uid's fallback, shared by every HOME: a client of the
second home searched (and wrote into) the first home's notes. Two RECALLD_HOMEs cannot show it
(RECALLD_HOME moves the socket), so these tests point two configs at one socket: one
RECALLD_HOME, RECALLD_CONFIG a.toml for the daemon and b.toml for the client.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess
from recalld.serve.server import Server, ServerThread
from recalld.surfaces.mcp_daemon_link import DaemonLink
from recalld_client import Client, WrongDaemon, is_running
from recalld_client.transport import UnixTransport

pytestmark = pytest.mark.timeout(120)

FAST = "import sys\nfrom recalld.surfaces.cli_fast import main\nsys.exit(main(sys.argv[1:]))\n"


def _config(home: Path, name: str, notes: str) -> Path:
    return write(
        home / name,
        f'[sessions]\npaths = []\n[memory]\npaths = ["{home / notes}"]\n[sync]\ndebounce_s = 0.3\n',
    )


@pytest.fixture
def daemon_a(home: Path) -> Iterator[DaemonProcess]:
    """A daemon serving a.toml (notes-a: okapi); b.toml (notes-b: pangolin) shares its socket."""
    write(home / "notes-a" / "a.md", "# A\n\nThe okapi lives in home A.\n")
    write(home / "notes-b" / "b.md", "# B\n\nThe pangolin lives in home B.\n")
    _config(home, "b.toml", "notes-b")
    d = DaemonProcess(home, env={"RECALLD_CONFIG": str(_config(home, "a.toml", "notes-a"))})
    d.start()
    try:
        d.wait_idle()
        yield d
    finally:
        d.stop()


def _recalld(
    home: Path, *args: str, config: str | None = "b.toml"
) -> subprocess.CompletedProcess[str]:
    """The console script's entry (the fast path first) in a client of config ``config``."""
    env = env_for(home)
    if config is not None:
        env["RECALLD_CONFIG"] = str(home / config)
    return subprocess.run(
        [sys.executable, "-c", FAST, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _refused(proc: subprocess.CompletedProcess[str], home: Path) -> None:
    assert proc.returncode == 5, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr
    assert "serves another home" in err, err
    assert f"config {home / 'a.toml'}" in err, err  # which config that daemon serves
    assert "RECALLD_HOME" in err and "XDG_RUNTIME_DIR" in err, err  # what to do
    assert "okapi" not in proc.stdout


def test_the_cli_refuses_a_daemon_of_another_config(daemon_a: DaemonProcess, home: Path) -> None:
    _refused(_recalld(home, "search", "okapi"), home)  # the fast path
    _refused(_recalld(home, "status"), home)
    _refused(_recalld(home, "sync", "--wait"), home)  # the full CLI
    _refused(_recalld(home, "remember", "a pangolin fact"), home)  # the full CLI, a write
    _refused(_recalld(home, "--config", str(home / "b.toml"), "search", "okapi", config=None), home)
    started = _recalld(home, "start")
    _refused(started, home)
    assert "already running" not in started.stdout
    stopped = _recalld(home, "stop")
    assert stopped.returncode != 0 and "serves another home" in stopped.stderr
    assert daemon_a.proc is not None and daemon_a.proc.poll() is None  # not stopped by b's stop
    # Nothing was written into either home's notes.
    assert sorted(p.name for p in (home / "notes-a").rglob("*.md")) == ["a.md"]
    assert sorted(p.name for p in (home / "notes-b").rglob("*.md")) == ["b.md"]
    # The daemon's own config is served as before, through both paths.
    ok = _recalld(home, "search", "okapi", "--mode", "keyword", config="a.toml")
    assert ok.returncode == 0 and "okapi" in ok.stdout, ok.stderr
    full = _recalld(home, "--config", str(home / "a.toml"), "search", "okapi", config=None)
    assert full.returncode == 0 and "okapi" in full.stdout, full.stderr


def test_the_library_and_the_mcp_link_refuse_it(
    daemon_a: DaemonProcess, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECALLD_CONFIG", str(home / "b.toml"))
    assert is_running()  # something answers at the socket: only it is not this home's
    with Client() as c, pytest.raises(WrongDaemon, match="serves another home"):
        c.search("okapi")
    with Client() as c, pytest.raises(WrongDaemon):
        next(iter(c.watch()))
    link = DaemonLink(spawn=lambda log: pytest.fail("no daemon may be started"))
    try:
        with pytest.raises(WrongDaemon):
            link.call(lambda c: c.remember("a pangolin fact"))
    finally:
        link.close()
    with Client(daemon_a.socket, config=home / "b.toml") as c, pytest.raises(WrongDaemon):
        c.status()
    monkeypatch.setenv("RECALLD_CONFIG", str(home / "a.toml"))
    with Client() as c:
        assert c.hello()["config"] == str(home / "a.toml")
        assert c.hello()["data_dir"] == str(home)
        hits = c.search("okapi", mode="keyword")["results"]
        assert hits and "notes-a" in hits[0]["path"]


SENT: list[bytes] = []  # the frames the client sent, across its connections


class _Counting(UnixTransport):
    def send(self, data: bytes) -> None:
        SENT.append(data)
        super().send(data)


def test_the_check_rides_on_the_first_hello(home: Path) -> None:
    """No round trip is added where the connection's first request is a hello (the CLI's)."""
    path = home / "run" / "recalld.sock"
    identity = {"config": str(home / "config.toml"), "data_dir": str(home)}
    handlers = {"search": lambda p: {"results": []}}
    with ServerThread(Server(handlers, {}, path, identity=identity)):
        SENT.clear()
        with Client(transport_factory=lambda: _Counting(path)) as c:
            c.hello()
            c.search("x")
            c.search("y")
        assert len(SENT) == 3  # hello, search, search: nothing more
        SENT.clear()
        with Client(transport_factory=lambda: _Counting(path)) as c:
            c.search("x")
            c.search("y")
        assert len(SENT) == 3  # one hello where the connection starts
        SENT.clear()
        with Client(path, transport_factory=lambda: _Counting(path)) as c:
            c.search("x")  # an explicit socket: the caller chose the daemon, nothing checked
        assert len(SENT) == 1


@pytest.mark.parametrize(
    "env",
    [
        {"HOME": "/tmp/walk-home2"},
        {"HOME": "/tmp/walk-home2", "XDG_CONFIG_HOME": "/tmp/xc", "XDG_DATA_HOME": "/tmp/xd"},
        {"HOME": "/tmp/walk-home2", "XDG_CONFIG_HOME": "rel", "XDG_DATA_HOME": ""},
    ],
)
def test_the_quick_paths_are_platformdirs_own(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check's paths without platformdirs (8.5 ms of start-up) are the ones it gives."""
    from recalld_client import locations

    for name in ("RECALLD_HOME", "RECALLD_CONFIG", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert locations.config_path_hint() == locations.config_path()
    assert locations.data_dir_hint() == locations.data_dir()
