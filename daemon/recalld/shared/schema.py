"""The shared store's schema, roles and row-level security, created and migrated by recalld.

An administrator (the embedded server's superuser, or the owner of a managed database) runs
:func:`migrate` once and :func:`add_member` per person. Each member connects as its own role
``recalld_<name>``; PostgreSQL itself then enforces that a member reads only the collections it
owns or that are shared with one of its teams, and writes only its own rows: recalld's code is
not what keeps a team's notes from an outsider.

The vector space is fixed by the first daemon that pushes (:func:`claim_identity`): the vectors
table gets its width then, and a daemon with another provider, model or width is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recalld.errors import BadRequest, ConfigError
from recalld.shared import fresh_vectors, graph, postings

#: Members are granted this role; it carries every privilege a member needs.
MEMBERS_ROLE = "recalld_members"

#: Migration 2's keyword function; migration 3 replaces it with its ranks normalized by length.
_KEYWORD_HITS = """
CREATE FUNCTION {signature}        kept text[];
        q tsquery;
    BEGIN
{kept}        IF cardinality(kept) = 0 THEN
            RETURN;
        END IF;
        q := to_tsquery('simple', array_to_string(kept, ' | '));
        RETURN QUERY EXECUTE
            'SELECT c.id, ts_rank_cd(c.terms, $1) FROM recalld.chunks c '
            'WHERE c.terms @@ $1 AND c.collection = ANY ($2) AND c.collection = ANY ($3) '
            'ORDER BY 2 DESC, 1 LIMIT $4'
            USING q, allowed, p_collections, least(greatest(p_limit, 0), 64);
    END $$;
""".replace("{signature}", postings.SIGNATURE).replace("{kept}", postings.KEPT_WORDS)

#: Migration 1: collections, files, chunks (keyword terms as a tsvector), members, identity,
#: policies.
_FIRST = """
    CREATE EXTENSION IF NOT EXISTS vector;
    CREATE SCHEMA IF NOT EXISTS recalld;
    CREATE TABLE recalld.identity (
        one          boolean PRIMARY KEY DEFAULT true CHECK (one),
        provider_key text NOT NULL,
        label        text NOT NULL,
        model        text NOT NULL,
        dims         integer NOT NULL
    );
    CREATE TABLE recalld.members (
        name  text PRIMARY KEY,
        role  name NOT NULL UNIQUE,
        teams text[] NOT NULL DEFAULT '{}'
    );
    CREATE TABLE recalld.collections (
        name       text PRIMARY KEY,
        owner      text NOT NULL REFERENCES recalld.members(name),
        team       text NOT NULL DEFAULT '',
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE recalld.files (
        collection text NOT NULL REFERENCES recalld.collections(name) ON DELETE CASCADE,
        path       text NOT NULL,
        hash       text NOT NULL,
        lines      integer NOT NULL,
        text       text NOT NULL DEFAULT '',
        deleted    boolean NOT NULL DEFAULT false,
        pushed_at  timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (collection, path)
    );
    CREATE TABLE recalld.chunks (
        id         bigserial PRIMARY KEY,
        collection text NOT NULL,
        path       text NOT NULL,
        start_line integer NOT NULL,
        end_line   integer NOT NULL,
        kind       text NOT NULL,
        hash       text NOT NULL,
        text       text NOT NULL,
        terms      tsvector NOT NULL,
        FOREIGN KEY (collection, path) REFERENCES recalld.files ON DELETE CASCADE
    );
    CREATE INDEX chunks_terms ON recalld.chunks USING gin (terms);
    CREATE INDEX chunks_by_file ON recalld.chunks (collection, path, start_line);

    -- Who is asking: the member whose role opened the session (not the definer's).
    CREATE FUNCTION recalld.me() RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
        SET search_path = recalld, pg_temp
        AS $$ SELECT name FROM recalld.members WHERE role = session_user $$;
    CREATE FUNCTION recalld.readable() RETURNS text[] LANGUAGE sql STABLE SECURITY DEFINER
        SET search_path = recalld, pg_temp
        AS $$
        SELECT coalesce(array_agg(c.name), '{}') FROM recalld.collections c
        WHERE c.owner = recalld.me()
           OR (c.team <> '' AND c.team = ANY (
                SELECT unnest(m.teams) FROM recalld.members m WHERE m.name = recalld.me()))
        $$;
    CREATE FUNCTION recalld.owned() RETURNS text[] LANGUAGE sql STABLE SECURITY DEFINER
        SET search_path = recalld, pg_temp
        AS $$
        SELECT coalesce(array_agg(name), '{}') FROM recalld.collections WHERE owner = recalld.me()
        $$;

    ALTER TABLE recalld.members ENABLE ROW LEVEL SECURITY;
    ALTER TABLE recalld.collections ENABLE ROW LEVEL SECURITY;
    ALTER TABLE recalld.files ENABLE ROW LEVEL SECURITY;
    ALTER TABLE recalld.chunks ENABLE ROW LEVEL SECURITY;
    CREATE POLICY members_self ON recalld.members FOR SELECT USING (role = session_user);
    CREATE POLICY collections_read ON recalld.collections FOR SELECT
        USING (name = ANY ((SELECT recalld.readable())::text[]));
    CREATE POLICY collections_write ON recalld.collections FOR ALL
        USING (owner = (SELECT recalld.me())) WITH CHECK (owner = (SELECT recalld.me()));
    CREATE POLICY files_read ON recalld.files FOR SELECT
        USING (collection = ANY ((SELECT recalld.readable())::text[]));
    CREATE POLICY files_write ON recalld.files FOR ALL
        USING (collection = ANY ((SELECT recalld.owned())::text[]))
        WITH CHECK (collection = ANY ((SELECT recalld.owned())::text[]));
    CREATE POLICY chunks_read ON recalld.chunks FOR SELECT
        USING (collection = ANY ((SELECT recalld.readable())::text[]));
    CREATE POLICY chunks_write ON recalld.chunks FOR ALL
        USING (collection = ANY ((SELECT recalld.owned())::text[]))
        WITH CHECK (collection = ANY ((SELECT recalld.owned())::text[]));

    -- The first daemon that pushes fixes the vector space; the vectors table is made then.
    CREATE FUNCTION recalld.claim_identity(p_key text, p_label text, p_model text, p_dims int)
        RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = recalld, public, pg_temp
        AS $$
        DECLARE cur recalld.identity;
        BEGIN
            IF p_dims < 1 OR p_dims > 16000 THEN
                RAISE EXCEPTION 'recalld: % dimensions is not a vector width', p_dims;
            END IF;
            LOCK TABLE recalld.identity IN EXCLUSIVE MODE;
            SELECT * INTO cur FROM recalld.identity;
            IF FOUND THEN
                IF (cur.provider_key, cur.model, cur.dims) IS DISTINCT FROM (p_key, p_model, p_dims)
                THEN
                    RAISE EXCEPTION USING ERRCODE = 'RC001', MESSAGE = format(
                        'the shared store holds vectors of %s (%s-d); this daemon embeds with %s '
                        '(%s-d): use the same provider and model as the store',
                        cur.label, cur.dims, p_label, p_dims);
                END IF;
                RETURN 'kept';
            END IF;
            INSERT INTO recalld.identity VALUES (true, p_key, p_label, p_model, p_dims);
            EXECUTE format(
                'CREATE TABLE recalld.vectors ('
                ' chunk_id bigint PRIMARY KEY REFERENCES recalld.chunks(id) ON DELETE CASCADE,'
                ' collection text NOT NULL, embedding vector(%s) NOT NULL)', p_dims);
            EXECUTE 'CREATE INDEX vectors_hnsw ON recalld.vectors '
                    'USING hnsw (embedding vector_cosine_ops)';
            EXECUTE 'ALTER TABLE recalld.vectors ENABLE ROW LEVEL SECURITY';
            EXECUTE 'CREATE POLICY vectors_read ON recalld.vectors FOR SELECT '
                    'USING (collection = ANY ((SELECT recalld.readable())::text[]))';
            EXECUTE 'CREATE POLICY vectors_write ON recalld.vectors FOR ALL '
                    'USING (collection = ANY ((SELECT recalld.owned())::text[])) '
                    'WITH CHECK (collection = ANY ((SELECT recalld.owned())::text[]))';
            EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON recalld.vectors TO recalld_members';
            RETURN 'claimed';
        END $$;
    """


def _claim_making_fresh_vectors(first: str) -> str:
    """Migration 1's claim_identity, replaced by one that also makes the fresh vectors' table."""
    start = first.index("CREATE FUNCTION recalld.claim_identity")
    end = first.index("END $$;", start) + len("END $$;")
    return (
        first[start:end]
        .replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        .replace(
            "RETURN 'claimed';",
            "PERFORM recalld.make_fresh_vectors(p_dims);\n            RETURN 'claimed';",
            1,
        )
    )


MIGRATIONS: tuple[str, ...] = (
    # 1: see _FIRST.
    _FIRST,
    # 2: keyword candidates through the GIN index. With row-level security on, PostgreSQL
    # applies the policy before any qual that is not leakproof (tsvector @@ is not), so a
    # member's keyword search read every readable row instead of the index. This function runs
    # as the schema's owner (no policy) and applies the member's readable collections itself.
    _KEYWORD_HITS,
    # 3: keyword ranks divided by 1 + the log of the chunk's length (ts_rank_cd's
    # normalization 1): a long chunk (a tool output, a whole abstract) no longer outranks a
    # short one for matching the same words once each. Measured with recalld's terms and the
    # qrels of scifact-train, cranfield and cisi (docs/DECISIONS.md): nDCG@10 up on all three.
    _KEYWORD_HITS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1).replace(
        "ts_rank_cd(c.terms, $1)", "ts_rank_cd(c.terms, $1, 1)", 1
    ),
    # 4: keyword postings by impact (recalld.shared.postings): a search reads the first few
    # hundred postings of each word instead of ranking every chunk that holds one.
    postings.MIGRATION,
    # 5: fresh vectors (recalld.shared.fresh_vectors): a push's vectors are searched exactly
    # until the daemons merge them into the HNSW graph, so a push is not paced by the graph.
    fresh_vectors.MIGRATION + _claim_making_fresh_vectors(_FIRST),
    # 6: a new store's HNSW graph built with ef_construction 128 (recalld.shared.graph); an
    # older store's graph is rebuilt after the migrations, concurrently (rebuild_if_older).
    graph.claim_with_options(_claim_making_fresh_vectors(_FIRST)),
    # 7: no GIN index on the chunks' terms. Since migration 4 no query reads it (keyword_hits
    # reads the postings, then ranks those chunks by id), yet every pushed chunk paid for it:
    # ~11 % of a push's chunk inserts on the bench's 1M store, and a bulk load's time and disk.
    "DROP INDEX IF EXISTS recalld.chunks_terms",
)

_GRANTS = f"""
    GRANT USAGE ON SCHEMA recalld TO {MEMBERS_ROLE};
    GRANT SELECT ON recalld.identity, recalld.members TO {MEMBERS_ROLE};
    GRANT SELECT, INSERT, UPDATE, DELETE ON recalld.collections, recalld.files, recalld.chunks
        TO {MEMBERS_ROLE};
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA recalld TO {MEMBERS_ROLE};
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA recalld TO {MEMBERS_ROLE};
"""


def migrate(conn: Any, say: Callable[[str], None] = lambda _: None) -> int:
    """Create or bring the schema up to date (as an administrator, autocommit), then rebuild a
    graph built before migration 6; returns the schema's version. ``say`` hears of long work."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(7321001)")  # two admins at once: one migrates
        conn.execute(
            f"DO $$ BEGIN CREATE ROLE {MEMBERS_ROLE} NOLOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS public.recalld_version (version integer)")
        row = conn.execute("SELECT max(version) FROM public.recalld_version").fetchone()
        version = int(row[0] or 0)
        if version > len(MIGRATIONS):
            raise ConfigError(
                f"the shared store has schema version {version}, newer than this recalld "
                f"({len(MIGRATIONS)}): upgrade recalld"
            )
        for number, sql in enumerate(MIGRATIONS[version:], start=version + 1):
            conn.execute(sql)
            conn.execute("INSERT INTO public.recalld_version VALUES (%s)", (number,))
        conn.execute(_GRANTS)
    graph.rebuild_if_older(conn, say)
    return len(MIGRATIONS)


class MemberExists(BadRequest):
    """``add-member`` for a name that already has a login: its password is kept."""


def add_member(
    conn: Any, name: str, password: str, teams: list[str] | None, *, reset_password: bool = False
) -> tuple[str, list[str]]:
    """Create a member's login role and its teams, as an administrator; (role, teams).

    A member who is already there is refused (:class:`MemberExists`): a new password would lock
    the member's other machines out. ``reset_password`` sets the new one, and its teams when
    ``teams`` is given (None keeps them).
    """
    from psycopg import sql

    from recalld.shared.settings import role_of

    role = role_of(name)
    with conn.transaction():
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if exists and not reset_password:
            raise MemberExists(
                f"{name} is already a member (login {role}); its password is unchanged. A new "
                f"one would lock {name}'s other machines out: to set one anyway, run `recalld "
                f"shared add-member {name} --reset-password` and give it to every machine of "
                f"{name}'s"
            )
        verb = sql.SQL("ALTER ROLE" if exists else "CREATE ROLE")
        conn.execute(
            sql.SQL("{} {} LOGIN PASSWORD {}").format(
                verb, sql.Identifier(role), sql.Literal(password)
            )
        )
        conn.execute(
            sql.SQL("GRANT {} TO {}").format(sql.Identifier(MEMBERS_ROLE), sql.Identifier(role))
        )
        row = conn.execute(
            "INSERT INTO recalld.members(name, role, teams) VALUES (%s, %s, %s) "
            "ON CONFLICT (name) DO UPDATE SET teams = COALESCE(%s, recalld.members.teams) "
            "RETURNING teams",
            (name, role, teams or [], teams),
        ).fetchone()
    return role, list(row[0])
