"""The client's calls against a real server on a Unix socket: the pinned public API, a
light import, each method's params, and daemon errors raised as the client's classes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import recalld_client
from client_support import RAISES
from client_support import sock_path as sock_path  # a fixture
from client_support import tmp as tmp  # a fixture
from recalld_client import Client, errors

pytestmark = pytest.mark.timeout(60)


def test_public_api_is_pinned() -> None:
    assert sorted(recalld_client.__all__) == sorted(
        [
            "PROTOCOL_VERSION",
            "BadRequest",
            "Client",
            "ConfigError",
            "ConnectionLost",
            "DaemonNotRunning",
            "Forbidden",
            "FrameTooLarge",
            "GetResponse",
            "Hello",
            "IndexInfo",
            "IndexUnavailable",
            "InternalError",
            "NotFound",
            "ProtocolError",
            "ProviderError",
            "RecalldClientError",
            "Scores",
            "SearchResponse",
            "SearchResult",
            "StatusResponse",
            "Timeout",
            "TooLarge",
            "TooManyConnections",
            "Unavailable",
            "VersionMismatch",
            "WrongDaemon",
            "is_running",
        ]
    )
    for name in recalld_client.__all__:
        assert getattr(recalld_client, name) is not None


def test_import_is_light() -> None:
    code = (
        "import sys, recalld_client\n"
        "heavy = {'numpy', 'onnxruntime', 'apsw', 'watchdog', 'httpx', 'recalld', 'asyncio'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_hello_and_methods(sock_path: Path) -> None:
    with Client(sock_path) as c:
        hello = c.hello()
        assert hello["protocol"] == recalld_client.PROTOCOL_VERSION
        assert hello["pid"] == os.getpid()
        assert {"search", "get", "watch", "shutdown"} <= set(hello["capabilities"])
        assert c.status() == {"state": "ready", "pending": 0}
        assert c.sync() == {"params": {"wait": False}}
        assert c.reindex(wait=True) == {"params": {"wait": True}}
        assert c.call("echo", {"x": [1, b"\x00"]}) == {"x": [1, b"\x00"]}


def test_search_and_get_omit_unset_params(sock_path: Path) -> None:
    with Client(sock_path) as c:
        assert c.search("q") == {"params": {"query": "q"}}  # type: ignore[comparison-overlap]
        res: Any = c.search(
            "E1234",
            max_results=3,
            min_score=0.2,
            sources="memory",
            path_prefix="p/",
            mode="keyword",
        )
        assert res["params"] == {
            "query": "E1234",
            "max_results": 3,
            "min_score": 0.2,
            "sources": ["memory"],
            "path_prefix": "p/",
            "mode": "keyword",
        }
        res = c.search("q", sources=("memory", "sessions"))
        assert res["params"]["sources"] == ["memory", "sessions"]
        res = c.get("notes/a.md")
        assert res["params"] == {"path": "notes/a.md", "from_line": 1}
        res = c.get(Path("notes/a.md"), from_line=12, lines=5)
        assert res["params"] == {"path": "notes/a.md", "from_line": 12, "lines": 5}


@pytest.mark.parametrize("code", sorted(RAISES))
def test_daemon_errors_become_client_classes(sock_path: Path, code: str) -> None:
    with Client(sock_path) as c:
        with pytest.raises(errors.RecalldClientError) as info:
            c.call("raise", {"code": code})
        assert info.value.code == code
        assert str(info.value) == str(RAISES[code])
        assert c.hello()  # same client, still fine


def test_error_classes_by_name(sock_path: Path) -> None:
    with Client(sock_path) as c:
        with pytest.raises(recalld_client.Forbidden, match="outside the roots"):
            c.call("raise", {"code": "forbidden"})
        with pytest.raises(recalld_client.IndexUnavailable):
            c.call("raise", {"code": "index"})
        with pytest.raises(recalld_client.BadRequest, match="unknown method"):
            c.call("nope")


def test_plain_exception_is_internal_and_server_still_serves(sock_path: Path) -> None:
    with Client(sock_path) as c:
        with pytest.raises(recalld_client.InternalError, match="RuntimeError"):
            c.call("crash")
        assert c.status()["state"] == "ready"


def test_request_over_the_cap_is_refused_locally(sock_path: Path) -> None:
    with Client(sock_path) as c:
        with pytest.raises(recalld_client.TooLarge):
            c.call("echo", {"blob": b"x" * (9 * 1024 * 1024)})
        assert c.hello()
