"""``cli_start``: what one ``recalld search`` costs an agent that shells out to it.

A real daemon on a small home of real tldr pages; then ``recalld search <query>`` (the console
script, through the daemon) and a bare ``python -c pass`` of the same interpreter, interleaved,
each run as a subprocess; the medians and their ratio. Run alone with
``.venv/bin/python -m bench.cli_start`` (prints the figures, writes no report).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import OUT, SHARED_BENCH, VENV_BIN, Sheet, log, median
from bench.daemonproc import Daemon

HOME = OUT / "cli-start"
RUNS = 20
WARMUP = 2
NOTES = 200  # tldr pages copied into the home's memory folder (bench/out, gitignored)
QUERIES = ("extract a tar archive", "git rebase", "list open ports", "compress a folder")
HEAVY = ("numpy", "apsw", "onnxruntime", "tokenizers", "recalld.config", "argparse")


def _prepare(home: Path) -> None:
    if home.exists():
        shutil.rmtree(home)
    memory = home / "memory"
    memory.mkdir(parents=True)
    pages = sorted((SHARED_BENCH / "tldr" / "corpus" / "common").glob("*.md"))[:NOTES]
    for page in pages:
        shutil.copyfile(page, memory / page.name)
    (home / "config.toml").write_text("[sessions]\npaths = []\n", encoding="utf-8")


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run; CPU time (user + system) barely depends on the load."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - t) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def _heavy_imports(env: dict[str, str]) -> str:
    """Which heavy modules a ``recalld search`` through the daemon imported (in a subprocess)."""
    code = (
        "import contextlib, io, sys\n"
        "from recalld.surfaces.cli_fast import main\n"  # what the console script runs
        "sink = io.StringIO()\n"
        "with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):\n"
        f"    rc = main(['search', {QUERIES[0]!r}])\n"
        f"print(rc, ','.join(m for m in {HEAVY!r} if m in sys.modules) or 'none')\n"
    )
    out = subprocess.run(
        [str(VENV_BIN / "python"), "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    if out[0] != "0":
        raise RuntimeError(f"recalld search exited {out[0]}")
    return out[1]


def run(sheet: Sheet, runs: int = RUNS) -> None:
    """Measure and record ``cli_search_ms``, ``bare_python_ms`` and their ratio."""
    _prepare(HOME)
    with Daemon(HOME) as daemon:
        daemon.wait_idle(timeout=600)
        env = daemon.env()
        recalld = [str(VENV_BIN / "recalld"), "search"]
        bare_cmd = [str(VENV_BIN / "python"), "-c", "pass"]
        cli: list[tuple[float, float]] = []
        bare: list[tuple[float, float]] = []
        for i in range(runs + WARMUP):
            query = QUERIES[i % len(QUERIES)]
            # Alternate which goes first, so neither always follows the other's cache effects.
            pair = [([*recalld, query], cli), (bare_cmd, bare)]
            for cmd, sink in pair if i % 2 else reversed(pair):
                sink.append(_timed(cmd, env))
        cli, bare = cli[WARMUP:], bare[WARMUP:]
        heavy = _heavy_imports(env)
    wall = median([w for w, _ in cli]), median([w for w, _ in bare])
    cpu = median([c for _, c in cli]), median([c for _, c in bare])
    sheet.put("cli_search_ms", wall[0], 1)
    sheet.put("bare_python_ms", wall[1], 1)
    sheet.put("cli_search_vs_bare_python", wall[0] / wall[1], 2)
    sheet.put("cli_search_cpu_ms", cpu[0], 1)
    sheet.put("bare_python_cpu_ms", cpu[1], 1)
    sheet.put("cli_search_heavy_imports", heavy)
    sheet.note(
        "cli_search_ms",
        f"median wall of {runs} `recalld search <query>` runs (the console script, a daemon on "
        f"{NOTES} tldr pages running, 4 queries in turn) vs {runs} `python -c pass` of the same "
        "interpreter, interleaved (order alternating), after "
        f"{WARMUP} warm-up pairs; heavy modules the search imported: {heavy}. CPU time (user + "
        "system, from wait4) of the same runs beside it: the wall times include waiting for a "
        "core on a loaded machine, the CPU times hardly do. The code is byte-compiled, as pip "
        "leaves an installed package (bench/run.py compiles its snapshot)",
    )


def run_part(sheet: Sheet) -> None:
    """:func:`run` as a part of ``make bench``: a failure is recorded, the other parts go on."""
    try:
        run(sheet)
    except Exception as exc:  # noqa: BLE001 - as speed.run_all does for its parts
        log(f"cli_start FAILED: {type(exc).__name__}: {exc}")
        sheet.errors["cli_start"] = f"{type(exc).__name__}: {exc}"
    from bench import hook_start  # the hooks' start-up, beside a bare interpreter as above

    try:
        hook_start.run(sheet)
    except Exception as exc:  # noqa: BLE001 - as above
        log(f"hook_start FAILED: {type(exc).__name__}: {exc}")
        sheet.errors["hook_start"] = f"{type(exc).__name__}: {exc}"


def main() -> int:
    """Run the part alone and print its figures."""
    sheet = Sheet()
    run(sheet)
    for key, value in sheet.metrics.items():
        print(f"{key}: {value}")
    log(sheet.notes["cli_search_ms"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
