"""Entries written into memory notes: their form, and edits that are never seen half done.

An entry is a heading with its local time and tags, then the text as given (secrets redacted
first, :func:`redact_entry`)::

    ### 2026-12-04 17:40:12 #decision #billing
    We chose Postgres for billing: row-level locks, and the team knows it.

Every edit (append, replace, remove lines) writes the whole note to a temporary file in the
same folder, fsyncs it, checks that nobody changed the note meanwhile, renames it over the
note and fsyncs the folder (docs/DECISIONS.md: why not ``O_APPEND``). A reader, the watcher or
a ``kill -9`` therefore sees the old note or the new one, each whole; an entry is acknowledged
only after the rename is durable. Edits of one note are serialized by :func:`note_lock`: a lock
per note in this process, and an ``flock`` on a file beside the index for other processes (an
in-process ``recalld remember`` beside a daemon).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from recalld.errors import BadRequest, Unavailable
from recalld.index.index_files import fsync_dir, pid_alive

HEADING = re.compile(r"^### (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)((?: #[\w/-]+)*)$")
_TAG = re.compile(r"^[\w/-]{1,64}$")
MAX_TAGS = 20
EDIT_TRIES = 5  # another program changed the note between our read and our rename: again

#: Checks the current lines of a cited range before it is changed (raises when they changed).
LineCheck = Callable[[Path, list[str], int, int], None]


@dataclass(frozen=True)
class Entry:
    """An entry ready to write: redacted text and clean tags."""

    text: str
    tags: tuple[str, ...]
    redacted: int  # secrets replaced in the text

    def lines(self, when: float) -> list[str]:
        """The entry's lines: the heading, then the text."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
        heading = "### " + stamp + "".join(f" #{t}" for t in self.tags)
        return [heading, *self.text.split("\n")]


@dataclass(frozen=True)
class Placed:
    """Where an entry is in its note (1-based, inclusive)."""

    path: Path
    start_line: int
    end_line: int
    duplicate: bool = False

    @property
    def citation(self) -> str:
        """``path#Lx-Ly``, as search prints it."""
        return f"{self.path}#L{self.start_line}-L{self.end_line}"


def redact_entry(text: str) -> tuple[str, int]:
    """The text with secrets replaced (the transcript redactor) and how many were: the one
    place where written text meets the redactor."""
    from recalld.ingest.sessions.redaction import redact

    out = redact(text)
    if out == text:
        return text, 0
    return out, max(out.count("[REDACTED:") - text.count("[REDACTED:"), 1)


def make_entry(text: object, tags: object, max_chars: int) -> Entry:
    """Validate and redact what ``remember`` was given."""
    body, redacted = redact_entry(entry_text(text, max_chars))
    return Entry(body, clean_tags(tags), redacted)


def entry_text(text: object, max_chars: int) -> str:
    """The text an entry holds (line ends and outer blanks trimmed), or BadRequest: empty, a
    NUL byte, or over ``max_chars``. The CLI checks a long text with it before sending it to
    the daemon (too long for one request, it would get another error there)."""
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("remember needs some text to write")
    body = "\n".join(line.rstrip() for line in text.strip("\n").replace("\r\n", "\n").split("\n"))
    body = body.strip()
    if "\x00" in body:
        raise BadRequest("the text contains a NUL byte")
    if len(body) > max_chars:
        raise BadRequest(
            f"the entry is {len(body):,} characters long, over memory.max_entry_chars "
            f"({max_chars:,}): write a shorter summary, or raise the limit in config.toml"
        )
    return body


def clean_tags(tags: object) -> tuple[str, ...]:
    """Tags without their ``#``; BadRequest for anything that is not a plain word."""
    if tags is None:
        return ()
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list | tuple) or len(tags) > MAX_TAGS:
        raise BadRequest(f"tags must be a list of at most {MAX_TAGS} words")
    out: list[str] = []
    for tag in tags:
        word = tag.strip().lstrip("#") if isinstance(tag, str) else ""
        if not _TAG.match(word):
            raise BadRequest(
                f"tag {tag!r:.80} is not a word (letters, digits, _, - and / only, up to 64)"
            )
        if word not in out:
            out.append(word)
    return tuple(out)


# locks ------------------------------------------------------------------------------------------

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextlib.contextmanager
def note_lock(path: Path, lock_file: Path) -> Iterator[None]:
    """Serialize edits of ``path``: in this process per note, across processes by ``flock``."""
    with _locks_guard:
        lock = _locks.setdefault(str(path), threading.Lock())
    with lock:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock


# edits ------------------------------------------------------------------------------------------


def read_lines(path: Path) -> tuple[list[str], os.stat_result | None]:
    """The note's lines (no line ends) and its stat, or ([], None) when it does not exist."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            data = fh.read()
    except FileNotFoundError:
        return [], None
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines, st


def find_entry(lines: Sequence[str], entry: Entry) -> tuple[int, int] | None:
    """The 1-based line range of an entry with the same text and tags, if the note has one."""
    want = entry.text.split("\n")
    tags = "".join(f" #{t}" for t in entry.tags)
    for i, line in enumerate(lines):
        m = HEADING.match(line)
        if m is None or m.group(2) != tags:
            continue
        body = list(lines[i + 1 : i + 1 + len(want)])
        after = i + 1 + len(want)
        ends = after >= len(lines) or not lines[after].strip() or HEADING.match(lines[after])
        if body == want and ends:
            return i + 1, i + 1 + len(want)
    return None


def entry_bounds(lines: Sequence[str]) -> tuple[set[int], set[int]]:
    """First and last lines (1-based) of the entries written in this form."""
    starts: set[int] = set()
    ends: set[int] = set()
    heads = [i for i, line in enumerate(lines) if HEADING.match(line)]
    for n, i in enumerate(heads):
        stop = heads[n + 1] if n + 1 < len(heads) else len(lines)
        last = stop
        while last > i + 1 and not lines[last - 1].strip():
            last -= 1
        starts.add(i + 1)
        ends.add(last)
    return starts, ends


def append(path: Path, entry: Entry, when: float, *, title: str | None = None) -> Placed:
    """Add ``entry`` at the end of the note (created with ``title`` as its heading if new);
    an exact repeat of an entry already there is not written again."""
    for _ in range(EDIT_TRIES):
        lines, st = read_lines(path)
        found = find_entry(lines, entry)
        if found is not None:
            return Placed(path, found[0], found[1], duplicate=True)
        new = list(lines)
        if not new and title:
            new += [f"# {title}"]
        if new and new[-1].strip():
            new.append("")
        start = len(new) + 1
        new += entry.lines(when)
        if _replace(path, new, st):
            return Placed(path, start, len(new))
    raise Unavailable(f"{path} kept changing while recalld wrote to it; try again")


def replace_lines(
    path: Path, first: int, last: int, entry: Entry, when: float, check: LineCheck
) -> Placed:
    """Put ``entry`` in place of lines ``first..last`` (checked by ``check`` first)."""
    for _ in range(EDIT_TRIES):
        lines, st = read_lines(path)
        found = find_entry(lines, entry)
        if found is not None:
            return Placed(path, found[0], found[1], duplicate=True)
        check(path, lines, first, last)
        body = entry.lines(when)
        new = lines[: first - 1] + body + lines[last:]
        if _replace(path, new, st):
            return Placed(path, first, first + len(body) - 1)
    raise Unavailable(f"{path} kept changing while recalld wrote to it; try again")


def remove_lines(path: Path, first: int, last: int, check: LineCheck) -> int:
    """Remove lines ``first..last`` (checked by ``check`` first); the lines removed."""
    for _ in range(EDIT_TRIES):
        lines, st = read_lines(path)
        check(path, lines, first, last)
        new = lines[: first - 1] + lines[last:]
        # One blank line where the entry was, not two.
        at = first - 1
        if 0 < at < len(new) and not new[at - 1].strip() and not new[at].strip():
            del new[at]
        if _replace(path, new, st):
            return last - first + 1
    raise Unavailable(f"{path} kept changing while recalld edited it; try again")


def _replace(path: Path, lines: list[str], before: os.stat_result | None) -> bool:
    """Write ``lines`` as the whole note, atomically and durably; False when the note changed
    since ``before`` (it is then left as the other program wrote it)."""
    _remove_dead_temps(path)
    data = ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
    tmp = path.with_name(f".{path.name}.recalld-{os.getpid()}-{threading.get_ident()}.tmp")
    mode = (before.st_mode & 0o7777) if before is not None else 0o600
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if _stat_key(path) != _stat_key_of(before):
            os.unlink(tmp)
            return False
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return True


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    try:
        return _stat_key_of(os.lstat(path))
    except FileNotFoundError:
        return None


def _stat_key_of(st: os.stat_result | None) -> tuple[int, int, int] | None:
    return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)


def _remove_dead_temps(path: Path) -> None:
    """Temporary notes of a process killed while writing them (``.<name>.recalld-<pid>-*``)."""
    prefix = f".{path.name}.recalld-"
    with contextlib.suppress(OSError):
        for leftover in path.parent.iterdir():
            name = leftover.name
            if not (name.startswith(prefix) and name.endswith(".tmp")):
                continue
            pid = name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                leftover.unlink(missing_ok=True)
