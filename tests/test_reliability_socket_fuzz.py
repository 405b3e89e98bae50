"""Bad input on the socket (issue 8): hypothesis properties against a real daemon.

A real ``recalld serve`` subprocess (real model, real index) gets fuzzed envelopes (any field
missing or of any msgpack type), wrong-typed params of every method, and random bytes. Every
request gets an answer or a clean hang-up, never an ``internal`` error, the connection (or the
next one) still serves ``hello``, and the log gets no unbounded line.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon_process import DaemonProcess
from recalld_client.protocol import HEADER
from reliability_socket_support import METHOD_PARAMS, OK_CODES, Wire, _check_answer, _pid
from reliability_socket_support import daemon as daemon  # a fixture

pytestmark = pytest.mark.timeout(600)

RELAXED = [HealthCheck.too_slow, HealthCheck.data_too_large]


def _hello_ok(wire: Wire, pid: int) -> None:
    msg = wire.rpc({"v": 1, "id": 424242, "method": "hello", "params": {}})
    assert msg is not None and msg["id"] == 424242 and msg["result"]["pid"] == pid, msg


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=40)
    | st.binary(max_size=40)
    | st.sampled_from(["", " ", "\x00", "../../etc/passwd", "~", "hybrid", "memory", "n1.md"])
    | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8))
)
junk = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def envelopes(draw: st.DrawFn) -> dict[Any, Any]:
    """A request map whose every field may be missing or of any type."""
    env: dict[Any, Any] = {}
    fields = {
        "v": st.just(1) | junk,
        "id": st.integers(0, 2**31) | junk,
        "method": st.sampled_from([*METHOD_PARAMS, "nope", "", "SEARCH", "get\x00"]) | junk,
        "params": st.just({}) | junk,
    }
    for key, strategy in fields.items():
        if key == "method" or draw(st.booleans()):
            env[key] = draw(strategy)
    keys = st.text(max_size=6) | st.integers(-(2**63), 2**64 - 1)
    env.update(draw(st.dictionaries(keys, junk, max_size=2)))
    return env


@st.composite
def method_calls(draw: st.DrawFn) -> tuple[str, dict[Any, Any]]:
    """A known method with at least one parameter of a wrong (random) type, plus extras."""
    method = draw(st.sampled_from(list(METHOD_PARAMS)))
    keys = METHOD_PARAMS[method]
    params: dict[Any, Any] = {}
    for key in keys:
        if draw(st.booleans()):
            params[key] = draw(junk)
    if keys and not params:
        params[draw(st.sampled_from(keys))] = draw(junk)
    if method == "search" and "query" not in params and draw(st.booleans()):
        params["query"] = "harbour ferry"  # get past the query check to the others
    if method == "get" and "path" not in params and draw(st.booleans()):
        params["path"] = "n1.md"
    params.update(draw(st.dictionaries(st.text(max_size=6), junk, max_size=2)))
    return method, params


@pytest.mark.slow
@given(env=envelopes())
@settings(max_examples=400, deadline=None, suppress_health_check=RELAXED)
def test_fuzzed_envelopes_are_answered(daemon: DaemonProcess, env: dict[Any, Any]) -> None:
    with Wire(daemon.socket) as wire:
        _check_answer(wire.rpc(env), env.get("id"))
        _hello_ok(wire, _pid(daemon))  # an envelope error keeps the connection


@pytest.mark.slow
@given(call=method_calls(), req_id=st.integers(0, 2**40))
@settings(max_examples=600, deadline=None, suppress_health_check=RELAXED)
def test_fuzzed_params_of_every_method(
    daemon: DaemonProcess, call: tuple[str, dict[Any, Any]], req_id: int
) -> None:
    method, params = call
    with Wire(daemon.socket) as wire:
        msg = wire.rpc({"v": 1, "id": req_id, "method": method, "params": params})
        answer = _check_answer(msg, req_id)
        if method == "pause" and answer.get("result", {}).get("paused"):
            wire.rpc({"v": 1, "id": 1, "method": "pause", "params": {"paused": False}})
        _hello_ok(wire, _pid(daemon))


@given(data=st.binary(max_size=300), framed=st.booleans())
@settings(max_examples=300, deadline=None, suppress_health_check=RELAXED)
def test_random_bytes_get_error_frames_or_a_hang_up(
    daemon: DaemonProcess, data: bytes, framed: bool
) -> None:
    """Raw garbage, or garbage in a well-formed length header: error frames, then EOF."""
    with Wire(daemon.socket) as wire:
        wire.send(HEADER.pack(len(data)) + data if framed else data)
        wire.sock.shutdown(socket.SHUT_WR)  # a truncated frame ends here
        for msg in wire.drain():
            assert "result" in msg or msg["error"]["code"] in OK_CODES, msg
    with Wire(daemon.socket) as ok:
        _hello_ok(ok, _pid(daemon))


def test_log_lines_stay_bounded(daemon: DaemonProcess) -> None:
    """Errors echo parameters; the log gets an excerpt, not a megabyte per bad request."""
    start = daemon.log.stat().st_size
    big = "x" * 900_000
    with Wire(daemon.socket) as wire:
        for i, (method, params) in enumerate(
            [
                (big, {}),  # an unknown method named by 900 KB
                ("get", {"path": big}),
                ("get", {"path": "n1.md", "from_line": [big]}),
                ("search", {"query": "ferry", "sources": [big]}),
                ("search", {"query": "ferry", "mode": big}),
            ]
        ):
            msg = _check_answer(wire.rpc({"v": 1, "id": i, "method": method, "params": params}), i)
            assert msg["error"]["code"] == "bad_request"
            assert len(msg["error"]["message"]) <= 16 * 1024
    time.sleep(0.3)
    with daemon.log.open("rb") as fh:
        fh.seek(start)
        new = fh.read().decode("utf-8", "replace").splitlines()
    assert len(new) >= 5
    assert max(len(line) for line in new) < 2_000, max(new, key=len)[:300]
