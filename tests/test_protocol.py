"""Framing: round trips under any chunking, size caps, garbage, the error-code table."""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recalld_client import errors
from recalld_client.protocol import (
    ERROR_CODES,
    HEADER,
    MAX_FRAME,
    FrameDecoder,
    encode_frame,
    read_frame,
    request,
    write_frame,
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)
maps = st.dictionaries(st.text() | st.integers(-1000, 1000), values, max_size=8)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.slow
@given(st.lists(maps, max_size=6), st.lists(st.integers(min_value=0), max_size=30))
@settings(max_examples=150)
def test_round_trip_under_any_chunking(frames: list[dict[Any, Any]], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder()
    out: list[dict[str, Any]] = []
    for chunk in _cut(stream, cuts):
        decoder.feed(chunk)
        out.extend(decoder)
    assert out == frames
    assert decoder.buffered == 0


@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=10))
@settings(max_examples=500)
def test_garbage_yields_maps_or_protocol_error(data: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder(max_frame=1024)
    try:
        for chunk in _cut(data, cuts):
            decoder.feed(chunk)
            for frame in decoder:
                assert isinstance(frame, dict)
    except errors.ProtocolError:
        pass


@given(st.binary(min_size=1, max_size=64))
def test_garbage_body_in_a_well_formed_frame(body: bytes) -> None:
    decoder = FrameDecoder()
    decoder.feed(HEADER.pack(len(body)) + body)
    try:
        frame = decoder.next_frame()
    except errors.ProtocolError:
        return
    assert isinstance(frame, dict)


def test_wire_shapes() -> None:
    assert request(7, "search", {"query": "x"}) == {
        "v": 1,
        "id": 7,
        "method": "search",
        "params": {"query": "x"},
    }
    frame = encode_frame({"id": 1, "result": {"b": b"\x00", "s": "é"}})
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    # str stays str and bytes stays bin (use_bin_type)
    assert msgpack.unpackb(frame[4:], raw=False) == {"id": 1, "result": {"b": b"\x00", "s": "é"}}


def test_encode_rejects_over_cap() -> None:
    with pytest.raises(errors.FrameTooLarge):
        encode_frame({"blob": b"x" * 200}, max_frame=100)
    with pytest.raises(errors.FrameTooLarge):
        encode_frame({"blob": b"x" * MAX_FRAME})
    assert len(encode_frame({"blob": b"x" * (MAX_FRAME - 100)})) <= MAX_FRAME + 4


def test_declared_length_over_cap_is_rejected_from_the_header_alone() -> None:
    decoder = FrameDecoder(max_frame=1000)
    decoder.feed(HEADER.pack(1001)[:2])
    assert decoder.next_frame() is None
    decoder.feed(HEADER.pack(1001)[2:])  # no body at all: rejected before it is read
    with pytest.raises(errors.FrameTooLarge) as info:
        decoder.next_frame()
    assert isinstance(info.value, errors.TooLarge)
    assert isinstance(info.value, errors.ProtocolError)
    default = FrameDecoder()
    default.feed(HEADER.pack(MAX_FRAME + 1))
    with pytest.raises(errors.FrameTooLarge):
        default.next_frame()


def test_frame_at_the_cap_is_accepted() -> None:
    body = msgpack.packb({"k": b"x" * 50})
    decoder = FrameDecoder(max_frame=len(body))
    decoder.feed(HEADER.pack(len(body)) + body)
    assert decoder.next_frame() == {"k": b"x" * 50}


@pytest.mark.parametrize(
    "body",
    [
        msgpack.packb([1, 2]),  # not a map
        msgpack.packb(3),
        msgpack.packb("text"),
        b"\xc1",  # never-used byte
        b"\x81\xa1",  # truncated map
        msgpack.packb({"a": 1}) + b"\x01",  # trailing data in the frame
        b"\x81\x91\x01\x01",  # map keyed by a list
        b"",  # empty body
    ],
)
def test_invalid_payloads_are_protocol_errors(body: bytes) -> None:
    decoder = FrameDecoder()
    decoder.feed(HEADER.pack(len(body)) + body)
    with pytest.raises(errors.ProtocolError):
        decoder.next_frame()


def test_decoder_stays_broken_and_accepts_more_bytes() -> None:
    decoder = FrameDecoder()
    good = encode_frame({"ok": 1})
    decoder.feed(good + HEADER.pack(1) + b"\xc1" + good)
    assert decoder.next_frame() == {"ok": 1}
    with pytest.raises(errors.ProtocolError):
        decoder.next_frame()
    decoder.feed(good)  # the buffer is not pinned by a leftover view
    with pytest.raises(errors.ProtocolError):
        list(decoder)


def test_many_frames_and_compaction() -> None:
    decoder = FrameDecoder()
    frames = [{"i": i, "pad": "x" * (i % 50)} for i in range(2000)]
    stream = b"".join(encode_frame(f) for f in frames)
    out: list[dict[str, Any]] = []
    for start in range(0, len(stream), 777):
        decoder.feed(stream[start : start + 777])
        out.extend(decoder)
    assert out == frames


def test_blocking_helpers_over_a_socket_pair() -> None:
    a, b = socket.socketpair()
    with a, b:
        write_frame(a, {"id": 1, "result": {"x": [1, 2]}})
        write_frame(a, {"id": 2, "event": {}})
        assert read_frame(b) == {"id": 1, "result": {"x": [1, 2]}}
        assert read_frame(b) == {"id": 2, "event": {}}
        a.sendall(HEADER.pack(MAX_FRAME + 1) + b"body")
        with pytest.raises(errors.FrameTooLarge):
            read_frame(b)
        assert b.recv(16) == b"body"  # the body was left unread
        a.sendall(HEADER.pack(10) + b"abc")
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(errors.ConnectionLost, match="middle of a frame"):
            read_frame(b)
        with pytest.raises(errors.ConnectionLost, match="between frames"):
            read_frame(b)


def test_error_codes_map_one_to_one() -> None:
    classes = {code: type(errors.error_from_wire(code, "m")) for code in ERROR_CODES}
    assert len(set(classes.values())) == len(ERROR_CODES)
    for code, cls in classes.items():
        assert cls.code == code
        assert issubclass(cls, errors.RecalldClientError)
    assert classes["index"] is errors.IndexUnavailable
    assert classes["version"] is errors.VersionMismatch
    assert classes["timeout"] is errors.Timeout


def test_unknown_codes_become_internal_errors() -> None:
    exc = errors.error_from_wire("brand_new", "something")
    assert type(exc) is errors.InternalError
    assert "brand_new" in str(exc) and "something" in str(exc)
    assert type(errors.error_from_wire(None, None)) is errors.InternalError
    assert str(errors.error_from_wire("forbidden", "outside the roots")) == "outside the roots"


def test_every_exception_is_in_the_tree() -> None:
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, errors.RecalldClientError)
            assert obj.__name__ in (errors.__doc__ or "")
