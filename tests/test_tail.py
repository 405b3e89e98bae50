"""Delta reading of growing transcripts: appends, partial lines, rewrites, cost."""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import BENCH, needs_bench
from recalld.ingest.sessions.formats import TranscriptParser, parse_file
from recalld.ingest.sessions.tail import (
    CHAIN_BLOCK,
    HASH_WINDOW,
    Delta,
    TailState,
    read_delta,
    split_lines,
)

SPOTTER = BENCH / "transcripts" / "spotter"


class CountingFile:
    """A file whose reads are counted, through the opener hook."""

    total = 0

    def __init__(self, path: Path) -> None:
        self._f = open(path, "rb")  # noqa: SIM115 -- closed through close()

    def read(self, size: int = -1, /) -> bytes:
        data = self._f.read(size)
        CountingFile.total += len(data)
        return data

    def seek(self, offset: int, whence: int = 0, /) -> int:
        return self._f.seek(offset, whence)

    def fileno(self) -> int:
        return self._f.fileno()

    def close(self) -> None:
        self._f.close()


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def texts(delta: Delta) -> list[tuple[int, bytes]]:
    return delta.lines


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_delta(tmp_path / "nope.jsonl", None)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"")
    delta = read_delta(path, None)
    assert delta.lines == [] and not delta.reset and delta.pending == 0 and not delta.more
    assert (
        delta.state.offset == 0 and delta.state.line_count == 0 and delta.state.last_line_hash == ""
    )
    again = read_delta(path, delta.state)
    assert again.lines == [] and not again.reset


def test_append_reads_only_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2}\n')
    first = read_delta(path, None)
    assert first.lines == [(1, b'{"a":1}'), (2, b'{"a":2}')]
    assert first.state.offset == 16 and first.state.line_count == 2 and not first.reset

    unchanged = read_delta(path, first.state)
    assert unchanged.lines == [] and unchanged.state == first.state

    append(path, b'{"a":3}\n\n{"a":4}\n')
    second = read_delta(path, first.state)
    assert second.lines == [(3, b'{"a":3}'), (4, b""), (5, b'{"a":4}')]
    assert second.state.offset == path.stat().st_size and second.state.line_count == 5
    assert not second.reset


def test_partial_line_waits(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":')
    first = read_delta(path, None)
    assert first.lines == [(1, b'{"a":1}')] and first.pending == 5
    assert first.state.offset == 8 and first.state.size == 13

    again = read_delta(path, first.state)  # still unfinished: nothing consumed
    assert again.lines == [] and again.state.offset == 8 and not again.reset

    append(path, b'2}\n{"a":3}')
    done = read_delta(path, again.state)
    assert done.lines == [(2, b'{"a":2}')] and done.pending == 7 and not done.reset
    append(path, b"\n")
    assert read_delta(path, done.state).lines == [(3, b'{"a":3}')]


def test_crlf(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\r\n{"a":2}\r\n{"a":3}\r')
    delta = read_delta(path, None)
    assert delta.lines == [(1, b'{"a":1}'), (2, b'{"a":2}')]
    append(path, b"\n")
    assert read_delta(path, delta.state).lines == [(3, b'{"a":3}')]


def test_truncation_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2}\n{"a":3}\n')
    state = read_delta(path, None).state
    state = replace(state, messages=3)
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(b'{"b":1}\n')
    delta = read_delta(path, state)
    assert delta.reset and delta.lines == [(1, b'{"b":1}')]
    assert delta.state.line_count == 1 and delta.state.messages == 0


def test_same_size_rewrite_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2}\n')
    state = read_delta(path, None).state
    with open(path, "r+b") as f:  # same inode, same size, other bytes
        f.write(b'{"z":9}\n{"z":8}\n')
    delta = read_delta(path, state)
    assert delta.reset and delta.lines == [(1, b'{"z":9}'), (2, b'{"z":8}')]


def test_rewrite_of_the_start_of_a_long_file_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    body = b"".join(b'{"n":%06d}\n' % i for i in range(5000))
    path.write_bytes(body)
    state = read_delta(path, None).state
    with open(path, "r+b") as f:  # only the first line changes; the tail is identical
        f.write(b'{"n":999999}\n')
    assert read_delta(path, state).reset


def test_replace_by_rename_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n')
    state = read_delta(path, None).state
    other = tmp_path / "new.jsonl"
    other.write_bytes(b'{"a":1}\n{"a":2}\n')
    os.replace(other, path)  # editors and atomic writers do this: a new inode
    assert path.stat().st_ino != state.inode
    delta = read_delta(path, state)
    assert delta.reset and delta.lines == [(1, b'{"a":1}'), (2, b'{"a":2}')]


def test_big_file_append_reads_only_the_delta(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    line = json.dumps({"type": "user", "message": {"content": "x" * 1000}}).encode() + b"\n"
    path.write_bytes(line * (10 * 1024 * 1024 // len(line)))
    size = path.stat().st_size
    assert size > 10_000_000

    CountingFile.total = 0
    first = read_delta(path, None, opener=CountingFile)
    assert first.state.offset == size and CountingFile.total >= size

    appended = b'{"type":"user","message":{"content":"new"}}\n' * 3
    append(path, appended)
    CountingFile.total = 0
    delta = read_delta(path, first.state, opener=CountingFile)
    assert [n for n, _ in delta.lines] == [first.state.line_count + i for i in (1, 2, 3)]
    # The new bytes, the two bounded windows of the rewrite check and less than one block of
    # the chained hash, nothing else.
    assert CountingFile.total == delta.bytes_read <= len(appended) + 4 * HASH_WINDOW + CHAIN_BLOCK

    CountingFile.total = 0
    idle = read_delta(path, delta.state, opener=CountingFile)
    assert idle.lines == [] and CountingFile.total <= 2 * HASH_WINDOW


def test_max_bytes_batches(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    lines = [json.dumps({"i": i, "pad": "p" * (i % 50)}).encode() for i in range(500)]
    path.write_bytes(b"\n".join(lines) + b"\n" + b'{"partial"')
    whole = read_delta(path, None)
    got: list[tuple[int, bytes]] = []
    state = None
    calls = 0
    while True:
        delta = read_delta(path, state, max_bytes=1000)
        got += delta.lines
        state = delta.state
        calls += 1
        if not delta.more:
            break
    assert got == whole.lines == list(enumerate(lines, start=1))
    assert calls > 10 and state == whole.state


def test_line_longer_than_max_bytes_comes_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    big = b'{"x":"' + b"y" * 5000 + b'"}'
    path.write_bytes(big + b"\n" + b'{"a":1}\n')
    delta = read_delta(path, None, max_bytes=100)
    assert delta.lines[0] == (1, big)


def test_state_round_trips_as_json(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n')
    state = replace(read_delta(path, None).state, messages=1)
    restored = TailState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored == state
    assert read_delta(path, restored).lines == []


def test_split_lines() -> None:
    assert split_lines(b"a\r\nb\n\nc\n", 10) == [(10, b"a"), (11, b"b"), (12, b""), (13, b"c")]
    assert split_lines(b"") == []


@needs_bench("transcripts", "spotter")
def test_growing_transcript_parses_like_the_whole(tmp_path: Path) -> None:
    source = (SPOTTER / "subagent.jsonl").read_bytes()
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"")
    parser = TranscriptParser()
    messages = []
    state = None
    # Grow the file in uneven pieces that cut lines anywhere.
    cuts = [*range(0, len(source), 7919), len(source)]
    for start, end in itertools.pairwise(cuts):
        append(path, source[start:end])
        delta = read_delta(path, state)
        assert not delta.reset
        messages += parser.feed(delta.lines)
        state = replace(delta.state, messages=delta.state.messages + len(messages))
    whole, _, fmt = parse_file(SPOTTER / "subagent.jsonl")
    assert messages == whole and parser.fmt == fmt


# -- in-place edits (issue 14 item 7) ------------------------------------------------------------


def _numbered(n: int) -> bytes:
    return b"".join(b'{"n":%06d,"text":"line %06d"}\n' % (i, i) for i in range(n))


def _edit_in_place(path: Path, at: int, data: bytes) -> None:
    time.sleep(0.02)  # mtime/ctime come from a coarse clock: make the edit visibly later
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def test_same_size_edit_in_the_middle_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    body = _numbered(5000)
    path.write_bytes(body)
    state = read_delta(path, None).state
    at = body.index(b"line 002500")
    _edit_in_place(path, at, b"XXXX XXXXXX")  # far from both hashed windows
    assert path.stat().st_size == len(body)
    delta = read_delta(path, state)
    assert delta.reset and len(delta.lines) == 5000
    assert b"XXXX XXXXXX" in delta.lines[2500][1]
    assert not read_delta(path, delta.state).reset


def test_same_size_edit_in_the_last_partial_block_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    body = _numbered(2100)  # 71,400 bytes: 5,864 after the last whole block
    path.write_bytes(body)
    state = read_delta(path, None).state
    assert state.chain_end < len(body) - HASH_WINDOW - 10  # the edit below is in the rest
    _edit_in_place(path, state.chain_end + 2, b"@")
    assert read_delta(path, state).reset


def test_touch_without_change_does_not_reset(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_numbered(3000))
    state = read_delta(path, None).state
    time.sleep(0.02)
    os.utime(path)  # new mtime and ctime, same bytes
    CountingFile.total = 0
    delta = read_delta(path, state, opener=CountingFile)
    assert not delta.reset and delta.lines == []
    assert CountingFile.total >= path.stat().st_size  # verified once by re-hashing...
    CountingFile.total = 0
    again = read_delta(path, delta.state, opener=CountingFile)
    assert not again.reset and CountingFile.total <= 2 * HASH_WINDOW  # ...and not again


def test_truncate_and_regrow_to_the_same_size_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    body = _numbered(3000)
    path.write_bytes(body)
    state = read_delta(path, None).state
    time.sleep(0.02)
    other = body.replace(b"line 001500", b"gone 001500")
    with open(path, "r+b") as f:  # same inode: truncate, then write it all again
        f.truncate(0)
        f.write(other)
    assert path.stat().st_size == len(body) and path.stat().st_ino == state.inode
    delta = read_delta(path, state)
    assert delta.reset and delta.lines[1500][1].endswith(b'"gone 001500"}')


def test_insert_in_the_middle_resets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    body = _numbered(3000)
    path.write_bytes(body)
    state = read_delta(path, None).state
    at = body.index(b'{"n":001500')
    time.sleep(0.02)
    path.write_bytes(body[:at] + b'{"n":"inserted"}\n' + body[at:])  # same inode, grown
    delta = read_delta(path, state)
    assert delta.reset and delta.lines[1500][1] == b'{"n":"inserted"}'


def test_append_with_preserved_mtime_is_read(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_numbered(100))
    state = read_delta(path, None).state
    before = path.stat()
    append(path, b'{"n":"late"}\n')
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r
    delta = read_delta(path, state)
    assert not delta.reset and delta.lines == [(101, b'{"n":"late"}')]


def test_state_from_an_older_version_gets_its_hash_without_reset(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_numbered(2000))
    full = read_delta(path, None).state
    old_keys = ("offset", "line_count", "messages", "last_line_hash", "inode", "size")
    legacy = TailState.from_dict({k: full.to_dict()[k] for k in old_keys})
    assert legacy.chain_hash == ""
    append(path, b'{"n":"new"}\n')
    delta = read_delta(path, legacy)
    assert not delta.reset and delta.lines == [(2001, b'{"n":"new"}')]
    assert delta.state.chain_hash and delta.state == read_delta(path, None).state


def test_state_from_an_older_version_without_new_bytes_gets_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    body = _numbered(2000)
    path.write_bytes(body)
    full = read_delta(path, None).state
    old_keys = ("offset", "line_count", "messages", "last_line_hash", "inode", "size")
    legacy = TailState.from_dict({k: full.to_dict()[k] for k in old_keys})
    idle = read_delta(path, legacy)  # the first read after the upgrade hashes what was read
    assert not idle.reset and idle.lines == [] and idle.state.chain_hash == full.chain_hash
    _edit_in_place(path, body.index(b"line 001000"), b"LINE")  # so a same-size edit is caught
    assert read_delta(path, idle.state).reset


# -- unfinished and over-long lines (issue 14 item 11) -------------------------------------------


def test_unfinished_line_is_scanned_once(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n' + b"x" * 3_000_000)
    CountingFile.total = 0
    first = read_delta(path, None, opener=CountingFile)
    assert first.lines == [(1, b'{"a":1}')] and first.state.scanned == 3_000_000
    for _ in range(3):  # polls while nothing was appended read only the check windows
        CountingFile.total = 0
        idle = read_delta(path, first.state, opener=CountingFile)
        assert idle.lines == [] and CountingFile.total <= 2 * HASH_WINDOW
    append(path, b"y" * 1000)
    CountingFile.total = 0
    grown = read_delta(path, first.state, opener=CountingFile)
    assert grown.state.scanned == 3_001_000
    assert CountingFile.total <= 1000 + 2 * HASH_WINDOW + CHAIN_BLOCK
    append(path, b'"}\n{"b":2}\n')
    done = read_delta(path, grown.state)
    assert done.lines == [(2, b"x" * 3_000_000 + b"y" * 1000 + b'"}'), (3, b'{"b":2}')]
    assert done.state == read_delta(path, None).state


def test_line_over_the_limit_is_skipped_and_later_lines_are_read(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    limit = 100_000
    path.write_bytes(b'{"a":1}\n' + b"z" * (limit + 1))
    first = read_delta(path, None, max_line_bytes=limit)
    assert first.state.skipping and first.lines == [(1, b'{"a":1}')]
    append(path, b"z" * 500_000)
    second = read_delta(path, first.state, max_line_bytes=limit)
    assert second.lines == [] and second.skipped_lines == 0 and second.state.skipping
    append(path, b'"}\n{"b":2}\n{"c":3}')
    third = read_delta(path, second.state, max_line_bytes=limit)
    assert third.lines == [(3, b'{"b":2}')] and third.skipped_lines == 1
    assert not third.state.skipping and third.pending == 7
    whole = read_delta(path, None, max_line_bytes=limit)
    assert whole.lines == [(1, b'{"a":1}'), (3, b'{"b":2}')] and whole.skipped_lines == 1
    assert whole.state == third.state


def test_line_exactly_at_the_limit_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"q" * 1000 + b"\n" + b"r" * 1001 + b"\n")
    delta = read_delta(path, None, max_line_bytes=1000)
    assert delta.lines == [(1, b"q" * 1000)] and delta.skipped_lines == 1
