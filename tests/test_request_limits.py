"""What a request may cost the daemon (issue 41 item 4), on a real daemon.

A request frame under the 1 MiB cap can decode into a million empty msgpack arrays (~70 MB of
Python objects); pipelined by clients that never read, six connections took the daemon from
88 to 2,356 MB. Here: such frames are refused with a clear error before they are decoded, and
the daemon's peak RSS stays bounded under the attack while another client keeps being answered.

The daemon runs keyword-only: the server is under test, not the model.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import write
from daemon_process import DaemonProcess
from recalld_client import Client
from recalld_client.protocol import HEADER

pytestmark = pytest.mark.timeout(300)

# Peak RSS growth allowed under the attack (the daemon grew by ~2,270 MB before).
PEAK_BOUND_MB = 120


def peak_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MB: now and the peak since it started."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def expansion_frame(req_id: int, count: int, inner: bytes = b"\x90") -> bytes:
    """A search request whose params hold ``count`` copies of ``inner`` (default: an empty
    array, one byte that decodes into a ~70-byte Python list) in one array."""
    head = msgpack.packb({"v": 1, "id": req_id, "method": "search"})[1:]
    params = b"\x82" + msgpack.packb("query") + msgpack.packb("ferry") + msgpack.packb("pad")
    body = b"\x84" + head + msgpack.packb("params") + params
    body += b"\xdd" + count.to_bytes(4, "big") + inner * count
    return HEADER.pack(len(body)) + body


def nested_frame(req_id: int, outer: int, inner: int) -> bytes:
    """``outer`` arrays of ``inner`` empty arrays each: no array is long, yet the frame holds
    ``outer * inner`` values (a cap on each array's length alone would let this through)."""
    one = b"\xdc" + inner.to_bytes(2, "big") + b"\x90" * inner
    return expansion_frame(req_id, outer, one)


@pytest.fixture()
def daemon() -> Iterator[DaemonProcess]:
    home = Path(tempfile.mkdtemp(prefix="rcd-lim-", dir="/tmp"))
    (home / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[sessions]\npaths = []\n[sync]\ndebounce_s = 0.3\n'
    )
    for i in range(5):
        write(home / "memory" / f"n{i}.md", f"# Note {i}\n\nThe ferry {i} leaves at dawn.\n")
    d = DaemonProcess(home).start()
    try:
        d.wait_idle()
        yield d
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)


class Attacker(threading.Thread):
    """Pipelines one frame over and over and never reads an answer; connects again when the
    daemon hangs up (``hangups`` counts those)."""

    def __init__(self, sock_path: Path, frame: bytes, seconds: float) -> None:
        super().__init__(daemon=True)
        self.sock_path, self.frame, self.seconds = sock_path, frame, seconds
        self.sent_bytes = 0
        self.hangups = 0

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(self.sock_path))
        sock.settimeout(0.2)
        return sock

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        view = memoryview(self.frame)
        sock, pos = self._connect(), 0
        try:
            while time.monotonic() < deadline:
                try:
                    n = sock.send(view[pos : pos + (1 << 16)])
                except TimeoutError:  # the daemon stopped reading: that is the point
                    continue
                except OSError:  # it hung up on us: again
                    sock.close()
                    self.hangups += 1
                    time.sleep(0.05)
                    sock, pos = self._connect(), 0
                    continue
                self.sent_bytes += n
                pos = (pos + n) % len(self.frame)
        finally:
            sock.close()


def attack(d: DaemonProcess, frame: bytes, connections: int, seconds: float) -> dict[str, Any]:
    """``connections`` attackers for ``seconds`` while a prober searches; the figures."""
    assert d.proc is not None
    pid = d.proc.pid
    base, _ = peak_mb(pid)
    attackers = [Attacker(d.socket, frame, seconds) for _ in range(connections)]
    latencies: list[float] = []
    errors: list[str] = []
    for a in attackers:
        a.start()
    with Client(d.socket, timeout=30) as c:
        while any(a.is_alive() for a in attackers):
            start = time.monotonic()
            try:
                assert c.search("ferry", mode="keyword")["results"]
            except Exception as exc:  # noqa: BLE001 - reported by the test
                errors.append(repr(exc))
            latencies.append(time.monotonic() - start)
            time.sleep(0.1)
    for a in attackers:
        a.join(5)
    now, hwm = peak_mb(pid)
    return {
        "base": base,
        "peak": hwm,
        "now": now,
        "sent_mb": sum(a.sent_bytes for a in attackers) / 1e6,
        "hangups": sum(a.hangups for a in attackers),
        "latencies": latencies,
        "errors": errors,
    }


def _check(d: DaemonProcess, figures: dict[str, Any], what: str) -> None:
    grown = figures["peak"] - figures["base"]
    print(
        f"\n{what}: sent {figures['sent_mb']:.0f} MB, {figures['hangups']} hang-ups; "
        f"VmRSS {figures['base']:.0f} -> peak {figures['peak']:.0f} MB (+{grown:.0f}); "
        f"prober {len(figures['latencies'])} searches, "
        f"max {max(figures['latencies']) * 1000:.0f} ms"
    )
    assert grown < PEAK_BOUND_MB, f"{what}: the daemon grew by {grown:.0f} MB"
    assert not figures["errors"], figures["errors"][:3]
    assert len(figures["latencies"]) >= 10
    with d.client(timeout=10) as c:  # the daemon is fine once they are gone
        assert c.search("ferry", mode="keyword")["results"]


@pytest.mark.slow
def test_expansion_frames_from_clients_that_never_read_keep_the_daemon_bounded(
    daemon: DaemonProcess,
) -> None:
    frame = expansion_frame(1, (1 << 20) - 200)
    assert len(frame) <= (1 << 20) + HEADER.size  # under the request cap: only its decoding is big
    figures = attack(daemon, frame, connections=8, seconds=6.0)
    _check(daemon, figures, "8 expansion connections")
    assert figures["hangups"] > 8  # each was refused, not decoded
    log = daemon.log.read_text(errors="replace")
    assert 1 <= log.count("closing a connection") <= 3, log[-2000:]  # a line now and then
    assert "more than 4,096 values" in log


@pytest.mark.slow
def test_nested_short_arrays_are_bounded_too(daemon: DaemonProcess) -> None:
    figures = attack(daemon, nested_frame(1, 4000, 250), connections=8, seconds=4.0)
    _check(daemon, figures, "8 nested connections")
    assert figures["hangups"] > 8


@pytest.mark.slow
def test_costly_requests_under_every_cap_from_clients_that_never_read(
    daemon: DaemonProcess,
) -> None:
    """Frames of almost 1 MiB with just under the cap of values: each is served, so what the
    daemon may hold is bounded by the requests it holds, per connection and in total."""
    from recalld.serve.request_limits import MAX_VALUES

    pad = msgpack.packb("x" * ((1 << 20) - 4 * MAX_VALUES - 300))
    head = msgpack.packb({"v": 1, "id": 1, "method": "search"})[1:]
    params = b"\x83" + msgpack.packb("query") + msgpack.packb("ferry")
    params += msgpack.packb("pad") + b"\xdc" + (MAX_VALUES - 20).to_bytes(2, "big")
    params += b"\x90" * (MAX_VALUES - 20) + msgpack.packb("text") + pad
    body = b"\x84" + head + msgpack.packb("params") + params
    frame = HEADER.pack(len(body)) + body
    assert len(body) <= 1 << 20
    figures = attack(daemon, frame, connections=8, seconds=8.0)
    _check(daemon, figures, "8 connections of costly requests")
    assert figures["sent_mb"] > 8  # they were read (and answered), not refused
    assert figures["hangups"] == 0


def test_an_expansion_frame_gets_a_clear_error(daemon: DaemonProcess) -> None:
    from recalld_client.protocol import read_frame

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(daemon.socket))
        s.sendall(expansion_frame(5, 500_000))
        s.settimeout(10)
        answer = read_frame(s)
    assert answer["id"] is None, answer
    assert answer["error"]["code"] == "too_large", answer
    assert "values" in answer["error"]["message"], answer
    with daemon.client(timeout=10) as c:
        assert c.search("ferry", mode="keyword")["results"]


def _values(obj: Any) -> int:
    """Values in a decoded object, counted the way count_values counts them."""
    if isinstance(obj, dict):
        return 1 + sum(_values(k) + _values(v) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return 1 + sum(_values(v) for v in obj)
    return 1


_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, width=32)
    | st.text(max_size=300)
    | st.binary(max_size=300)
)
_objects = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=60,
)


@settings(max_examples=120, deadline=None)
@given(_objects, st.booleans())
def test_values_are_counted_as_msgpack_decodes_them(obj: Any, single_float: bool) -> None:
    from recalld.serve.request_limits import count_values

    body = msgpack.packb(obj, use_bin_type=True, use_single_float=single_float)
    assert count_values(body) == _values(msgpack.unpackb(body, strict_map_key=False))


def test_values_past_the_cap_are_refused_before_decoding() -> None:
    from recalld.serve.request_limits import TooManyValues, count_values

    ext = msgpack.packb(msgpack.ExtType(5, b"abc" * 100))
    assert count_values(ext) == 1
    assert count_values(msgpack.packb([[]] * 10), limit=11) == 11
    with pytest.raises(TooManyValues, match="more than 10 values"):
        count_values(msgpack.packb([[]] * 10), limit=10)
    # A header that claims 4 billion values is refused at the cap, not walked to its end.
    with pytest.raises(TooManyValues):
        count_values(b"\xdd\xff\xff\xff\xff" + b"\x90" * 5000)
    assert count_values(b"\x92\x90") == 2  # truncated: counted as far as it goes


def test_the_budget_holds_per_connection_and_in_total() -> None:
    from recalld.serve.request_limits import Held, RequestBudget

    async def scenario() -> None:
        budget = RequestBudget(per_connection=100, total=150, small=10)
        a, b, c = Held(), Held(), Held()
        await budget.take(a, 80)
        await budget.take(b, 60)  # nothing held by b: one request always goes in
        assert budget.held == 140
        blocked = asyncio.ensure_future(budget.take(a, 30))  # a would hold 110 > 100
        await asyncio.sleep(0.01)
        assert not blocked.done()
        await budget.take(c, 10)  # a small one of an empty connection goes in over the total
        over_total = asyncio.ensure_future(budget.take(c, 5))  # c holds: 155 > 150
        await asyncio.sleep(0.01)
        assert not over_total.done()
        budget.give_back(b, 60)
        await asyncio.wait_for(over_total, 1)
        assert not blocked.done()  # a's own share is still full
        budget.give_back(a, 80)
        await asyncio.wait_for(blocked, 1)
        assert (a.amount, c.amount, budget.held) == (30, 15, 45)
        assert budget.waits == 2

    asyncio.run(scenario())


def test_every_frame_is_counted_even_after_a_small_one() -> None:
    """The count is kept for the frame at hand only: a frame at an offset the decoder reuses
    (its buffer is compacted after a frame) is counted afresh."""
    from recalld.serve.request_limits import RequestDecoder, TooManyValues

    small = HEADER.pack(len(body := msgpack.packb({"id": 1}))) + body
    decoder = RequestDecoder(1 << 20)
    decoder.feed(small)
    assert decoder.next_cost() is not None
    assert decoder.next_frame() == {"id": 1}
    decoder.feed(nested_frame(2, 40, 250))  # 10,000 values in arrays of 250
    with pytest.raises(TooManyValues):
        decoder.next_cost()
