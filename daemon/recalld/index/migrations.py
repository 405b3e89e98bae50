"""Numbered schema migrations, applied in order and recorded in ``PRAGMA user_version``.

The vec0 table is not created here: its width depends on the provider, so the store creates it
when the index's vector identity is first set (see :meth:`recalld.index.store.Store.set_identity`).
"""

from __future__ import annotations

from typing import Any

from recalld.index import chunk_facts

MIGRATIONS: tuple[str, ...] = (
    # 1: the base schema.
    """
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE files (
        path       TEXT PRIMARY KEY,
        source     TEXT NOT NULL,
        size       INTEGER NOT NULL,
        mtime_ns   INTEGER NOT NULL,
        hash       TEXT NOT NULL,
        lines      INTEGER NOT NULL,
        indexed_at REAL NOT NULL
    );
    CREATE TABLE chunks (
        id         INTEGER PRIMARY KEY,
        path       TEXT NOT NULL,
        source     TEXT NOT NULL,
        start_line INTEGER NOT NULL,
        end_line   INTEGER NOT NULL,
        hash       TEXT NOT NULL,
        text       TEXT NOT NULL
    );
    CREATE INDEX chunks_by_path ON chunks(path, start_line);
    CREATE INDEX chunks_by_hash ON chunks(hash);
    -- External-content FTS5 kept in sync by triggers, so the text is stored once.
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text,
        content = 'chunks',
        content_rowid = 'id',
        tokenize = "porter unicode61 remove_diacritics 2"
    );
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    CREATE TRIGGER chunks_au AFTER UPDATE OF text ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TABLE embedding_cache (
        provider_key TEXT NOT NULL,
        model        TEXT NOT NULL,
        dims         INTEGER NOT NULL,
        text_hash    TEXT NOT NULL,
        vector       BLOB NOT NULL,
        created_at   REAL NOT NULL,
        PRIMARY KEY (provider_key, model, dims, text_hash)
    ) WITHOUT ROWID;
    CREATE TABLE session_state (
        path           TEXT PRIMARY KEY,
        format         TEXT NOT NULL,
        offset         INTEGER NOT NULL,
        line_count     INTEGER NOT NULL,
        messages       INTEGER NOT NULL,
        last_line_hash TEXT NOT NULL,
        inode          INTEGER NOT NULL,
        size           INTEGER NOT NULL,
        skipped        INTEGER NOT NULL DEFAULT 0,
        state          TEXT NOT NULL DEFAULT '{}'
    );
    """,
    # 2: a chunk's context (document title and heading path) as a second FTS5 column, so that a
    # term in a heading ranks its section higher (bm25 column weights, see store.keyword_search).
    """
    ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT '';
    DROP TRIGGER IF EXISTS chunks_ai;
    DROP TRIGGER chunks_ad;
    DROP TRIGGER chunks_au;
    DROP TABLE chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text,
        context,
        content = 'chunks',
        content_rowid = 'id',
        tokenize = "porter unicode61 remove_diacritics 2"
    );
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text, context) VALUES (new.id, new.text, new.context);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, context)
        VALUES ('delete', old.id, old.text, old.context);
    END;
    CREATE TRIGGER chunks_au AFTER UPDATE OF text, context ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, context)
        VALUES ('delete', old.id, old.text, old.context);
        INSERT INTO chunks_fts(rowid, text, context) VALUES (new.id, new.text, new.context);
    END;
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
    """,
    # 3: derived identifier/CJK tokens (recalld.index.ident_tokens) as a third FTS5 column, so that
    # ``ConnReset`` finds ``ERR_CONN_RESET`` and a word inside a Japanese sentence is findable.
    # ``recalld_ident`` is registered on every writable connection by the Store.
    """
    ALTER TABLE chunks ADD COLUMN ident TEXT NOT NULL DEFAULT '';
    UPDATE chunks SET ident = recalld_ident(text);
    DROP TRIGGER IF EXISTS chunks_ai;
    DROP TRIGGER chunks_ad;
    DROP TRIGGER chunks_au;
    DROP TABLE chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text,
        context,
        ident,
        content = 'chunks',
        content_rowid = 'id',
        tokenize = "porter unicode61 remove_diacritics 2"
    );
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text, context, ident)
        VALUES (new.id, new.text, new.context, new.ident);
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, context, ident)
        VALUES ('delete', old.id, old.text, old.context, old.ident);
    END;
    CREATE TRIGGER chunks_au AFTER UPDATE OF text, context, ident ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, context, ident)
        VALUES ('delete', old.id, old.text, old.context, old.ident);
        INSERT INTO chunks_fts(rowid, text, context, ident)
        VALUES (new.id, new.text, new.context, new.ident);
    END;
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
    """,
    # 4: chunk kinds. Memory chunks are notes, transcript chunks written before were messages
    # (their text is re-chunked by the full reindex that the new chunking identity triggers).
    # ``embed`` = 0 marks a chunk that gets no vector by policy: backfill skips it for good.
    """
    ALTER TABLE chunks ADD COLUMN kind TEXT NOT NULL DEFAULT 'note';
    ALTER TABLE chunks ADD COLUMN tool TEXT NOT NULL DEFAULT '';
    ALTER TABLE chunks ADD COLUMN embed INTEGER NOT NULL DEFAULT 1;
    UPDATE chunks SET kind = 'message' WHERE source = 'sessions';
    """,
    # 5: the keyword-only chunks counted from a small index instead of a scan of every chunk
    # (status counts them after each write: 23 ms a status at 100k chunks, now ~0).
    """
    CREATE INDEX chunks_keyword_only ON chunks(id) WHERE embed = 0;
    """,
    # 6: what searches filter by (content date, tags, a transcript's project and session) and
    # each hit's date; rows already indexed are back-filled by the writer (chunk_facts).
    chunk_facts.MIGRATION,
    # 7: what was forgotten (recalld.index.tombstones): files, globs, sessions and projects kept
    # out of the index, across restarts and rebuilds.
    """
    CREATE TABLE tombstones (
        kind       TEXT NOT NULL,
        value      TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (kind, value)
    );
    """,
    # 8: chunks' keyword rows written by the Store (``Store._insert_chunk``), not by a trigger.
    # A statement that fires a trigger runs in a statement transaction, and FTS5 writes its
    # pending terms out at each one (its xSavepoint): one tiny segment a chunk, merged again
    # and again. 25k chunks of a first sync: 1.06 s of CPU by the trigger, 0.46 s without.
    """
    DROP TRIGGER IF EXISTS chunks_ai;
    """,
)


def current_version(conn: Any) -> int:
    """The schema version recorded in the database."""
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: Any) -> int:
    """Apply pending migrations, each in its own transaction; returns the new version."""
    version = current_version(conn)
    if version > len(MIGRATIONS):
        from recalld.errors import IndexError_

        raise IndexError_(
            f"the index has schema version {version}, newer than this recalld "
            f"({len(MIGRATIONS)}): upgrade recalld or run `recalld reindex`"
        )
    for number, sql in enumerate(MIGRATIONS[version:], start=version + 1):
        with conn:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {number}")
    return len(MIGRATIONS)
