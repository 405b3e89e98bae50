"""Tombstones: what the user asked recalld to forget, kept in the index (migration 6).

A tombstone is a (kind, value) pair: ``path`` (one file, absolute), ``glob`` (a pattern over
absolute paths), ``session`` (a transcript's session id) or ``project`` (a transcript's project,
or a note's top folder). The indexers consult them before reading a file, so a forgotten
transcript stays out as it grows; they live in the index file itself, so they hold across
restarts and config reloads, and :func:`copy_from` carries them into a full rebuild. Which files a
tombstone covers is decided by :mod:`recalld.ingest.forgotten`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("path", "glob", "session", "project")


@dataclass(frozen=True)
class Tombstone:
    """One forgotten thing."""

    kind: str  # one of KINDS
    value: str
    created_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The wire form (``forget --list``)."""
        return {"kind": self.kind, "value": self.value, "created_at": self.created_at}


def all_of(conn: Any) -> list[Tombstone]:
    """Every tombstone, oldest first (an index from before migration 6 has none: a read-only
    connection does not migrate it)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'tombstones'").fetchone():
        return []
    return [
        Tombstone(str(k), str(v), float(t))
        for k, v, t in conn.execute(
            "SELECT kind, value, created_at FROM tombstones ORDER BY created_at, kind, value"
        )
    ]


def add(conn: Any, stone: Tombstone) -> bool:
    """Record ``stone`` (in the caller's transaction); False when it was there already."""
    conn.execute(
        "INSERT OR IGNORE INTO tombstones(kind, value, created_at) VALUES (?, ?, ?)",
        (stone.kind, stone.value, stone.created_at or time.time()),
    )
    return bool(conn.changes())


def remove(conn: Any, kind: str, value: str) -> bool:
    """Drop a tombstone (``--undo``); False when there was none."""
    conn.execute("DELETE FROM tombstones WHERE kind = ? AND value = ?", (kind, value))
    return bool(conn.changes())


def copy_from(conn: Any, other: Path) -> int:
    """Copy another index's tombstones into this one (a full rebuild keeps what was forgotten)."""
    conn.execute("ATTACH DATABASE ? AS old_stones", (f"file:{other}?mode=ro",))
    try:
        has = conn.execute(
            "SELECT 1 FROM old_stones.sqlite_master WHERE name = 'tombstones'"
        ).fetchone()
        if not has:
            return 0
        with conn:
            conn.execute("INSERT OR IGNORE INTO tombstones SELECT * FROM old_stones.tombstones")
            return int(conn.changes())
    finally:
        conn.execute("DETACH DATABASE old_stones")
