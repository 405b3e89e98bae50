"""``write`` and ``forget``: agents add to memory and take out of it, on one :class:`Engine`.

The same code answers through the daemon (:mod:`recalld.serve.write_handlers` runs the index
part on its single writer thread) and in-process when no daemon runs (``on_writer`` calls
directly). A write edits the note (:mod:`recalld.ingest.memory_write`) and then indexes that one
file at once, not after the watcher's debounce: when it returns, every client's keyword search
finds the entry; its vector follows with the next back-fill step (``after_index``).

A forget of a line range edits the note the same way, after checking that the lines are still
what the index holds for them. Anything else is a tombstone (:mod:`recalld.index.tombstones`):
the files it covers leave the index and stay out; the files themselves are not touched. Either
way :func:`recalld.index.erase.scrub` then takes the text out of the index file's bytes.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from recalld.errors import BadRequest, Forbidden, NotFound
from recalld.index import erase, tombstones
from recalld.index.tombstones import Tombstone
from recalld.ingest import memory_write, note_names, session_ids
from recalld.ingest.filters import make_filter
from recalld.ingest.forgotten import (
    Forgotten,
    forgotten_stone,
    nothing_matches,
    on_disk,
    undo_command,
)
from recalld.ingest.indexer import content_hash
from recalld.paths import glob_base
from recalld.retrieval import access

T = TypeVar("T")
# Why a forgotten note is not written to, and what to do instead (_refuse_forgotten).
_UNFINDABLE = "an entry there is never indexed: search and get would never find it"
_ELSEWHERE = "write to another note"
OnWriter = Callable[[Callable[[], T]], T]


class MemoryEdits:
    """The ``write`` and ``forget`` methods over one engine."""

    def __init__(
        self,
        engine: Any,
        on_writer: Callable[[Callable[[], Any]], Any],
        *,
        after_index: Callable[[], None] | None = None,
        resync: Callable[[], None] | None = None,
        shared: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.engine = engine
        self.on_writer = on_writer
        self.after_index = after_index or (lambda: None)
        self.resync = resync or (lambda: None)
        # Whether an indexed file (path, source) is pushed to a shared store: a forget says so,
        # since the store's files keep the text until its administrator compacts them.
        self.shared = shared or (lambda _path, _source: False)
        # Edits per note, counted once on disk, and how many of them the index holds: a write
        # queued behind another's index pass finds its entry indexed already (group commit).
        self._edits: dict[str, int] = {}
        self._indexed: dict[str, int] = {}
        self._count_lock = threading.Lock()

    @property
    def _lock_file(self) -> Path:
        index: Path = self.engine.index_path
        return index.with_name(index.name + ".notes-lock")

    # write ----------------------------------------------------------------------------------

    def write(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Append (or with ``replace``, substitute) an entry; the answer cites its lines."""
        config = self.engine.config
        entry = memory_write.make_entry(
            params.get("text"), params.get("tags"), config.int("memory.max_entry_chars")
        )
        when = time.time()
        replace = params.get("replace")
        if replace is not None:
            path, first, last = self._cited_note(replace)
            self._refuse_forgotten(path)
            self._check_room(path, entry)
            with memory_write.note_lock(path, self._lock_file):
                placed = memory_write.replace_lines(
                    path, first, last, entry, when, self._check_lines
                )
                edit = self._edited(path)
        else:
            path, title = self._target(params.get("note"), when)
            self._check_room(path, entry)
            with memory_write.note_lock(path, self._lock_file):
                placed = memory_write.append(path, entry, when, title=title)
                edit = self._edited(path)
        self.on_writer(lambda: self._index_up_to(placed.path, edit))
        self.after_index()
        return {
            "citation": placed.citation,
            "path": str(placed.path),
            "start_line": placed.start_line,
            "end_line": placed.end_line,
            "redacted": entry.redacted,
            "duplicate": placed.duplicate,
        }

    def _target(self, note: object, when: float) -> tuple[Path, str | None]:
        """The note to append to, and the title a new daily note starts with."""
        config = self.engine.config
        if note is not None and not isinstance(note, str):
            raise BadRequest("note must be a note name such as MEMORY.md")
        title = None
        if note is None or not note.strip():
            note = note_names.daily_note_name(config.str("memory.daily_note"), when)
            title = time.strftime("%Y-%m-%d", time.localtime(when))
        path = note_names.note_path(
            note,
            config.memory_roots(),
            make_filter(config.list("memory.extensions")),
            create_root=not config.list("memory.paths"),  # the default folder: made on use
            refuse=self._refuse_forgotten,
        )
        return path, title

    def _refuse_forgotten(
        self, path: Path, why: str = _UNFINDABLE, instead: str = _ELSEWHERE
    ) -> None:
        """Refuse to edit a note a tombstone covers (BadRequest naming it and its undo)."""
        with self.engine.reader() as store:
            stone = forgotten_stone(store, self.engine.config, path)
        if stone is not None:
            raise BadRequest(
                f"{path} is forgotten ({stone.kind} {stone.value}): nothing was touched, as "
                f"{why}. Either {instead}, or bring it back first with `{undo_command(stone)}`"
            )

    def _check_room(self, path: Path, entry: memory_write.Entry) -> None:
        """Refuse an entry that would take the note over ``memory.max_file_bytes`` (the indexer
        would then skip the whole note: written but never found)."""
        limit = self.engine.config.int("memory.max_file_bytes")
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size + len(entry.text.encode("utf-8")) + 100 > limit:
            raise BadRequest(
                f"{path} would grow past memory.max_file_bytes ({limit:,} bytes) and no longer "
                "be indexed: write to another note (--note NAME)"
            )

    def _edited(self, path: Path) -> int:
        """Count an edit of ``path`` that is on disk now (called under the note's lock)."""
        with self._count_lock:
            self._edits[str(path)] = self._edits.get(str(path), 0) + 1
            return self._edits[str(path)]

    def _index_up_to(self, path: Path, edit: int) -> None:
        """On the writer: index the note unless a pass since ``edit`` did (keyword first; the
        vectors follow, ``after_index``)."""
        key = str(path)
        with self._count_lock:
            if self._indexed.get(key, 0) >= edit:
                return
            upto = self._edits[key]  # every edit counted so far is on disk: this pass sees it
        self.engine.index_now([path])
        with self._count_lock:
            self._indexed[key] = max(self._indexed.get(key, 0), upto)

    # forget ---------------------------------------------------------------------------------

    def forget(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Forget a line range, a path or glob, a session or a project (or list, or undo)."""
        if params.get("list"):
            return {"forgotten": [s.as_dict() for s in self._stones()]}
        undo = params.get("undo", False)
        if not isinstance(undo, bool):
            raise BadRequest("undo must be true or false")
        given = {k: params.get(k) for k in ("target", "session", "project")}
        named = {k: v for k, v in given.items() if v is not None}
        if len(named) != 1:
            raise BadRequest(
                "forget needs exactly one of: a citation, path or glob; a session; a project"
            )
        kind, value = next(iter(named.items()))
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise BadRequest(f"{kind} must be a non-empty string")
        value = value.strip()
        if kind == "target":
            cited = self._line_range(value)
            if cited is not None:
                if undo:
                    raise BadRequest("removed lines cannot be brought back by recalld")
                self._refuse_forgotten(
                    cited[0],
                    "its lines cannot be checked against an index that no longer holds them",
                    "leave it forgotten (its text is out of the index already)",
                )
                return self._forget_lines(*cited)
            stone = self._path_stone(value, must_exist=not undo)
        elif kind == "session":
            stone = Tombstone(kind, self._session_id(value, undo=undo))
        else:
            stone = Tombstone(kind, value)
        return self._undo(stone) if undo else self._bury(stone)

    def _session_id(self, value: str, *, undo: bool) -> str:
        """The session a forget names, also by the start of its id (``5f1c9e0a``): among the
        indexed and the forgotten sessions, or for an undo the forgotten ones only."""
        with self.engine.reader() as store:
            forgotten = [s.value for s in tombstones.all_of(store.conn) if s.kind == "session"]
            return session_ids.resolve(None if undo else store.conn, value, forgotten)

    def _stones(self) -> list[Tombstone]:
        with self.engine.reader() as store:
            return tombstones.all_of(store.conn)

    def _line_range(self, value: str) -> tuple[Path, int, int] | None:
        from recalld_client.citation import parse_citation

        if access.exists(value):
            return None  # a file whose name looks like a citation
        try:
            cited = parse_citation(value)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if cited is None:
            return None
        return self._cited_note(value)

    def _cited_note(self, citation: object) -> tuple[Path, int, int]:
        """(note, first, last) of a citation of a memory note's lines."""
        from recalld_client.citation import parse_citation

        if not isinstance(citation, str):
            raise BadRequest("replace needs a citation such as notes/x.md#L3-L7")
        try:
            cited = parse_citation(citation)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if cited is None or cited.lines is None:
            raise BadRequest(f"{citation[:300]} is not a citation with lines (PATH#Lx-Ly)")
        config = self.engine.config
        with self.engine.reader() as store:
            target = access.resolve(
                cited.path,
                config.memory_roots(),
                config.session_globs(),
                make_filter(config.list("memory.extensions")),
                lambda p: row.source if (row := store.file(p)) is not None else None,
            )
            row = store.file(str(target.path))
        if target.source != "memory":
            raise BadRequest(
                "transcript lines cannot be removed or replaced (the agent owns the file): "
                "forget the whole session instead"
            )
        path = Path(row.path) if row is not None else target.path
        return path, cited.first, cited.first + cited.lines - 1

    def _check_lines(self, path: Path, lines: list[str], first: int, last: int) -> None:
        """Refuse to touch lines that are not what the index holds for them (cited before)."""
        changed = (
            f"{path}#L{first}-L{last} changed since it was indexed (cited): nothing was "
            "touched; search again and use the new citation"
        )
        if last > len(lines):
            raise BadRequest(f"{path} has {len(lines)} lines now: " + changed)
        with self.engine.reader() as store:
            row = store.file(str(path))
            if row is None:
                raise NotFound(f"{path} is not indexed: its lines cannot be checked")
            held = store.conn.execute(
                "SELECT start_line, end_line, text FROM chunks WHERE path = ? "
                "AND end_line >= ? AND start_line <= ?",
                (str(path), first, last),
            ).fetchall()
        # A citation is a passage recalld printed: a chunk's lines or an entry's. A range that
        # starts or ends elsewhere is stale (lines moved) or made up: refused, never guessed at.
        starts, ends = memory_write.entry_bounds(lines)
        starts |= {int(r[0]) for r in held}
        ends |= {int(r[1]) for r in held}
        if first not in starts or last not in ends:
            raise BadRequest(
                f"{path}#L{first}-L{last} is not a passage recalld cited (an entry or a search "
                "hit), or its lines moved since: nothing was touched; search again and use "
                "the new citation"
            )
        try:
            if row.hash == content_hash(path.read_bytes()):
                return  # the file is exactly as indexed
        except OSError as exc:
            raise NotFound(f"cannot read {path}: {exc.strerror}") from exc
        covered: set[int] = set()
        for start, end, text in held:
            if "\n".join(lines[int(start) - 1 : int(end)]) != text:
                raise BadRequest(changed)
            covered.update(range(int(start), int(end) + 1))
        if any(lines[n - 1].strip() and n not in covered for n in range(first, last + 1)):
            raise BadRequest(changed)

    def _forget_lines(self, path: Path, first: int, last: int) -> dict[str, Any]:
        started = time.monotonic()
        with memory_write.note_lock(path, self._lock_file):
            with self.engine.reader() as store:
                before = erase.chunk_hashes(store.conn, str(path))
            removed = memory_write.remove_lines(path, first, last, self._check_lines)
            edit = self._edited(path)

        def reindex() -> dict[str, Any]:
            self._index_up_to(path, edit)
            assert self.engine.writer is not None
            return erase.scrub(self.engine.writer.conn, before)

        scrubbed = self.on_writer(reindex)
        self.after_index()
        return {
            "forgotten": "lines",
            "value": f"{path}#L{first}-L{last}",
            "lines_removed": removed,
            **({"shared_files": 1} if self.shared(str(path), "memory") else {}),
            **scrubbed,
            "seconds": round(time.monotonic() - started, 3),
        }

    def _path_stone(self, value: str, *, must_exist: bool) -> Tombstone:
        """A tombstone for a path (a file or folder) or a glob inside the indexed folders."""
        config = self.engine.config
        roots = access.allowed_roots(config.memory_roots(), config.session_globs())
        memory_roots = config.memory_roots()
        text = os.path.expanduser(value)
        if not os.path.isabs(text):
            if not memory_roots:
                raise BadRequest("no memory folder to resolve a relative path against")
            text = str(memory_roots[0] / text)
        text = os.path.normpath(text)
        if glob.has_magic(text):
            base = glob_base(text)
            if not any(_inside(Path(os.path.realpath(base)), r) or _inside(base, r) for r in roots):
                raise Forbidden(f"{value[:300]} is outside the memory and session folders")
            return Tombstone("glob", text)
        indexed = self._indexed_under(text)
        real = os.path.realpath(text)
        if not any(_inside(Path(real), r) or _inside(Path(text), r) for r in roots):
            raise Forbidden(
                f"{value[:300]} is outside the memory and session folders recalld indexes"
            )
        if must_exist and not indexed and not access.exists(text):
            raise NotFound(f"{text} is not indexed and does not exist: nothing to forget")
        return Tombstone("path", text)

    def _indexed_under(self, text: str) -> bool:
        with self.engine.reader() as store:
            if store.file(text) is not None:
                return True
            prefix = text.rstrip(os.sep) + os.sep
            row = store.conn.execute(
                "SELECT 1 FROM files WHERE path >= ? AND path < ? LIMIT 1",
                (prefix, prefix + "\U0010ffff"),
            ).fetchone()
            return row is not None

    def _bury(self, stone: Tombstone) -> dict[str, Any]:
        """Record the tombstone, drop what it covers and scrub the index (on the writer)."""
        started = time.monotonic()

        def run() -> dict[str, Any]:
            engine = self.engine
            store = engine.writer
            assert store is not None
            roots = engine.config.memory_roots()
            covers = Forgotten([stone], roots)
            rows = store.files()
            paths = [path for path in rows if covers.covers(path) is not None]
            shared = sum(self.shared(path, rows[path].source) for path in paths)
            known = {(s.kind, s.value) for s in tombstones.all_of(store.conn)}
            if not paths and not on_disk(stone, roots) and (stone.kind, stone.value) not in known:
                # A typo'd glob or project would be kept as a tombstone for nothing, silently.
                raise NotFound(nothing_matches(stone))
            with store.conn:
                added = tombstones.add(store.conn, Tombstone(stone.kind, stone.value, time.time()))
            hashes: set[str] = set()
            chunks = 0
            for path in paths:
                hashes |= erase.chunk_hashes(store.conn, path)
                change = store.remove_file(path)
                engine.apply_change(change)
                chunks += len(change.removed)
            return {"new": added, "files_removed": len(paths), "chunks_removed": chunks,
                    **({"shared_files": shared} if shared else {}),
                    **erase.scrub(store.conn, hashes)}  # fmt: skip

        result = self.on_writer(run)
        return {
            "forgotten": stone.kind,
            "value": stone.value,
            **result,
            "seconds": round(time.monotonic() - started, 3),
        }

    def _undo(self, stone: Tombstone) -> dict[str, Any]:
        """Drop a tombstone; what it covered comes back with the next sync (started now)."""

        def run() -> bool:
            store = self.engine.writer
            assert store is not None
            with store.conn:
                return tombstones.remove(store.conn, stone.kind, stone.value)

        if not self.on_writer(run):
            raise NotFound(
                f"nothing forgotten as {stone.kind} {stone.value!r}: see `recalld forget --list`"
            )
        self.resync()
        return {"forgotten": stone.kind, "value": stone.value, "undone": True}


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
