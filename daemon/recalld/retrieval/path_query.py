"""A query that is a file's path ranks that file first.

Someone who pastes ``notes/deploy/k8s.md`` (or its absolute path, or ``~/notes/...``) wants that
file; the channels see only the words ``notes``, ``deploy``, ``k8s``, ``md`` and may rank other
files above it, or miss it. A query of one word that looks like a path (a ``/`` in it, or a
known ending) is looked up among the indexed files: an exact path, else the files whose path
ends with it at a folder boundary. Its best-scoring chunk (else its first) goes to the top with a
score of 1, so that no floor drops it. Filters still apply.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from recalld.index.store import ChunkRow, Store
from recalld.retrieval import fusion
from recalld.retrieval.search_ranking import Ranking

ENDINGS = (".md", ".markdown", ".txt", ".jsonl", ".json")
MAX_MATCHES = 3  # a suffix shared by more files than this names none of them


def looks_like_path(query: str) -> bool:
    """One word with a folder separator or a file ending."""
    q = query.strip().strip("\"'`")
    if not q or any(c.isspace() for c in q) or len(q) > 4096:
        return False
    return "/" in q or q.lower().endswith(ENDINGS)


def matching_files(store: Store, query: str) -> list[str]:
    """Indexed paths the query names: itself (absolute, ``~`` expanded), else by suffix."""
    q = os.path.expanduser(query.strip().strip("\"'`"))
    if os.path.isabs(q):
        q = os.path.normpath(q)
        row = store.conn.execute("SELECT path FROM files WHERE path = ?", (q,)).fetchone()
        if row:
            return [str(row[0])]
    tail = "/" + q.lstrip("./").lstrip("/")
    escaped = tail.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = store.conn.execute(
        "SELECT path FROM files WHERE path LIKE ? ESCAPE '\\' LIMIT ?",
        ("%" + escaped, MAX_MATCHES + 1),
    ).fetchall()
    found = [str(r[0]) for r in rows if str(r[0]).endswith(tail)]  # LIKE ignores case
    return found if 0 < len(found) <= MAX_MATCHES else []


@dataclass(frozen=True)
class Filters:
    """The search's filters, as the channels apply them (the path prefix already absolute)."""

    sources: Sequence[str] | None = None
    path_prefix: str | None = None
    kinds: Sequence[str] | None = None

    def admit(self, row: ChunkRow) -> bool:
        return (
            (not self.sources or row.source in self.sources)
            and (not self.kinds or row.kind in self.kinds)
            and (not self.path_prefix or row.path.startswith(self.path_prefix))
        )


def put_first(ranking: Ranking, store: Store, query: str, filters: Filters) -> Ranking:
    """``ranking`` with a chunk of each file ``query`` names on top (unchanged when it names
    none); ``filters`` apply as in the channels."""
    if not looks_like_path(query):
        return ranking
    paths = matching_files(store, query)
    if not paths:
        return ranking
    by_id = {f.chunk_id: f for f in ranking.fused}
    rows = dict(ranking.rows)
    top: list[fusion.Fused] = []
    for path in paths:
        chunks = [c for c in store.file_chunks(path) if filters.admit(c)]
        if not chunks:
            continue
        best = _best(chunks, by_id)
        rows[best.id] = best
        old = by_id.get(best.id)
        vector, keyword = (old.vector, old.keyword) if old else (None, None)
        top.append(fusion.Fused(best.id, 1.0, vector, keyword))
        if ranking.notes is not None:  # --explain says why it is first
            note = ranking.notes.setdefault(best.id, {"vector": None, "keyword": None})
            note["fused"], note["path_match"] = 1.0, path
    if not top:
        return ranking
    first = {f.chunk_id for f in top}
    rest = [f for f in ranking.fused if f.chunk_id not in first]
    return replace(ranking, fused=top + rest, rows=rows)


def _best(chunks: list[ChunkRow], by_id: dict[int, fusion.Fused]) -> ChunkRow:
    """The chunk the channels liked best, else the file's first."""
    scored = [c for c in chunks if c.id in by_id]
    if scored:
        return max(scored, key=lambda c: by_id[c.id].score)
    return chunks[0]
