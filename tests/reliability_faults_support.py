"""Shared by the test_reliability_faults_* modules: real tmpfs mounts, a daemon's config
over given memory folders, the file names an answer holds, and a file's hash in the index."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from recalld.index.store import Store


def mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(
            f"CHECK NOT RUN (counts as a defect): cannot mount a tmpfs at {where} "
            f"({done.stderr.strip()}); this scenario needs root or CAP_SYS_ADMIN"
        )


def umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def memory_config(home: Path, roots: list[Path], extra: str = "") -> None:
    listed = ", ".join(f'"{r}"' for r in roots)
    (home / "config.toml").write_text(
        f"[memory]\npaths = [{listed}]\n[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n{extra}"
    )


def names(res: Any) -> list[str]:
    return [Path(r["path"]).name for r in res["results"]]


def indexed_hash(index: Path, path: Path) -> str | None:
    store = Store(index, readonly=True)
    try:
        row = store.file(str(path))
        return row.hash if row else None
    finally:
        store.close()
