"""Shared fixtures: a private RECALLD_HOME per test and one real local model per session."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.config import Config, Value
from recalld.embedding.registry import ProviderChoice
from recalld.engine import Engine

#: The benchmark data: RECALLD_BENCH, else ../shared/bench beside the checkout. A clone made
#: anywhere else has none: the tests that read it carry ``needs_bench`` and skip, saying so.
BENCH = Path(
    os.environ.get("RECALLD_BENCH") or Path(__file__).resolve().parents[2] / "shared" / "bench"
)


def needs_bench(*parts: str) -> pytest.MarkDecorator:
    """Skip unless ``BENCH / parts`` exists, with the reason (a mark for a test or a module)."""
    path = BENCH.joinpath(*parts)
    return pytest.mark.skipif(
        not path.exists(),
        reason=f"benchmark data {path} not present (../shared/bench beside the checkout, or "
        "RECALLD_BENCH=<folder>)",
    )


@pytest.fixture(scope="session")
def local_embedder() -> object:
    """The real all-MiniLM-L6-v2 int8 model, loaded once."""
    from recalld.embedding.local import LocalEmbedder

    emb = LocalEmbedder()
    emb.warm()
    return emb


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh RECALLD_HOME (short path under /tmp: AF_UNIX paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rcd-", dir="/tmp"))
    monkeypatch.setenv("RECALLD_HOME", str(path))
    monkeypatch.delenv("RECALLD_CONFIG", raising=False)
    (path / "memory").mkdir()
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def make_config(home: Path, **values: Value) -> Config:
    """A config rooted at ``home`` with no transcript globs (tests never read the user's)."""
    base: dict[str, Value] = {"sessions.paths": [], "sync.debounce_s": 0.3}
    base.update({k.replace("__", "."): v for k, v in values.items()})
    return Config(base, base_dir=home)


def make_engine(home: Path, emb: Any, **values: Value) -> Engine:
    """A writable in-process Engine on ``home`` with the given embedder and settings."""
    return Engine(make_config(home, **values), choice=ProviderChoice(emb, "test: local model"))


def linked_vaults(base: Path) -> tuple[Path, Path, Path]:
    """Two folders and a symlink ``notes`` to the first: a memory root re-pointed later."""
    one, two = base / "vault-1", base / "vault-2"
    one.mkdir(exist_ok=True)
    two.mkdir(exist_ok=True)
    link = base / "notes"
    link.symlink_to(one)
    return one, two, link


def write(path: Path, text: str) -> Path:
    """Write a file, creating folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def env_for(home: Path) -> dict[str, str]:
    """Environment of a subprocess using ``home``; ``home`` is its HOME too.

    The default transcript globs (``~/.claude/projects``, ``~/.codex/sessions``) then find
    nothing: a daemon under test indexed the live transcript of whoever ran the suite, and its
    lines, appended during the test, showed up as chunks without vectors (issue 38).
    """
    env = dict(os.environ)
    env["RECALLD_HOME"] = str(home)
    env["HOME"] = str(home)
    env.pop("RECALLD_CONFIG", None)
    return env


def mcp_stdio_params(home: Path) -> Any:
    """The parameters that start ``recalld mcp`` over stdio for ``home`` (the SDK client's)."""
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "recalld.surfaces.cli", "mcp"],
        env={"RECALLD_HOME": str(home)},
    )
