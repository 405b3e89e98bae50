"""A transcript's tail state: where its indexing stopped, and what all transcripts add up to.

The state is written in the same transaction as the file's chunks, so it never runs ahead of them.
"""

from __future__ import annotations

import json
from typing import Any

import apsw


class SessionStates:
    """The store's transcript-state rows (a base of :class:`~recalld.index.store.Store`)."""

    conn: apsw.Connection

    def session_state(self, path: str) -> dict[str, Any] | None:
        """The tail state of a transcript."""
        row = self.conn.execute(
            "SELECT format, offset, line_count, messages, last_line_hash, inode, size, skipped, "
            "state FROM session_state WHERE path = ?",
            (path,),
        ).fetchone()
        if row is None:
            return None
        keys = ("format", "offset", "line_count", "messages", "last_line_hash", "inode", "size")
        out: dict[str, Any] = dict(zip(keys, row[:7], strict=True))
        out["skipped"] = int(row[7])
        out["state"] = json.loads(row[8])
        return out

    def set_session_state(self, path: str, state: dict[str, Any]) -> None:
        """Upsert a transcript's tail state (call inside the file's transaction)."""
        self.conn.execute(
            "INSERT OR REPLACE INTO session_state(path, format, offset, line_count, messages, "
            "last_line_hash, inode, size, skipped, state) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                path,
                state["format"],
                state["offset"],
                state["line_count"],
                state["messages"],
                state["last_line_hash"],
                state["inode"],
                state["size"],
                state.get("skipped", 0),
                json.dumps(state.get("state", {})),
            ),
        )

    def sessions_summary(self) -> dict[str, Any]:
        """Transcripts: files, messages indexed, malformed lines skipped, formats seen."""
        row = self.conn.execute(
            "SELECT count(*), coalesce(sum(messages), 0), coalesce(sum(skipped), 0), "
            "sum(json_extract(state, '$.long_lines')) FROM session_state"
        ).fetchone()
        formats = {
            str(f): int(n)
            for f, n in self.conn.execute(
                "SELECT format, count(*) FROM session_state GROUP BY format"
            )
        }
        # Per file, the worst first: which transcript lost lines, and how many were too long.
        by_file = [
            {"path": str(p), "skipped_lines": int(n), "long_lines": int(long or 0)}
            for p, n, long in self.conn.execute(
                "SELECT path, skipped, json_extract(state, '$.long_lines') FROM session_state "
                "WHERE skipped > 0 ORDER BY skipped DESC, path LIMIT 20"
            )
        ]
        return {
            "files": int(row[0]) if row else 0,
            "messages": int(row[1]) if row else 0,
            "skipped_lines": int(row[2]) if row else 0,
            "long_lines": int(row[3] or 0) if row else 0,
            "skipped_by_file": by_file,
            "formats": formats,
        }
