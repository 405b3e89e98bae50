"""The real agent CLIs from npm, pinned, installed once into a cache outside the repo.

``~/.cache/recalld-test-agents/<pins>/node_modules/.bin`` holds ``claude``, ``codex`` and
``gemini``; a second run finds them there. Where npm or node is missing, or the registry cannot
be reached, the tests that need them are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PINS = {
    "@anthropic-ai/claude-code": "2.1.328",
    "@openai/codex": "0.169.0",
    "@google/gemini-cli": "0.61.0",
}
BINS = ("claude", "codex", "gemini")
INSTALL_TIMEOUT_S = 900


def cache_dir() -> Path:
    key = "-".join(f"{name.rsplit('/', 1)[-1]}{version}" for name, version in PINS.items())
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "recalld-test-agents" / key


def install() -> tuple[Path | None, str]:
    """(the folder of the agents' executables, "") or (None, why they are not available)."""
    folder = cache_dir()
    bin_dir = folder / "node_modules" / ".bin"
    if all((bin_dir / b).exists() for b in BINS):
        return bin_dir, ""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return None, "node/npm not installed: the real agent CLIs cannot be installed"
    folder.mkdir(parents=True, exist_ok=True)
    argv = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder)]
    try:
        proc = subprocess.run(
            [*argv, *(f"{n}@{v}" for n, v in PINS.items())],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, f"npm install did not finish in {INSTALL_TIMEOUT_S} s (registry unreachable?)"
    if proc.returncode != 0 or not all((bin_dir / b).exists() for b in BINS):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"npm install of the agent CLIs failed (registry unreachable?): {tail[0]}"
    return bin_dir, ""
