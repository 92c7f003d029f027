-- A keyword ranking that is BM25 (docs/decisions/0220), and chunks that carry their place in the
-- document (docs/decisions/0221). Append-only: once applied anywhere, this file never changes;
-- new constants for the ranking are a new migration that replaces the functions and
-- recomputes the column.

-- ── chunks: where each one sits, and the header it was embedded and indexed with ─────────────
-- heading_path: the Markdown headings above the chunk, outermost first ('{}' for none).
-- context: the contextual header (document title and heading path) that was put before the
-- chunk's text for the embedding model and the keyword index; the text itself stays as it was
-- in the document, so snippets, quotes and character offsets are unchanged.
ALTER TABLE chunks
    ADD COLUMN heading_path TEXT[] NOT NULL DEFAULT '{}',
    ADD COLUMN context TEXT NOT NULL DEFAULT '';

-- ── BM25 inside Postgres ──────────────────────────────────────────────────────────────────────
-- A lexeme's dimension in the sparse vectors: 31 bits of its md5, in 1 .. 999,999,999
-- (pgvector's sparsevec has at most 1,000,000,000 dimensions). md5 is the same on every
-- Postgres and every platform, unlike hashtext(). Two lexemes that collide share a dimension:
-- about one pair in a million-lexeme vocabulary, and only a chunk holding both is affected.
CREATE FUNCTION search_term_id(lexeme text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (('x' || left(md5(lexeme), 8))::bit(32)::bigint % 999999999)::integer + 1 $$;

-- The document side of BM25 for one chunk's tsvector: for each lexeme,
-- tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl)) with k1 = 1.2, b = 0.75, dl = the chunk's lexeme
-- occurrences and avgdl = 100, a constant (as Qdrant's and fastembed's BM25 sparse vectors do):
-- a chunk's weights never change when other documents arrive. The query side (gateway/search/
-- queries.sql) multiplies by each query lexeme's IDF, computed per tenant at query time, so
-- that score = the inner product of the two vectors.
CREATE FUNCTION search_bm25_vector(tsv tsvector) RETURNS sparsevec
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    WITH terms AS (
        SELECT search_term_id(lexeme) AS id,
               coalesce(array_length(positions, 1), 1)::real AS tf
        FROM unnest(tsv)
    ), chunk AS (
        SELECT coalesce(sum(tf), 0) AS dl FROM terms
    ), merged AS (
        SELECT id, sum(tf) AS tf FROM terms GROUP BY id
    )
    SELECT format('{%s}/1000000000', coalesce(string_agg(
               id || ':' || (tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * chunk.dl / 100.0)))::real,
               ',' ORDER BY id), ''))::sparsevec
    FROM merged, chunk
$$;

-- A stored generated column: Postgres fills it from tsv on every insert, whoever writes the row,
-- and for the rows already there (adding it rewrites chunk_fts under an ACCESS EXCLUSIVE lock:
-- about 10 s per 100,000 chunks on a 2-core machine; ADR 0220). New constants = drop the
-- column and add it again with the new function, in a new migration.
ALTER TABLE chunk_fts
    ADD COLUMN bm25 sparsevec GENERATED ALWAYS AS (search_bm25_vector(tsv)) STORED;

-- N of the IDF: the chunk count of a tenant's active versions, read by an index-only scan.
CREATE INDEX idx_doc_versions_active_chunks ON document_versions (tenant_id)
    INCLUDE (chunk_count) WHERE is_active;
