"""Delta reading of a growing JSONL file: only the bytes appended since the last read.

:func:`read_delta` returns the *complete* new lines (a trailing line without ``\\n`` is still
being written and waits for the next call) with their 1-based line numbers, and the
:class:`TailState` to pass next time. It detects a file that was replaced (new inode),
truncated (shrank) or rewritten in place and then starts again from line 1 with ``reset=True``.

Rewrite checks: every call hashes the first and the last :data:`HASH_WINDOW` bytes before the
saved offset (cheap, catches most rewrites). A same-size edit in the middle is invisible to
that, so the state also carries a chained hash of every byte read so far (extended as bytes are
read); when the size is unchanged but mtime or ctime moved, the whole read range is re-hashed
and compared. That costs one read of the file, on a rare event.

Work is proportional to the new bytes plus bounded reads (the two windows and less than one
:data:`CHAIN_BLOCK`). An unfinished line is scanned once: the state remembers how far (no
re-reading on every poll), and a line longer than ``max_line_bytes`` is skipped (counted in
``Delta.skipped_lines``) without holding more than that limit in memory.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "CHAIN_BLOCK",
    "HASH_WINDOW",
    "MAX_LINE_BYTES",
    "Delta",
    "TailState",
    "read_delta",
    "split_lines",
]

#: Bytes at each end of the consumed region that the cheap rewrite check hashes.
HASH_WINDOW = 4096
#: The chained hash advances in aligned blocks of this size; a call re-reads < 1 block.
CHAIN_BLOCK = 8192
#: Default for lines too long to index (the parser's own limit; see ``sessions.max_line_bytes``).
MAX_LINE_BYTES = 5 * 1024 * 1024
_BLOCK = 1 << 20
_DIGEST = 16


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

    ``offset``: bytes consumed, always the end of a complete (or skipped) line. ``line_count``:
    lines consumed (the next line is ``line_count + 1``). ``messages``: the caller's count of
    messages parsed so far (carried along, reset to 0 with the file). ``last_line_hash``: hash
    of the first and the last :data:`HASH_WINDOW` bytes before ``offset``. ``inode``, ``size``,
    ``mtime_ns``, ``ctime_ns``: as seen at the last read. ``scanned``: bytes after ``offset``
    already read and holding no newline (the unfinished line); ``skipping``: that line is over
    the limit and will be skipped. ``chain_end``/``chain_hash``/``rest_hash``: hash of the
    aligned blocks before ``chain_end`` and of the bytes from there to ``offset + scanned``
    (``chain_hash == ""``: not computed yet, e.g. a state saved by an older version).
    """

    offset: int
    line_count: int
    messages: int
    last_line_hash: str
    inode: int
    size: int
    mtime_ns: int = 0
    ctime_ns: int = 0
    scanned: int = 0
    skipping: bool = False
    chain_end: int = 0
    chain_hash: str = ""
    rest_hash: str = ""

    @property
    def scan_end(self) -> int:
        """Bytes looked at: the consumed lines plus the scanned part of the unfinished one."""
        return self.offset + self.scanned

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TailState:
        """Missing newer keys take their defaults (states saved by older versions)."""
        fields = cls.__dataclass_fields__
        return cls(**{k: data[k] for k in fields if k in data})


@dataclass(frozen=True, slots=True)
class Delta:
    """The result of one :func:`read_delta` call.

    ``lines``: ``(line_number, bytes)`` without the line ending (``\\n`` or ``\\r\\n``).
    ``reset``: the previous state no longer described the file; everything indexed for it must
    be dropped and ``lines`` start again at 1. ``pending``: bytes after the last complete line
    (an unfinished line). ``more``: stopped at ``max_bytes``, call again. ``bytes_read``: bytes
    read from the file in this call, checks included. ``skipped_lines``: lines over
    ``max_line_bytes`` that ended in this call (their numbers are not in ``lines``).
    """

    lines: list[tuple[int, bytes]]
    state: TailState
    reset: bool
    pending: int
    more: bool
    bytes_read: int
    skipped_lines: int = 0


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


class _Chain:
    """Chained hash of a file's bytes in aligned :data:`CHAIN_BLOCK` blocks, fed in order.

    Only whole blocks enter the chain, so the digest does not depend on how the bytes were
    split between calls; the unaligned rest is kept (< 1 block) and hashed on its own.
    """

    def __init__(self, end: int = 0, digest: str = "") -> None:
        self.end = end
        self.digest = bytes.fromhex(digest) if digest else bytes(_DIGEST)
        self.rest = bytearray()

    @property
    def pos(self) -> int:
        return self.end + len(self.rest)

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        if self.rest:
            take = CHAIN_BLOCK - len(self.rest)
            self.rest += view[:take]
            view = view[take:]
            if len(self.rest) < CHAIN_BLOCK:
                return
            self._block(self.rest)
            self.rest = bytearray()
        whole = len(view) // CHAIN_BLOCK * CHAIN_BLOCK
        for i in range(0, whole, CHAIN_BLOCK):
            self._block(view[i : i + CHAIN_BLOCK])
        self.rest = bytearray(view[whole:])

    def _block(self, block: bytes | bytearray | memoryview) -> None:
        h = hashlib.blake2b(self.digest, digest_size=_DIGEST)
        h.update(block)
        self.digest = h.digest()
        self.end += CHAIN_BLOCK

    def rest_hash(self) -> str:
        return hashlib.blake2b(self.rest, digest_size=_DIGEST).hexdigest()

    def feed_from(self, f: _Counting, end: int) -> None:
        """Feed the file's bytes from :attr:`pos` up to ``end``, a block at a time."""
        while self.pos < end:
            data = f.read_at(self.pos, min(_BLOCK, end - self.pos))
            if not data:
                return
            self.feed(data)


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


def _still_valid(f: _Counting, st: os.stat_result, state: TailState) -> bool:
    """Whether ``state`` still describes the file's first ``state.scan_end`` bytes."""
    if st.st_ino != state.inode or st.st_size < state.size or st.st_size < state.scan_end:
        return False
    if _hash(f, state.offset) != state.last_line_hash:
        return False
    touched = (st.st_mtime_ns, st.st_ctime_ns) != (state.mtime_ns, state.ctime_ns)
    if not (touched and st.st_size == state.size and state.chain_hash):
        return True  # a growing file: its old bytes are assumed untouched (appends)
    # Same size, new mtime/ctime: an in-place edit or just a touch. Re-hash what was read.
    chain = _Chain()
    chain.feed_from(f, state.scan_end)
    return chain.digest.hex() == state.chain_hash and chain.rest_hash() == state.rest_hash


def read_delta(
    path: str | os.PathLike[str],
    state: TailState | None,
    *,
    max_bytes: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    opener: Opener = _open,
) -> Delta:
    """Read the complete lines appended to ``path`` since ``state`` (None: from the start).

    ``max_bytes`` bounds one call once a line was completed (a single longer line is still
    returned whole, up to ``max_line_bytes``); the rest comes with ``more=True``. Lines over
    ``max_line_bytes`` are skipped. Raises ``OSError`` when the file cannot be opened or read.
    """
    raw = opener(Path(path))
    try:
        st = os.fstat(raw.fileno())
        f = _Counting(raw)
        start = state if state is not None and _still_valid(f, st, state) else None
        reset = state is not None and start is None
        if start is not None and st.st_size == start.scan_end and start.chain_hash:
            # Nothing new: keep the state (new times, so a touch is verified only once).
            same = replace(start, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
            return Delta([], same, False, start.scanned, False, f.count)
        return _scan(f, st, start, reset, max_bytes, max_line_bytes)
    finally:
        raw.close()


def _scan(
    f: _Counting,
    st: os.stat_result,
    start: TailState | None,
    reset: bool,
    max_bytes: int | None,
    max_line_bytes: int,
) -> Delta:
    """Read from where ``start`` stopped scanning; collect the lines that end."""
    s = start or TailState(0, 0, 0, "", st.st_ino, 0)
    chain = _Chain(s.chain_end, s.chain_hash) if s.chain_hash else _Chain()
    chain.feed_from(f, s.scan_end)  # < 1 block, or the whole prefix for an old state
    found = _Lines(f, s, max_line_bytes)
    pos, got, more = s.scan_end, 0, False
    block_size = _BLOCK if max_bytes is None else max(1, min(_BLOCK, max_bytes))
    while True:
        if max_bytes is not None and got >= max_bytes and found.count > s.line_count:
            more = pos < st.st_size
            break
        block = f.read_at(pos, block_size)
        if not block:
            break
        chain.feed(block)
        got += len(block)
        found.feed(block, pos)
        pos += len(block)
    line_start = found.start
    digest = _hash(f, line_start) if line_start != s.offset or start is None else s.last_line_hash
    new_state = TailState(
        offset=line_start,
        line_count=found.count,
        messages=s.messages,
        last_line_hash=digest,
        inode=st.st_ino,
        size=max(st.st_size, pos),
        mtime_ns=st.st_mtime_ns,
        ctime_ns=st.st_ctime_ns,
        scanned=pos - line_start,
        skipping=found.skipping,
        chain_end=chain.end,
        chain_hash=chain.digest.hex(),
        rest_hash=chain.rest_hash(),
    )
    return Delta(found.lines, new_state, reset, pos - line_start, more, f.count, found.skipped)


class _Lines:
    """The lines that end in the blocks read, and what is known of the unfinished one."""

    def __init__(self, f: _Counting, s: TailState, max_line_bytes: int) -> None:
        self.f = f
        self.max_line_bytes = max_line_bytes
        self.start, self.count, self.skipping = s.offset, s.line_count, s.skipping
        self.length = s.scanned  # bytes of the unfinished line seen so far
        self.unread = 0 if s.skipping else s.scanned  # its bytes not in memory (re-read at its end)
        self.parts: list[bytes] = []
        self.lines: list[tuple[int, bytes]] = []
        self.skipped = 0

    def feed(self, block: bytes, pos: int) -> None:
        """Collect the lines that end in ``block`` (read at ``pos``); keep the rest for later."""
        # Locals, not attributes, in the loop over lines: it runs once per transcript line.
        f, limit, lines = self.f, self.max_line_bytes, self.lines
        start, count, skipping = self.start, self.count, self.skipping
        length, unread, parts = self.length, self.unread, self.parts
        i = 0
        while (nl := block.find(b"\n", i)) >= 0:
            length += nl - i
            if skipping or length > limit:
                self.skipped += 1
            else:
                head = f.read_at(start, unread) if unread else b""
                line = b"".join((head, *parts, block[i:nl]))
                lines.append((count + 1, line[:-1] if line.endswith(b"\r") else line))
            count += 1
            start = pos + nl + 1
            parts, unread, length, skipping = [], 0, 0, False
            i = nl + 1
        length += len(block) - i
        if not skipping and length > limit:
            parts, unread, skipping = [], 0, True  # over the limit: stop keeping its bytes
        elif not skipping and i < len(block):
            parts.append(block[i:])
        self.start, self.count, self.skipping = start, count, skipping
        self.length, self.unread, self.parts = length, unread, parts
