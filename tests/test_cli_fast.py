"""The fast path of ``recalld search|get|status``: a real daemon, real subprocesses.

The fast path (recalld.surfaces.cli_fast) must print exactly what the full CLI prints through the
same daemon, exit with the same codes, and import no heavy module.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import env_for, write
from daemon_process import DaemonProcess
from recalld.surfaces.cli import _parser
from recalld.surfaces.cli_fast import parse

HEAVY = ("numpy", "apsw", "onnxruntime", "tokenizers", "recalld.config", "recalld.engine")

# Runs the console script's entry and reports, on a file, the heavy modules it imported.
FAST = f"""
import sys
from recalld.surfaces.cli_fast import main
try:
    rc = main(sys.argv[2:])
finally:
    sys.stdout.flush()
    loaded = [m for m in {HEAVY!r} if m in sys.modules]
    open(sys.argv[1], "w").write(" ".join(loaded) + ("|full" if "argparse" in sys.modules else ""))
sys.exit(rc)
"""
# Standard modules a plain search or get does without (each costs ms of `recalld search`
# start-up): the script reports those it imported that were not loaded before it began.
SLOW_STDLIB = ("typing", "json", "socket", "threading", "argparse")
LEAN = f"""
import sys
before = set(sys.modules)
from recalld.surfaces.cli_fast import main
try:
    rc = main(sys.argv[2:])
finally:
    sys.stdout.flush()
    loaded = [m for m in {SLOW_STDLIB!r} if m in sys.modules and m not in before]
    open(sys.argv[1], "w").write(" ".join(loaded))
sys.exit(rc)
"""
FULL = "import sys\nfrom recalld.surfaces.cli import full_main\nsys.exit(full_main(sys.argv[1:]))\n"

# What differs between two calls on its own: the daemon's timings, uptime and rates.
VARYING = re.compile(r"(up | · )[0-9.]+")
VOLATILE = {"took_ms", "uptime_s", "elapsed_s", "files_per_s", "chunks_per_s", "eta_s"}


def _run(
    home: Path, code: str, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def fast(
    home: Path, *args: str, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], str]:
    """The fast entry in a subprocess, and what it imported ('|full': it fell back)."""
    report = home / "modules.txt"
    proc = _run(home, FAST, str(report), *args, cwd=cwd)
    return proc, report.read_text()


def full(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return _run(home, FULL, *args, cwd=cwd)


def _steady(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _steady(v) for k, v in obj.items() if k not in VOLATILE}
    return [_steady(v) for v in obj] if isinstance(obj, list) else obj


def same(a: str, b: str) -> bool:
    """Equal outputs, but for what changes between any two calls."""
    if a.startswith("{"):
        return _steady(json.loads(a)) == _steady(json.loads(b))
    return VARYING.sub(r"\1N", a) == VARYING.sub(r"\1N", b)


@pytest.fixture
def daemon(home: Path) -> Iterator[DaemonProcess]:
    (home / "config.toml").write_text("[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n")
    write(
        home / "memory" / "decisions.md",
        "# Decisions\n\n## Storage\n\nWe chose SQLite with sqlite-vec over Postgres because the\n"
        "daemon must run on a laptop. Decided by Priya after the latency benchmark.\n",
    )
    write(home / "memory" / "people.md", "# People\n\nMarek prefers reviews in the morning.\n")
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        yield d
    finally:
        d.stop()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fast_path_prints_what_the_full_cli_prints(home: Path, daemon: DaemonProcess) -> None:
    note = home / "memory" / "decisions.md"
    cases = [
        ("search", "why", "sqlite-vec"),
        ("search", "sqlite", "--json"),
        ("search", "--mode", "keyword", "Marek", "reviews", "--max=1"),
        ("search", "sqlite", "--explain", "--source", "memory", "--kind", "note"),
        ("search", "latency", "benchmark", "--max-tokens", "100", "--min-score", "0.1"),
        ("search", "Priya", "--path-prefix", str(home / "memory")),
        ("get", f"{note}#L3-L5"),
        ("get", f"{note}:5", "--json"),
        ("status",),
        ("status", "--json"),
    ]
    for args in cases:
        got, modules = fast(home, *args)
        want = full(home, *args)
        assert got.returncode == want.returncode == 0, (args, got.stderr, want.stderr)
        assert modules == "", (args, modules)  # neither heavy modules nor argparse
        assert got.stdout and same(got.stdout, want.stdout), (args, got.stdout, want.stdout)
        assert same(got.stderr, want.stderr), (args, got.stderr, want.stderr)
    hits = json.loads(fast(home, "search", "sqlite", "--json")[0].stdout)["results"]
    assert hits[0]["path"] == str(note)
    # The console script itself enters through the fast path.
    script = Path(sys.executable).parent / "recalld"
    proc = subprocess.run(
        [str(script), "get", f"{note}:3"], env=env_for(home), capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("## Storage\n"), proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_plain_search_or_get_imports_no_slow_standard_module(
    home: Path, daemon: DaemonProcess
) -> None:
    note = home / "memory" / "decisions.md"
    report = home / "lean.txt"
    for args in (("search", "why", "sqlite-vec"), ("get", f"{note}#L3-L5")):
        proc = _run(home, LEAN, str(report), *args)
        assert proc.returncode == 0 and proc.stdout, (args, proc.stderr)
        assert report.read_text() == "", args
    # The check sees them: --json needs json.
    assert _run(home, LEAN, str(report), "search", "sqlite", "--json").returncode == 0
    assert report.read_text() == "json"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fast_path_errors_have_the_full_cli_exit_codes(home: Path, daemon: DaemonProcess) -> None:
    cases = [
        (("get", str(home / "memory" / "missing.md")), 3),
        (("get", "/etc/passwd"), 2),
        (("get", f"{home / 'memory' / 'people.md'}:99"), 3),
        (("search", " "), 2),
        (("search", "x", "--max-tokens", "5"), 2),
    ]
    for args, code in cases:
        got, modules = fast(home, *args)
        want = full(home, *args)
        assert got.returncode == want.returncode == code, (args, got.stderr, want.stderr)
        assert got.stderr == want.stderr and got.stderr.startswith("recalld: "), args
        assert "Traceback" not in got.stderr
        assert modules == "", (args, modules)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_what_the_fast_path_cannot_judge_goes_to_the_full_cli(
    home: Path, daemon: DaemonProcess
) -> None:
    help_, modules = fast(home, "search", "--help")
    assert help_.returncode == 0 and "--path-prefix FOLDER" in help_.stdout
    assert modules.endswith("|full")
    bad, modules = fast(home, "search", "x", "--mode", "fuzzy")
    assert bad.returncode == 2 and "invalid choice: 'fuzzy'" in bad.stderr
    assert modules.endswith("|full")
    for value in ("0", "-1", "1001"):  # the flag named, not the wire's max_results
        bad, modules = fast(home, "search", "x", "--max", value)
        assert bad.returncode == 2 and "argument --max: must be an integer from 1 to" in bad.stderr
        assert modules.endswith("|full")
    abbreviated, modules = fast(home, "search", "sqlite", "--js")  # argparse's prefix matching
    assert abbreviated.returncode == 0 and json.loads(abbreviated.stdout)["results"]
    assert modules.endswith("|full")
    daemon.stop()
    local, modules = fast(home, "search", "sqlite", "--json")  # no daemon: in-process
    assert local.returncode == 0 and json.loads(local.stdout)["results"]
    assert "apsw" in modules and modules.endswith("|full")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_path_typed_relative_to_the_shells_folder_is_read_there(
    home: Path, daemon: DaemonProcess
) -> None:
    """Relative paths are read under the memory folders (as results cite them); one that is
    not there but names a file in the folder the command runs in is read there (the daemon
    does not know that folder): get, through the fast path, the full CLI and in-process, and
    forget."""
    here = home  # memory/ is a subfolder: "memory/people.md" is not under the memory folder
    for args in (("get", "memory/people.md:3"), ("get", "memory/people.md#L3-L3", "--json")):
        got, modules = fast(home, *args, cwd=here)
        want = full(home, *args, cwd=here)
        assert got.returncode == want.returncode == 0, (args, got.stderr, want.stderr)
        assert "Marek prefers reviews" in got.stdout and same(got.stdout, want.stdout), args
        assert modules == "", modules
    by_root, _ = fast(home, "get", "people.md:3", cwd=here)  # the memory folder's rule first
    assert by_root.returncode == 0 and "Marek" in by_root.stdout, by_root.stderr
    (home / "outside.md").write_text("# Not a note of recalld's\n")
    outside, _ = fast(home, "get", "outside.md", cwd=here)  # here, but outside the roots
    assert outside.returncode == 2 and str(home / "outside.md") in outside.stderr
    missing, _ = fast(home, "get", "memory/nope.md", cwd=here)
    assert missing.returncode == 3 and "memory/memory/nope.md" in missing.stderr
    forgot = full(home, "forget", "memory/people.md", "--json", cwd=here)
    assert forgot.returncode == 0, forgot.stderr
    assert str(home / "memory" / "people.md") in forgot.stdout
    assert full(home, "forget", "memory/people.md", "--undo", cwd=here).returncode == 0
    daemon.stop()
    local = full(home, "get", "memory/people.md:3", cwd=here)  # no daemon: in-process
    assert local.returncode == 0 and "Marek prefers reviews" in local.stdout, local.stderr


ARGVS = [
    ["search", "a", "b"],
    ["search", "--json", "a"],
    ["search", "a", "--max", "3", "--min-score", "0.2", "--json"],
    ["search", "a", "--max=3", "--min-score=.5"],
    ["search", "a", "--source", "memory", "--source", "sessions", "--kind", "note"],
    ["search", "a", "--kind=tool_call", "--mode=vector", "--explain", "--max-tokens", "200"],
    ["search", "a", "--path-prefix", "notes/x", "--path-prefix=", "--mode", "keyword"],
    ["search", "a", "--max", "1", "--max", "2"],
    ["search", "-", "a"],
    ["get", "notes/a.md#L1-L2", "--decoded", "--json"],
    ["get", "--json", "a.md:3"],
    ["status"],
    ["status", "--json"],
]
REFUSED = [
    [],
    ["--config", "x.toml", "search", "a"],
    ["-v", "status"],
    ["sync"],
    ["search"],
    ["search", "a", "--json", "b"],
    ["search", "a", "--max", "three"],
    ["search", "a", "--max", "-3"],
    ["search", "a", "--source", "web"],
    ["search", "a", "--json=1"],
    ["search", "a", "--help"],
    ["search", "a", "--", "-b"],
    ["search", "-b"],
    ["search", "a", "--max"],
    ["get"],
    ["get", "a", "b"],
    ["status", "x"],
    ["status", "--watch"],
    ["status", "--js"],
]


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_parse_agrees_with_the_full_parser(argv: list[str]) -> None:
    opts = parse(argv)
    assert opts is not None
    args = vars(_parser().parse_args(argv))
    assert opts["command"] == args["command"] and opts["json"] == args["json"]
    if argv[0] == "search":
        assert opts["query"] == " ".join(args["query"])
        for name in ("max_results", "min_score", "sources", "path_prefix", "kinds", "max_tokens"):
            assert opts.get(name) == args[name], name
        assert opts.get("mode", "hybrid") == args["mode"]
        assert opts.get("explain", False) == args["explain"]
    if argv[0] == "get":
        assert opts["target"] == args["target"]
        assert opts.get("decoded", False) == args["decoded"]


@pytest.mark.parametrize("argv", REFUSED, ids=lambda a: " ".join(a) or "(none)")
def test_parse_leaves_the_rest_to_the_full_parser(argv: list[str]) -> None:
    assert parse(argv) is None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_daemon_that_does_not_answer_is_asked_once(home: Path) -> None:
    """A hung daemon (its socket accepts, nothing answers): one 1 s hello, then in-process."""
    import socket
    import threading

    (home / "config.toml").write_text('[sessions]\npaths = []\n[embedding]\nprovider = "none"\n')
    write(home / "memory" / "plan.md", "# Plan\n\nShip the recalld beta on Friday.\n")
    assert full(home, "sync").returncode == 0
    (home / "run").mkdir(mode=0o700, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(home / "run" / "recalld.sock"))
    listener.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])  # held open, never answered
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        proc, modules = fast(home, "search", "beta", "--json")
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"][0]["path"] == str(home / "memory" / "plan.md")
    assert modules.endswith("|full")  # answered in-process
    assert len(accepted) == 1  # the full CLI did not wait for a second hello
