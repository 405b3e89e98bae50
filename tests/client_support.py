"""Shared by the test_client_* modules: a real server on a Unix socket in a thread (the
``sock_path`` fixture) whose handlers echo, raise each daemon error, crash, sleep and stream,
and a short temporary folder (the ``tmp`` fixture)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld import errors as daemon_errors
from recalld.serve.server import Handler, Server, ServerThread

RAISES = {
    "bad_request": daemon_errors.BadRequest("empty query"),
    "forbidden": daemon_errors.Forbidden("outside the roots"),
    "not_found": daemon_errors.NotFound("no such file"),
    "config": daemon_errors.ConfigError("bad config"),
    "index": daemon_errors.IndexError_("mixed vector spaces"),
    "provider": daemon_errors.ProviderError("no key"),
    "unavailable": daemon_errors.Unavailable("busy"),
    "internal": daemon_errors.RecalldError("plain base error"),
}


def _raise(params: dict[str, Any]) -> dict[str, Any]:
    raise RAISES[params["code"]]


def _slow(params: dict[str, Any]) -> dict[str, Any]:
    time.sleep(params.get("s", 1.0))
    return {"slept": True}


def _crash(params: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("bug")


HANDLERS: dict[str, Handler] = {
    "search": lambda p: {"params": p},
    "get": lambda p: {"params": p},
    "status": lambda p: {"state": "ready", "pending": 0},
    "sync": lambda p: {"params": p},
    "reindex": lambda p: {"params": p},
    "echo": lambda p: p,
    "raise": _raise,
    "crash": _crash,
    "slow": _slow,
}


async def _watch(params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    for i in range(int(params.get("n", 3))):
        yield {"seq": i, "state": "syncing" if i < 2 else "ready"}
        await asyncio.sleep(0.01)


@pytest.fixture
def tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="rcc"))  # short: AF_UNIX paths max 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sock_path(tmp: Path) -> Iterator[Path]:
    path = tmp / "run" / "recalld.sock"
    with ServerThread(Server(HANDLERS, {"watch": _watch}, path)):
        yield path
