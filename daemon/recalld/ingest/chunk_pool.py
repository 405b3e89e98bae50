"""Notes chunked on other cores while the writer writes: worker processes, results in order.

A first sync of a big folder is one thread's Python: reading, redacting and chunking a note
(about two thirds of it) and writing its rows. The chunker holds the GIL, so a thread would not
help; worker processes (``spawn``: the daemon has threads) chunk groups of notes with the same
functions (:mod:`recalld.ingest.note_rows`) and the same tokenizer while the writer thread writes
the groups before them. Results come back in the files' order, so batches, rows and progress are
those of a sync without workers. A group no worker has started when the writer needs it is done
on the writer's thread (a worker's group is never cancelled): the writer never waits for a busy
or starting worker, and a broken pool (a worker killed) leaves the rest to the writer.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from recalld.ingest.note_rows import ChunkSettings, NoteRows, note_rows, note_text, pieces_of

log = logging.getLogger(__name__)

GROUP_FILES = (
    32  # notes per task (~20 ms of chunking): one round trip each, small enough to share out
)
# Groups handed to each worker at once (at most; halved after the writer overtook one, grown
# back by one each time the writer finds the first group done). With 2, the worker idled about
# half the sync while the writer wrote a batch or chunked a group itself (writer chunking 151 of
# 313 groups of the bench's 10k notes); with 8, 80 of 313, and keyword-searchable ~10 % sooner
# (docs/DECISIONS.md, first sync, fifth pass).
QUEUED = 8
AHEAD = 4  # groups read ahead beyond those: the writer's to take from the back
OVERTAKE_S = 0.05  # a group takes a worker ~20 ms; waited longer, the writer chunks it too
MIN_FILES = 1_000  # fewer notes to read: starting a worker (~0.5 s of CPU) does not pay
MAX_WORKERS = 4


@dataclass(frozen=True)
class Raw:
    """A note read by the writer, waiting to be chunked."""

    path: Path
    data: bytes
    st: os.stat_result
    digest: str


@dataclass(frozen=True)
class Chunked:
    """A note chunked: whether its bytes were valid UTF-8, its text before and after redaction
    when a secret was hidden (the writer tallies it), and its rows."""

    valid: bool
    redacted: tuple[str, str] | None
    rows: NoteRows


# None: the note is big, the writer chunks it (the background chunker's way); an exception:
# chunking it failed, the writer reports it as for a note it chunked itself.
Outcome = Chunked | BaseException | None


def chunk_notes(
    items: list[tuple[str, bytes, int]],
    count_tokens: Callable[[str], int],
    settings: ChunkSettings,
    big: int,
) -> list[Outcome]:
    """Each (path, bytes, mtime_ns) note's rows; a note over ``big`` chars of text is left."""
    out: list[Outcome] = []
    for path, data, mtime_ns in items:
        try:
            note = note_text(data)
            if len(note.text) > big:
                out.append(None)
                continue
            pieces = pieces_of(note.text, count_tokens, settings)
            # The ident tokens here too: what a worker does, the writer need not.
            rows = note_rows(Path(path), note.text, pieces, mtime_ns, settings.front_matter, True)
            redacted = (note.redacted, note.text) if note.redacted is not None else None
            out.append(Chunked(note.valid, redacted, rows))
        except Exception as exc:  # noqa: BLE001 - one bad note never stops the group
            out.append(exc)
    return out


_worker: tuple[Callable[[str], int], ChunkSettings, int] | None = None


def _start_worker(settings: ChunkSettings, big: int, nice: int) -> None:
    """In a worker process: yield to searches as background embedding does (``nice``), then
    load the tokenizer once."""
    global _worker
    from recalld.tokens import default_tokenizer

    if nice > 0 and hasattr(os, "nice"):
        os.nice(nice)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(
            target=_exit_with_parent, args=(parent.sentinel,), name="parent-watch", daemon=True
        ).start()
    _worker = (default_tokenizer().count, settings, big)


def _exit_with_parent(sentinel: int) -> None:
    """Exit once the daemon is gone. A pool worker holds both ends of its call queue's pipe,
    so a daemon killed with SIGKILL never gives it an end of file: it waited forever."""
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


def _ready() -> bool:
    return _worker is not None


def _in_worker(items: list[tuple[str, bytes, int]]) -> list[Outcome]:
    assert _worker is not None  # set by the pool's initializer
    return chunk_notes(items, *_worker)


def workers_for(files: int, cores: int) -> int:
    """Worker processes for a sync reading ``files`` notes: one per core beside the writer's,
    none for a small sync or on one core."""
    if files < MIN_FILES:
        return 0
    return max(0, min(cores - 1, MAX_WORKERS))


class ChunkPool:
    """Worker processes chunking notes for one sync (closed when the sync ends)."""

    def __init__(
        self,
        workers: int,
        settings: ChunkSettings,
        count_tokens: Callable[[str], int],
        big: int,
        nice: int = 0,
    ) -> None:
        self.settings, self.count_tokens, self.big = settings, count_tokens, big
        self.most_in_flight = QUEUED * workers
        self.in_flight = self.most_in_flight  # groups handed to workers at once, now
        self.window = self.most_in_flight + AHEAD  # groups read ahead: few notes held
        self.in_writer = 0  # groups the writer chunked itself (no worker free for them)
        self.overtaken = 0  # of those, groups a worker had but had not done in time
        self.overtake_s = OVERTAKE_S
        self.broken = False
        self.executor = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(settings, big, nice),
        )
        # Done once a worker has started: until then the writer chunks every group itself
        # (a group queued to a worker still starting would hold the writer up).
        self.started = self.executor.submit(_ready)

    def in_order(
        self, notes: Iterable[tuple[Path, Raw | None]]
    ) -> Iterator[tuple[Path, Raw | None, Outcome]]:
        """Each (path, read note or None) with its outcome (None for no note), in order."""
        groups: deque[_Group] = deque()
        group: list[tuple[Path, Raw | None]] = []
        for item in notes:
            group.append(item)
            if len(group) >= GROUP_FILES:
                groups.append(_Group(group))
                group = []
            self._feed(groups)
            while groups and (len(groups) >= self.window or groups[0].ready()):
                yield from self._resolve(groups)
        if group:
            groups.append(_Group(group))
        while groups:
            self._feed(groups)
            yield from self._resolve(groups)

    def _feed(self, groups: deque[_Group]) -> None:
        """Hand the first groups nobody has to the workers, a few at a time. Groups are never
        queued deeper nor cancelled: the writer takes the rest itself, from the back."""
        if self.broken or not self.started.done():
            return
        busy = sum(1 for g in groups if g.future is not None and not g.future.done())
        for g in groups:
            if busy >= self.in_flight:
                return
            if g.free():
                try:
                    g.future = self.executor.submit(_in_worker, g.items())
                except RuntimeError:  # a broken pool: the writer chunks the rest
                    self.broken = True
                    return
                busy += 1

    def _resolve(self, groups: deque[_Group]) -> Iterator[tuple[Path, Raw | None, Outcome]]:
        """The first group's notes with their outcomes; while a worker still has it, the
        writer chunks the last group no worker has."""
        head = groups[0]
        if head.future is not None and head.ready():  # the workers keep up: give them more
            self.in_flight = min(self.in_flight + 1, self.most_in_flight)
        while not head.ready() and head.future is not None:
            last = next((g for g in reversed(groups) if g.free()), None)
            if last is None:
                self._wait(head)
                break
            last.outcomes = self._here(last)
        groups.popleft()
        it = iter(head.outcomes if head.outcomes is not None else self._outcomes(head))
        for path, raw in head.notes:
            yield path, raw, (next(it) if raw is not None else None)

    def _wait(self, head: _Group) -> None:
        """Wait a moment for a worker's group; past that (a busy host gave the worker no core)
        the writer chunks it too, and the worker's outcomes are dropped when they come."""
        assert head.future is not None
        wait([head.future], timeout=self.overtake_s)
        if not head.future.done():
            head.outcomes = self._here(head)
            self.overtaken += 1
            # a worker short of a core: fewer of its groups for the writer to wait on
            self.in_flight = max(self.in_flight // 2, 1)

    def _outcomes(self, g: _Group) -> list[Outcome]:
        if g.future is not None:
            try:
                return g.future.result()
            except Exception as exc:  # noqa: BLE001 - a broken pool: this process chunks it
                log.warning("a chunking worker failed (%s); chunking here instead", exc)
                self.broken = True
        return self._here(g)

    def _here(self, g: _Group) -> list[Outcome]:
        """Chunk a group on the writer's thread."""
        items = g.items()
        if items:
            self.in_writer += 1
        return chunk_notes(items, self.count_tokens, self.settings, self.big)

    def __enter__(self) -> ChunkPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers once their groups are done (the sync has ended or stops)."""
        self.executor.shutdown(wait=False)
        log.info("groups chunked by the writer: %d (%d overtaken)", self.in_writer, self.overtaken)


@dataclass
class _Group:
    """Notes handed out together: a worker's future, or the outcomes the writer made itself."""

    notes: list[tuple[Path, Raw | None]]
    future: Future[list[Outcome]] | None = None
    outcomes: list[Outcome] | None = None

    def items(self) -> list[tuple[str, bytes, int]]:
        """What a worker needs of each note: its path, bytes and mtime."""
        return [(str(r.path), r.data, r.st.st_mtime_ns) for _, r in self.notes if r is not None]

    def free(self) -> bool:
        """Whether nobody has it yet (a group with no note to chunk is done at once)."""
        if self.outcomes is None and self.future is None and not self.items():
            self.outcomes = []
        return self.outcomes is None and self.future is None

    def ready(self) -> bool:
        """Whether its outcomes are at hand (made here, or done by a worker)."""
        self.free()
        return self.outcomes is not None or (self.future is not None and self.future.done())


def pool_for(
    notes: int,
    settings: ChunkSettings,
    count_tokens: Callable[[str], int],
    big: int,
    nice: int = 0,
) -> ChunkPool | None:
    """Workers for a sync reading ``notes`` notes (:func:`workers_for` this process's usable
    cores), or None: none to start, or a count other than the bundled tokenizer's (the one a
    worker loads). Workers run ``nice`` lower (``embedding.background_nice``): searches first."""
    from recalld.cpus import usable_cores
    from recalld.tokens import default_tokenizer

    workers = workers_for(notes, usable_cores())
    if workers == 0 or getattr(count_tokens, "__self__", None) is not default_tokenizer():
        return None
    return ChunkPool(workers, settings, count_tokens, big, nice)
