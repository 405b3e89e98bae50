"""Installing recalld like a tool: runtime dependencies only, and a wheel that runs on its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEV_TOOLS = ("pytest", "mypy", "ruff", "hypothesis", "onnx==")


def _pins(name: str) -> list[str]:
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith(("#", "-r"))]


def test_make_run_installs_the_runtime_pins_only_and_make_test_the_tools() -> None:
    runtime = _pins("requirements.txt")
    assert runtime and all("==" in pin for pin in runtime)
    assert not [p for p in runtime if p.lower().startswith(DEV_TOOLS)]
    dev = _pins("requirements-dev.txt")
    assert any(p.startswith("pytest==") for p in dev) and any(p.startswith("mypy==") for p in dev)

    def recipe(target: str) -> str:
        done = subprocess.run(
            ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run = recipe("run")
    assert "--no-deps -r requirements.txt" in run and "requirements-dev.txt" not in run
    assert "-r requirements-dev.txt" in recipe("test")


@pytest.mark.slow
def test_a_wheel_of_the_checkout_installs_and_searches_without_the_checkout(
    tmp_path: Path,
) -> None:
    # Built from a copy: a build writes build/ and *.egg-info beside the sources.
    src = tmp_path / "src"
    for part in ("daemon", "client"):
        shutil.copytree(
            ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(wheels), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("recalld-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "recalld/data/vocab.txt" in names and "recalld_client/client.py" in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Requires-Dist: recalld-client" not in requires  # not on PyPI: it ships inside

    target = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    home = tmp_path / "home"
    notes = home / "notes"
    notes.mkdir(parents=True)
    (notes / "deploy.md").write_text("# Deploy\n\nWe run Kubernetes for orchestration.\n")
    (home / "config.toml").write_text(f'[memory]\npaths = ["{notes}"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALLD_", "PYTHONPATH"))}
    env.update(PYTHONPATH=str(target), RECALLD_HOME=str(home), HOME=str(home))
    elsewhere = tmp_path  # not the checkout: nothing may be found through the working folder

    def recalld(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "recalld", *args],
            cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    where = subprocess.run(
        [sys.executable, "-c", "import recalld, recalld_client; print(recalld.__file__, "
         "recalld_client.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert where.stdout.count(str(target)) == 2, where.stdout + where.stderr
    synced = recalld("sync", "--json")
    assert synced.returncode == 0, synced.stderr
    found = recalld("search", "orchestration", "--json")
    assert found.returncode == 0, found.stderr
    answer = json.loads(found.stdout)
    # The local model and its vocabulary came from the installed package data.
    assert answer["provider"] == "local/all-MiniLM-L6-v2" and not answer["degraded"]
    assert answer["results"][0]["path"].endswith("deploy.md")
