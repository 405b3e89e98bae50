"""Shared bits of the bench: locations, sizes, statistics, machine facts and the result sheet."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

# The bench process runs numpy's BLAS on one thread: OpenBLAS workers busy-wait after each call
# and would take the two shared cores from the daemon under test right after every reference
# scan. Daemons get the environment the bench was started with (USER_ENV), unchanged.
USER_ENV = dict(os.environ)
os.environ["OPENBLAS_NUM_THREADS"] = "1"

ROOT = Path(__file__).resolve().parents[1]
SHARED_BENCH = ROOT.parent / "shared" / "bench"
OUT = ROOT / "bench" / "out"
CACHE_DB = OUT / "cache" / "embeddings.sqlite"
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Sizes:
    """How big each part of a run is (``--quick`` shrinks everything)."""

    name: str
    small_chunks: int  # the "10k" search index
    large_chunks: int  # the "100k" search index
    noop_files: int  # files of the no-op resync
    throughput_chunks: int  # fresh chunks embedded by the pipeline (and again raw)
    rss_chunks: int  # fresh chunks a daemon indexes while its RSS is sampled
    queries: int  # timed searches per index
    save_trials: int
    status_calls: int
    import_runs: int
    append_trials: int
    quality_limit: int | None  # queries per quality set (None: all)
    quality_sets: tuple[str, ...]
    pool_limits: dict[str, int | None] = field(default_factory=dict)  # files per real set


FULL = Sizes(
    name="full",
    small_chunks=10_000,
    large_chunks=100_000,
    noop_files=10_000,
    throughput_chunks=640,
    rss_chunks=400,
    queries=200,
    save_trials=7,
    status_calls=1000,
    import_runs=15,
    append_trials=5,
    quality_limit=None,
    quality_sets=("locomo", "scifact-train", "tldr", "cranfield", "cisi", "vault-known-item"),
    pool_limits={"tldr": None, "scifact-train": None, "locomo": None},
)

QUICK = Sizes(
    name="quick",
    small_chunks=1_000,
    large_chunks=5_000,
    noop_files=1_000,
    throughput_chunks=96,
    rss_chunks=64,
    queries=30,
    save_trials=3,
    status_calls=200,
    import_runs=5,
    append_trials=2,
    quality_limit=60,
    quality_sets=("locomo",),
    pool_limits={"tldr": 600, "scifact-train": 200, "locomo": 12},
)


def log(msg: str) -> None:
    """Progress on stderr with a wall-clock stamp."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextmanager
def stage(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Log and time one stage of the run."""
    log(f"{name} ...")
    started = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - started
        timings[name] = round(took, 1)
        log(f"{name} done in {took:.1f} s")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of ``values``; NaN for none."""
    if not 0.0 <= q <= 1.0:  # percentile(v, 50) once reported the maximum as a p50
        raise ValueError(f"percentile takes a fraction in 0..1, got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def median(values: Sequence[float]) -> float:
    """The median (mean of the middle two for an even count)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def timed_ms(fn: Callable[[], object], runs: int, warmup: int = 3) -> list[float]:
    """Wall times of ``runs`` calls of ``fn`` in milliseconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def git_commit() -> str:
    """The checked-out commit (short), marked ``-dirty`` when the tree has changes."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def machine() -> dict[str, Any]:
    """CPU model, cores, RAM, OS and Python of this machine, and its load right now."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb = math.nan
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": ram_gb,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB, from /proc/<pid>/status."""
    parts = rss_parts_mb(pid)
    return parts.get("VmRSS", math.nan), parts.get("VmHWM", math.nan)


def rss_parts_mb(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM and the RssAnon / RssFile / RssShmem split of a process, in MiB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(rest.split()[0]) / 1024
    return out


@dataclass
class Sheet:
    """Everything one run measured: flat metrics (the JSON), notes and extra tables."""

    metrics: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def put(self, key: str, value: Any, digits: int = 3) -> None:
        """Record one metric (floats rounded)."""
        if isinstance(value, float) and math.isfinite(value):
            value = round(value, digits)
        self.metrics[key] = value

    def note(self, key: str, text: str) -> None:
        """A sentence on how a figure was obtained."""
        self.notes[key] = text

    def dump(self, path: Path, meta: dict[str, Any] | None = None) -> None:
        """Write the whole sheet as JSON (for debugging and for ``--only --update`` merges)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "metrics": self.metrics,
            "notes": self.notes,
            "tables": self.tables,
            "errors": self.errors,
            "meta": meta or {},
        }
        path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> tuple[Sheet, dict[str, Any]]:
        """A sheet written by :meth:`dump`, and the run's meta."""
        data = json.loads(path.read_text(encoding="utf-8"))
        sheet = cls(data["metrics"], data["notes"], data["tables"], data.get("errors", {}))
        return sheet, data.get("meta", {})

    def update(self, newer: Sheet, parts: set[str]) -> None:
        """Take ``newer``'s figures (a later run of ``parts``) over this sheet's.

        The run's own keys (commit, date, source hash) stay those of this, the full run: the
        later run is named in the meta's ``updates`` instead.
        """
        own = {"commit", "date", "source_hash"}
        self.metrics.update({k: v for k, v in newer.metrics.items() if k not in own})
        self.notes.update(newer.notes)
        self.tables.update(newer.tables)
        self.errors = {k: v for k, v in self.errors.items() if k not in parts}
        self.errors.update(newer.errors)


_IDLE = frozenset(
    {
        "wait",
        "_wait_for_tstate_lock",
        "get",
        "select",
        "poll",
        "accept",
        "sleep",
        "_worker",
        "run_forever",
        "_run_once",
    }
)


class Sampler:
    """A sampling profiler of this process's Python threads (``sys._current_frames``).

    Cheap enough to run during the timed call itself; idle threads (waiting on a lock or a
    queue) are left out, so the shares are of the samples where a thread was doing work.
    """

    def __init__(self, interval: float = 0.002) -> None:
        self.interval = interval
        self.samples = 0
        self.leaf: Counter[str] = Counter()
        self.cumulative: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        names = {}
        while not self._stop.wait(self.interval):
            names.update({t.ident: t.name for t in threading.enumerate()})
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                stack = self._stack(frame)
                if not stack or stack[-1].split(":")[1] in _IDLE:
                    continue
                self.samples += 1
                thread = str(names.get(ident, ident)).split("_")[0]
                self.leaf[f"[{thread}] {stack[-1]}"] += 1
                for fn in {s.rsplit(":", 1)[0] for s in stack}:
                    self.cumulative[fn] += 1

    @staticmethod
    def _stack(frame: FrameType | None) -> list[str]:
        out = []
        while frame is not None:
            code = frame.f_code
            out.append(f"{Path(code.co_filename).name}:{code.co_name}:{frame.f_lineno}")
            frame = frame.f_back
        return out[::-1]

    def report(self, top: int = 12) -> str:
        """Top functions by own samples (leaf) and by inclusive samples, as text."""
        n = max(self.samples, 1)
        lines = [
            f"{self.samples} busy-thread samples every {self.interval * 1000:.0f} ms",
            "self (leaf frame):",
        ]
        lines += [f"  {c / n:6.1%}  {k}" for k, c in self.leaf.most_common(top)]
        lines.append("inclusive:")
        lines += [f"  {c / n:6.1%}  {k}" for k, c in self.cumulative.most_common(top)]
        return "\n".join(lines)
