"""The shared store's keyword postings: schema migration 4.

A keyword search used to rank every chunk holding one of the query's words: ``ts_rank_cd`` over
each matching row's ``tsvector``, ~17,000 rows for a median query at 1M chunks, ~200 ms. The
rank it computes, with normalization 1 and default weights, is a sum over the query's words:

    ts_rank_cd(terms, w1 | w2 | ..., 1) = 0.1 * sum over words of tf(word) / ln(len + 1)

(each occurrence of an OR query's word is a cover of its own, worth 0.1; ``len`` counts the
chunk's positions). So each word's part, its *impact*, is kept per (collection, word, chunk) in
``recalld.postings``, indexed by impact, descending. A search reads the first DEPTH postings of
each word, sums the impacts read per chunk, and ranks the RANKED best of those exactly with
``ts_rank_cd``. It is exact when no word has more than DEPTH postings in a collection; past
that, a chunk whose words all lie deeper than DEPTH is missed. On the bench's 1M store and 200
real queries: 12.5 ms p50 instead of ~200 ms, and the same top 10 ranks as ranking every match
in 187 (docs/DECISIONS.md). The threshold algorithm's bound (grow the depth until no chunk
unread can beat the 10th) was measured and left out: it was met early so rarely that the
rounds cost 2-3x for 1-12 more queries of 200.

Rows are kept by statement triggers on ``recalld.chunks`` (every insert, delete, cascade and
update, whoever makes it), as the table's owner: members have no privilege on postings, and
``keyword_hits`` applies the member's readable collections itself, as it did before.
"""

from __future__ import annotations

#: Postings read per word and collection (all of them for a word with fewer).
DEPTH = 512
#: Chunks found that are ranked exactly (the best by the sum of their impacts read).
RANKED = 512

#: The postings' one index (a bulk load drops it first and builds it after, as it does HNSW).
INDEX = (
    "CREATE INDEX postings_by_impact ON recalld.postings (collection, term, impact DESC, chunk_id)"
)

#: keyword_hits' name, arguments, result, rights and first variable (migrations 2 and 4).
SIGNATURE = """recalld.keyword_hits(p_terms text[], p_collections text[], p_limit int)
    RETURNS TABLE (id bigint, rank real) LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = recalld, pg_catalog, pg_temp
    AS $$
    DECLARE
        allowed text[] := recalld.readable();
"""

KEPT_WORDS = """
        -- Letters and digits only (what recalld's tokenizer makes): nothing else reaches
        -- the tsquery. Words in over 2 % of the chunks (ANALYZE's element statistics) are
        -- dropped unless nothing else is left: an OR of them ranks a large part of the store.
        WITH asked AS (
            SELECT DISTINCT t FROM unnest(p_terms[1:32]) AS t WHERE t ~ '^[[:alnum:]]{1,64}$'
        ), stats AS (
            SELECT e.w, e.f FROM pg_stats s,
                unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(w, f)
            WHERE s.schemaname = 'recalld' AND s.tablename = 'chunks' AND s.attname = 'terms'
        ), scored AS (
            SELECT a.t, coalesce(st.f, 0) AS f FROM asked a LEFT JOIN stats st ON st.w = a.t
        )
        SELECT coalesce(array_agg(t), '{}') INTO kept FROM scored
        WHERE f <= 0.02 OR t = (SELECT t FROM scored ORDER BY f, t LIMIT 1);
"""

_TOP = (
    "WITH got AS (SELECT p.chunk_id, p.impact "
    " FROM unnest($2::text[]) AS cl(c) CROSS JOIN unnest($3::text[]) AS w(t) "
    " CROSS JOIN LATERAL (SELECT x.chunk_id, x.impact FROM recalld.postings x "
    "  WHERE x.collection = cl.c AND x.term = w.t ORDER BY x.impact DESC LIMIT $5) p), "
    "best AS MATERIALIZED (SELECT chunk_id FROM got GROUP BY chunk_id "
    " ORDER BY sum(impact) DESC, chunk_id LIMIT $6) "
    "SELECT c.id, ts_rank_cd(c.terms, $1, 1) FROM recalld.chunks c "
    "JOIN best b ON b.chunk_id = c.id ORDER BY 2 DESC, 1 LIMIT $4"
)

KEYWORD_HITS = f"""
    CREATE OR REPLACE FUNCTION {SIGNATURE}        colls text[];
        kept text[];
        q tsquery;
        k int := least(greatest(p_limit, 0), 64);
    BEGIN
        {KEPT_WORDS}
        SELECT coalesce(array_agg(DISTINCT c), '{{}}') INTO colls
            FROM unnest(p_collections) AS c WHERE c = ANY (allowed);
        IF cardinality(kept) = 0 OR cardinality(colls) = 0 OR k = 0 THEN
            RETURN;
        END IF;
        q := to_tsquery('simple', array_to_string(kept, ' | '));
        RETURN QUERY EXECUTE '{_TOP}' USING q, colls, kept, k, {DEPTH}, {RANKED};
    END $$;
"""

MIGRATION = f"""
    -- tf / ln(len + 1) of each word of a chunk: its part of ts_rank_cd(terms, q, 1) / 0.1.
    CREATE FUNCTION recalld.impacts(p_terms tsvector)
        RETURNS TABLE (term text, impact real) LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
        AS $$
        WITH u AS (SELECT lexeme, greatest(cardinality(positions), 1) AS tf FROM unnest(p_terms))
        SELECT u.lexeme, (u.tf / ln((SELECT sum(tf) FROM u)::float8 + 1))::real FROM u
        $$;
    CREATE TABLE recalld.postings (
        collection text NOT NULL,
        term       text NOT NULL,
        impact     real NOT NULL,
        chunk_id   bigint NOT NULL
    );
    -- No policy and no grant: only the owner's functions below read or write it.
    ALTER TABLE recalld.postings ENABLE ROW LEVEL SECURITY;
    INSERT INTO recalld.postings
        SELECT c.collection, i.term, i.impact, c.id
        FROM recalld.chunks c, recalld.impacts(c.terms) i;
    {INDEX};

    -- A removed chunk's rows are found by their whole key: impacts() gives the same values.
    CREATE FUNCTION recalld.keep_postings() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = recalld, pg_catalog, pg_temp
        AS $$
        BEGIN
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                DELETE FROM recalld.postings p USING (
                    SELECT o.collection, i.term, i.impact, o.id FROM removed o,
                        recalld.impacts(o.terms) i) AS d(collection, term, impact, id)
                WHERE p.collection = d.collection AND p.term = d.term
                    AND p.impact = d.impact AND p.chunk_id = d.id;
            END IF;
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                INSERT INTO recalld.postings
                    SELECT n.collection, i.term, i.impact, n.id FROM added n,
                        recalld.impacts(n.terms) i;
            END IF;
            RETURN NULL;
        END $$;
    CREATE TRIGGER chunks_postings_insert AFTER INSERT ON recalld.chunks
        REFERENCING NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION recalld.keep_postings();
    CREATE TRIGGER chunks_postings_delete AFTER DELETE ON recalld.chunks
        REFERENCING OLD TABLE AS removed
        FOR EACH STATEMENT EXECUTE FUNCTION recalld.keep_postings();
    CREATE TRIGGER chunks_postings_update AFTER UPDATE ON recalld.chunks
        REFERENCING OLD TABLE AS removed NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION recalld.keep_postings();
    {KEYWORD_HITS}
"""
