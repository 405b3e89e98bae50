"""The Makefile a new user runs first: it says what it does and how to get ``recalld`` on PATH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECALLD = ROOT / ".venv" / "bin" / "recalld"
KEEP = ["-o", ".venv/.installed"]  # never reinstall from a test: the venv is the one in use


def make(*args: str, path: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=path)
    return subprocess.run(
        ["make", "--no-print-directory", *KEEP, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_first_install_shows_its_steps_and_pips_progress() -> None:
    dry = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"], cwd=ROOT, capture_output=True, text=True
    )
    steps = [line for line in dry.stdout.splitlines() if line.startswith('echo "==> [')]
    assert len(steps) == 3, dry.stdout
    deps = [line for line in dry.stdout.splitlines() if "-r requirements.txt" in line]
    assert deps and " -q" not in deps[0] and "--progress-bar on" in deps[0]


def test_install_says_how_to_put_recalld_on_path_and_link_does_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    system = "/usr/bin:/bin"
    hint = make("install", f"LINK_DIR={bin_dir}", path=system)
    assert hint.returncode == 0, hint.stderr
    assert "make link" in hint.stdout and f"{ROOT}/.venv/bin" in hint.stdout

    linked = make("link", f"LINK_DIR={bin_dir}", path=system)
    assert linked.returncode == 0, linked.stderr
    assert (bin_dir / "recalld").resolve() == RECALLD.resolve()
    assert f"{bin_dir} is not on your PATH" in linked.stdout
    version = subprocess.run(
        [str(bin_dir / "recalld"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.stdout.startswith("recalld ")

    on_path = f"{bin_dir}:{system}"
    quiet = make("install", f"LINK_DIR={bin_dir}", path=on_path)
    assert "make link" not in quiet.stdout  # nothing to advise any more
    assert "on your PATH now" in make("link", f"LINK_DIR={bin_dir}", path=on_path).stdout

    (tmp_path / "other").write_text("#!/bin/sh\n")
    make("unlink", f"LINK_DIR={bin_dir}", path=system)
    assert not (bin_dir / "recalld").exists()
    os.symlink(tmp_path / "other", bin_dir / "recalld")  # someone else's: left alone
    kept = make("unlink", f"LINK_DIR={bin_dir}", path=system)
    assert "left alone" in kept.stdout and (bin_dir / "recalld").is_symlink()
