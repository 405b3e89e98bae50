"""Fresh vectors: the shared store's unindexed tail of vectors, schema migration 5.

Inserting a vector into pgvector's HNSW graph costs milliseconds at a million chunks (a search
of the graph for its neighbours, then their links rewritten): a push of 4,000 chunks spent ~95 %
of its time there, ~240 chunks/s, while its chunks, postings and vectors without the graph took
a few seconds. So a push writes its vectors to ``recalld.fresh_vectors``, a table with no index
that a search reads whole (exactly: every fresh vector is compared with the query), and the
daemons move them into ``recalld.vectors`` and its graph afterwards, a few hundred per
transaction (:func:`merge_fresh`), between pushes. A pushed chunk is searchable by its vector as
soon as the push commits; the graph catches up in the background.

Reading the fresh rows exactly costs a search about 0.5 us a row, so they are kept few: a push
that finds FRESH_CAP rows waiting merges before it sends more (the push then goes at the
graph's pace, as every push did before). A chunk is in one of the two tables, never both; a
merge moves rows in one transaction, so a search sees them in one place or the other. Any
daemon merges any collection's rows (the function runs as the schema's owner and only moves
them): a member who stops pushing leaves nothing stuck in the exact tail.
"""

from __future__ import annotations

#: Fresh vectors a push leaves for the merge before it merges first (the exact tail's size).
FRESH_CAP = 8192
#: Vectors moved into the graph per transaction (a re-push of a chunk being moved waits for it).
MERGE_ROWS = 128

#: The table's rows found by a vector search, as ``_ROWS``' ``found`` (the graph's top k and
#: the fresh rows' top k, the best k of both).
FOUND = (
    "(SELECT id, dist FROM ("
    "(SELECT chunk_id AS id, embedding <=> %(v)s AS dist FROM recalld.vectors "
    "WHERE collection = ANY(%(colls)s) ORDER BY embedding <=> %(v)s LIMIT %(k)s) "
    "UNION ALL "
    "(SELECT chunk_id, embedding <=> %(v)s FROM recalld.fresh_vectors "
    "WHERE collection = ANY(%(colls)s) ORDER BY 2 LIMIT %(k)s)"
    ") AS both_tables ORDER BY dist LIMIT %(k)s) AS found"
)

#: Makes the table with the store's width (by claim_identity, or by the migration when the
#: vectors table is already there); runs as its caller, so members cannot.
MAKE = """
    CREATE FUNCTION recalld.make_fresh_vectors(p_dims int) RETURNS void LANGUAGE plpgsql
        SET search_path = recalld, public, pg_temp
        AS $$
        BEGIN
            IF to_regclass('recalld.fresh_vectors') IS NOT NULL THEN
                RETURN;
            END IF;
            EXECUTE format(
                'CREATE TABLE recalld.fresh_vectors ('
                ' chunk_id bigint PRIMARY KEY REFERENCES recalld.chunks(id) ON DELETE CASCADE,'
                ' collection text NOT NULL, embedding vector(%s) NOT NULL)', p_dims);
            ALTER TABLE recalld.fresh_vectors ENABLE ROW LEVEL SECURITY;
            CREATE POLICY fresh_vectors_read ON recalld.fresh_vectors FOR SELECT
                USING (collection = ANY ((SELECT recalld.readable())::text[]));
            CREATE POLICY fresh_vectors_write ON recalld.fresh_vectors FOR ALL
                USING (collection = ANY ((SELECT recalld.owned())::text[]))
                WITH CHECK (collection = ANY ((SELECT recalld.owned())::text[]));
            GRANT SELECT, INSERT, UPDATE, DELETE ON recalld.fresh_vectors TO recalld_members;
        END $$;
"""

MIGRATION = f"""
    {MAKE}
    DO $$ BEGIN
        IF to_regclass('recalld.vectors') IS NOT NULL THEN
            PERFORM recalld.make_fresh_vectors((SELECT dims FROM recalld.identity));
        END IF;
    END $$;

    -- Moves up to p_limit fresh vectors into the graph; returns how many it moved.
    CREATE FUNCTION recalld.merge_fresh(p_limit int) RETURNS int LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = recalld, public, pg_temp
        AS $$
        DECLARE moved_rows int;
        BEGIN
            IF to_regclass('recalld.fresh_vectors') IS NULL THEN
                RETURN 0;
            END IF;
            WITH picked AS (
                SELECT chunk_id FROM recalld.fresh_vectors ORDER BY chunk_id
                LIMIT least(greatest(p_limit, 0), 10000) FOR UPDATE SKIP LOCKED
            ), moved AS (
                DELETE FROM recalld.fresh_vectors f USING picked p
                WHERE f.chunk_id = p.chunk_id
                RETURNING f.chunk_id, f.collection, f.embedding
            ), graph AS (
                INSERT INTO recalld.vectors (chunk_id, collection, embedding)
                SELECT chunk_id, collection, embedding FROM moved
                ON CONFLICT (chunk_id) DO NOTHING
            )
            SELECT count(*) INTO moved_rows FROM moved;
            RETURN moved_rows;
        END $$;

    -- Every collection's fresh vectors (a member reads only its own through the table).
    CREATE FUNCTION recalld.fresh_rows() RETURNS bigint LANGUAGE plpgsql STABLE
        SECURITY DEFINER SET search_path = recalld, public, pg_temp
        AS $$
        DECLARE n bigint := 0;
        BEGIN
            IF to_regclass('recalld.fresh_vectors') IS NOT NULL THEN
                SELECT count(*) INTO n FROM recalld.fresh_vectors;
            END IF;
            RETURN n;
        END $$;
"""
