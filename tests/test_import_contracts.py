"""The stage map covers every part of the package, so that a new module cannot escape it.

``lint-imports`` (make test) checks the contracts of pyproject.toml; a top-level module that no
layer names would be checked by none of them. This test fails until the new module is placed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "daemon" / "recalld"


def _layers() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c["type"] == "layers"]
    return {name.strip() for layer in layered["layers"] for name in layer.split("|")}


def test_every_top_level_module_is_in_a_layer() -> None:
    parts = {
        f"recalld.{p.stem}"
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    missing = sorted(parts - _layers())
    assert not missing, f"place these in the stage map (pyproject.toml, ARCHITECTURE.md): {missing}"


def test_the_stage_map_names_only_real_modules() -> None:
    for name in _layers():
        rel = name.removeprefix("recalld.").replace(".", "/")
        assert (PACKAGE / f"{rel}.py").exists() or (PACKAGE / rel / "__init__.py").exists(), name
