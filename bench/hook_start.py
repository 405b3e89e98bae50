"""``hook_start``: what the Claude Code hooks cost a session, through a daemon at 100k chunks.

``recalld hook session-start`` runs before every session starts and ``recalld hook sync`` at
every compaction and session end; both are timed as subprocesses fed the JSON Claude Code sends,
interleaved with a bare ``python -c pass`` of the same interpreter, and reported as medians and
ratios to it. The home: tldr pages concatenated into files of 50 sections (one chunk each)
until the index holds 100k chunks, one planted project note and one transcript in the
project's Claude Code folder (so session-start makes both of its searches). The provider is
``none``: building 100k vectors takes far longer than the part may, and the hook's cost is its
start-up and two round trips (the vector channel's cost at 100k is the large part's
search_p50). Part of ``make bench`` through ``bench/cli_start.py``; alone:
``.venv/bin/python -m bench.hook_start`` (prints the figures, writes no report).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import OUT, SHARED_BENCH, VENV_BIN, Sheet, log, median
from bench.daemonproc import Daemon

HOME = OUT / "hook-start"
TARGET_CHUNKS = 100_000
PER_FILE = 50
RUNS = 20
WARMUP = 2
PROJECT = "/work/heronry"
NOTE = "# heronry\n\nDecision (heronry): the heronry sync keeps 3 retries; see ADR-7.\n"


def _home(user_home: Path) -> None:
    """The recalld home (RECALLD_HOME = user_home/rh) and a user HOME with one transcript
    (kept for the next run while its recipe is the same)."""
    recipe = json.dumps({"chunks": TARGET_CHUNKS, "per_file": PER_FILE, "note": NOTE})
    marker = user_home / "recipe.json"
    if marker.exists() and marker.read_text() == recipe:
        return
    if user_home.exists():
        shutil.rmtree(user_home)
    rh = user_home / "rh"
    memory = rh / "memory"
    memory.mkdir(parents=True)
    from recalld.ingest.chunking import chunk_markdown
    from recalld.tokens import default_tokenizer

    count = default_tokenizer().count
    pages = sorted((SHARED_BENCH / "tldr" / "corpus").glob("*/*.md"))
    chunks, n = 0, 0
    while chunks < TARGET_CHUNKS:  # the chunker's own count: the index ends up near the target
        start = (n * PER_FILE) % len(pages)
        parts = []
        for k in range(PER_FILE):
            page = pages[(start + k) % len(pages)]
            body = page.read_text(encoding="utf-8", errors="replace")[:600]
            parts.append(f"## {page.stem} {n}-{k}\n\n{body}\n")  # varied: no two chunks alike
        text = "\n".join(parts)
        chunks += len(chunk_markdown(text, count, max_tokens=256, target_tokens=240))
        (memory / f"pages-{n:05d}.md").write_text(text, encoding="utf-8")
        n += 1
    (memory / "heronry.md").write_text(NOTE, encoding="utf-8")
    folder = user_home / ".claude" / "projects" / PROJECT.replace("/", "-")
    folder.mkdir(parents=True)
    line = {
        "type": "user",
        "cwd": PROJECT,
        "sessionId": "s1",
        "timestamp": "2026-12-01T10:00Z",
        "message": {"role": "user", "content": "heronry: the nightly export stalled"},
    }
    (folder / "s1.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    marker.write_text(recipe)
    (rh / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[sessions]\npaths = ["~/.claude/projects/**/*.jsonl"]\n',
        encoding="utf-8",
    )


def _timed(cmd: list[str], env: dict[str, str], stdin: Path | None) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run (stdin from a file); a run that failed or said why raises.
    CPU time (user + system, from wait4) hardly depends on the machine's load."""
    t = time.perf_counter()
    with open(stdin or os.devnull, "rb") as f, open(HOME / "stderr.txt", "wb+") as err:
        proc = subprocess.Popen(cmd, env=env, stdin=f, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.perf_counter() - t) * 1000
        err.seek(0)
        said = err.read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or said:
        raise RuntimeError(f"{' '.join(cmd)}: exit {code}, {said[-300:]!r}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def run(sheet: Sheet, runs: int = RUNS) -> None:
    """Measure and record ``hook_session_start_ms_p50``, ``hook_sync_ms_p50`` and their ratios
    to ``hook_bare_python_ms`` measured beside them."""
    started = time.perf_counter()
    _home(HOME)
    user_home = HOME
    with Daemon(HOME / "rh", extra_env={"HOME": str(user_home)}) as daemon:
        status = daemon.wait_idle(timeout=3600)
        chunks = status["counts"]["chunks"]
        log(f"hook_start: {chunks} chunks indexed in {time.perf_counter() - started:.0f} s")
        env = daemon.env()
        start_in, sync_in = _hook_inputs(user_home)
        _check_session_start(env, start_in)
        recalld = str(VENV_BIN / "recalld")
        cmds = {
            "start": ([recalld, "hook", "session-start"], start_in),
            "sync": ([recalld, "hook", "sync"], sync_in),
            "bare": ([str(VENV_BIN / "python"), "-c", "pass"], None),
        }
        times = _interleaved(cmds, env, runs)
    _put(sheet, times, runs, chunks)


def _hook_inputs(user_home: Path) -> tuple[Path, Path]:
    """The JSON Claude Code sends to ``session-start`` and to ``sync``, written to two files."""
    transcript = next((user_home / ".claude" / "projects").glob("*/s1.jsonl"))
    start_in, sync_in = HOME / "start.json", HOME / "sync.json"
    start_in.write_text(
        json.dumps(
            {
                "session_id": "s2",  # a new session in the folder of s1
                "cwd": PROJECT,
                "source": "startup",
                "hook_event_name": "SessionStart",
            }
        )
    )
    sync_in.write_text(
        json.dumps(
            {
                "session_id": "s1",
                "transcript_path": str(transcript),
                "cwd": PROJECT,
                "hook_event_name": "SessionEnd",
            }
        )
    )
    return start_in, sync_in


def _check_session_start(env: dict[str, str], start_in: Path) -> None:
    """Raise unless ``session-start`` brings the planted note and session (both searches ran)."""
    check = subprocess.run(
        [str(VENV_BIN / "recalld"), "hook", "session-start"],
        env=env,
        stdin=start_in.open("rb"),
        capture_output=True,
        check=True,
    )
    context = json.loads(check.stdout)["hookSpecificOutput"]["additionalContext"]
    if "ADR-7" not in context or "s1.jsonl" not in context:
        raise RuntimeError(f"session-start did not bring the planted note and session: {context}")


def _interleaved(
    cmds: dict[str, tuple[list[str], Path | None]], env: dict[str, str], runs: int
) -> dict[str, list[tuple[float, float]]]:
    """(wall ms, CPU ms) of each command, ``WARMUP`` + ``runs`` rounds of all of them."""
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for i in range(runs + WARMUP):
        order = list(cmds) if i % 2 else list(reversed(cmds))  # neither always first
        for key in order:
            cmd, stdin = cmds[key]
            times[key].append(_timed(cmd, env, stdin))
    return times


def _put(sheet: Sheet, times: dict[str, list[tuple[float, float]]], runs: int, chunks: int) -> None:
    """Record the medians after the warm-up rounds, the ratios to the bare interpreter and how."""
    p50 = {k: median([w for w, _ in v[WARMUP:]]) for k, v in times.items()}
    cpu = {k: median([c for _, c in v[WARMUP:]]) for k, v in times.items()}
    sheet.put("hook_session_start_ms_p50", p50["start"], 1)
    sheet.put("hook_sync_ms_p50", p50["sync"], 1)
    sheet.put("hook_bare_python_ms", p50["bare"], 1)
    sheet.put("hook_session_start_vs_bare_python", p50["start"] / p50["bare"], 2)
    sheet.put("hook_sync_vs_bare_python", p50["sync"] / p50["bare"], 2)
    sheet.put("hook_session_start_cpu_ms", cpu["start"], 1)
    sheet.put("hook_sync_cpu_ms", cpu["sync"], 1)
    sheet.put("hook_bare_python_cpu_ms", cpu["bare"], 1)
    sheet.note(
        "hook_session_start_ms_p50",
        f"median wall of {runs} `recalld hook session-start` runs (stdin: Claude Code's "
        f"SessionStart JSON; a daemon at {chunks} chunks, provider none; both searches: notes "
        f"and the project's transcripts), {runs} `recalld hook sync` (SessionEnd JSON, returns "
        f"once the daemon queued the transcript) and {runs} `python -c pass`, interleaved, "
        f"after {WARMUP} warm-up rounds; CPU times (user + system) of the same runs beside them",
    )


def main() -> int:
    """Run the part alone and print its figures."""
    import compileall

    root = Path(__file__).resolve().parents[1]  # byte-compiled, as pip leaves an install
    for folder in ("daemon/recalld", "client/recalld_client"):
        compileall.compile_dir(root / folder, quiet=1)
    sheet = Sheet()
    run(sheet)
    for key, value in sheet.metrics.items():
        print(f"{key}: {value}")
    log(sheet.notes["hook_session_start_ms_p50"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
