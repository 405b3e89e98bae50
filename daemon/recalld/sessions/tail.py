"""Delta reading of a growing JSONL file: only the bytes appended since the last read.

:func:`read_delta` returns the *complete* new lines (a trailing line without ``\\n`` is still
being written and waits for the next call) with their 1-based line numbers, and the
:class:`TailState` to pass next time. It detects a file that was replaced (new inode),
truncated (shrank) or rewritten in place (the bytes before the saved offset changed) and then
starts again from line 1 with ``reset=True``. Work is proportional to the new bytes plus two
bounded reads for the rewrite check, never to the file size.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["HASH_WINDOW", "Delta", "TailState", "read_delta", "split_lines"]

#: Bytes at each end of the consumed region that the rewrite check hashes.
HASH_WINDOW = 4096
_BLOCK = 1 << 20


class ReadableFile(Protocol):
    """What :func:`read_delta` needs from an opened file (lets tests count bytes read)."""

    def read(self, size: int = -1, /) -> bytes: ...
    def seek(self, offset: int, whence: int = 0, /) -> int: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


Opener = Callable[[Path], ReadableFile]


def _open(path: Path) -> ReadableFile:
    return open(path, "rb")  # closed by read_delta


@dataclass(frozen=True, slots=True)
class TailState:
    """Where reading of one file stopped. JSON-able via :meth:`to_dict` / :meth:`from_dict`.

    ``offset``: bytes consumed, always the end of a complete line. ``line_count``: lines
    consumed (the next line is ``line_count + 1``). ``messages``: the caller's count of messages
    parsed so far (carried along, reset to 0 with the file). ``last_line_hash``: hash of the
    first and the last :data:`HASH_WINDOW` bytes before ``offset`` (so it covers the last line,
    or its end when it is longer). ``inode`` and ``size``: as seen at the last read.
    """

    offset: int
    line_count: int
    messages: int
    last_line_hash: str
    inode: int
    size: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TailState:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class Delta:
    """The result of one :func:`read_delta` call.

    ``lines``: ``(line_number, bytes)`` without the line ending (``\\n`` or ``\\r\\n``).
    ``reset``: the previous state no longer described the file; everything indexed for it must
    be dropped and ``lines`` start again at 1. ``pending``: bytes read after the last complete
    line and left for later (an unfinished line). ``more``: stopped at ``max_bytes``, call again.
    ``bytes_read``: bytes read from the file in this call, checks included.
    """

    lines: list[tuple[int, bytes]]
    state: TailState
    reset: bool
    pending: int
    more: bool
    bytes_read: int


def split_lines(data: bytes, first_line: int = 1) -> list[tuple[int, bytes]]:
    """Number the complete lines of ``data`` (which ends with ``\\n``), endings removed."""
    parts = data.split(b"\n")
    parts.pop()  # after the final "\n"
    return [(n, p[:-1] if p.endswith(b"\r") else p) for n, p in enumerate(parts, start=first_line)]


class _Counting:
    """Wraps an opened file to count the bytes read through it."""

    def __init__(self, raw: ReadableFile) -> None:
        self.raw, self.count = raw, 0

    def read_at(self, offset: int, size: int) -> bytes:
        self.raw.seek(offset)
        data = self.raw.read(size)
        self.count += len(data)
        return data


def _hash(f: _Counting, offset: int) -> str:
    """Hash of the first and last HASH_WINDOW bytes before ``offset`` ("" at offset 0)."""
    if offset <= 0:
        return ""
    h = hashlib.blake2b(digest_size=16)
    h.update(f.read_at(0, min(offset, HASH_WINDOW)))
    if offset > HASH_WINDOW:
        start = max(HASH_WINDOW, offset - HASH_WINDOW)
        h.update(f.read_at(start, offset - start))
    return h.hexdigest()


def read_delta(
    path: str | os.PathLike[str],
    state: TailState | None,
    *,
    max_bytes: int | None = None,
    opener: Opener = _open,
) -> Delta:
    """Read the complete lines appended to ``path`` since ``state`` (None: from the start).

    ``max_bytes`` bounds one call (a line longer than that is still returned whole); the
    rest comes with ``more=True``. Raises ``OSError`` when the file cannot be opened or read.
    """
    raw = opener(Path(path))
    try:
        st = os.fstat(raw.fileno())
        f = _Counting(raw)
        start = state
        if state is not None and (
            st.st_ino != state.inode
            or st.st_size < state.size
            or st.st_size < state.offset
            or _hash(f, state.offset) != state.last_line_hash
        ):
            start = None
        reset = state is not None and start is None
        offset = start.offset if start is not None else 0
        line_count = start.line_count if start is not None else 0
        messages = start.messages if start is not None else 0

        chunks: list[bytes] = []
        got, more = 0, False
        while True:
            block = f.read_at(offset + got, _BLOCK if max_bytes is None else min(_BLOCK, max_bytes))
            if not block:
                break
            chunks.append(block)
            got += len(block)
            # Past the budget: stop at the first line end (a single longer line is read whole).
            if max_bytes is not None and got >= max_bytes and b"\n" in block:
                more = True
                break
        data = b"".join(chunks)
        end = data.rfind(b"\n") + 1
        lines = split_lines(data[:end], line_count + 1)
        new_offset = offset + end
        if more and st.st_size <= offset + got and end == len(data):
            more = False  # the budget ran out exactly at the end of the file
        digest = _hash(f, new_offset) if end or reset or state is None else state.last_line_hash
        new_state = TailState(
            offset=new_offset,
            line_count=line_count + len(lines),
            messages=messages,
            last_line_hash=digest,
            inode=st.st_ino,
            size=max(st.st_size, offset + got),
        )
        return Delta(lines, new_state, reset, len(data) - end, more, f.count)
    finally:
        raw.close()
