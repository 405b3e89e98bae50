"""Shared by the test_retrieval_* modules: notes full of code identifiers, an engine
synced over them (the ``code_engine`` fixture), and the result paths of an answer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conftest import make_engine, write

CODE_NOTES = {
    "net/errors.md": "# Network errors\n\nThe proxy logs ERR_CONN_RESET when the upstream drops "
    "the socket mid-request.\n",
    "net/retry.md": "# Retry policy\n\nWe call connection_reset() and back off exponentially "
    "before retrying.\n",
    "web/hooks.md": "# React notes\n\nState lives in useState; effects in useEffect.\n",
    "src/layout.md": "# Layout\n\nThe entry point is daemon/recalld/search_pipeline.py and the "
    "tests sit next to it.\n",
    "misc/weather.md": "# Weather\n\nIt rained all week in Lisbon; the reset of the garden "
    "waits for spring.\n",
}


def paths_of(res: dict[str, Any], home: Path) -> list[str]:
    return [os.path.relpath(r["path"], home / "memory") for r in res["results"]]


@pytest.fixture
def code_engine(home: Path, local_embedder: Any) -> Any:
    for rel, text in CODE_NOTES.items():
        write(home / "memory" / rel, text)
    eng = make_engine(home, local_embedder)
    eng.sync()
    yield eng
    eng.close()
