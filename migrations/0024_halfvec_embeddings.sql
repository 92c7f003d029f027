-- Embeddings as halfvec(384): half the bytes of vector(384) in the table and in the HNSW index,
-- at the same search results (docs/decisions/0156-halfvec-embeddings.md, measured by
-- bench/halfvec.py). Append-only: once applied anywhere, this file never changes.

-- The index goes first: its operator class (vector_cosine_ops) cannot index halfvec, and a
-- column type change would otherwise try to rebuild it as it is.
DROP INDEX idx_chunk_embeddings_hnsw;

-- Rewrites the table in place, each value rounded to float16 (the model's unit vectors are
-- well inside its range). Holds an ACCESS EXCLUSIVE lock on chunk_embeddings until the
-- transaction ends: ingestion and vector search wait for it (ADR 0156 on a big table).
ALTER TABLE chunk_embeddings
    ALTER COLUMN embedding TYPE halfvec(384) USING embedding::halfvec(384);

-- The same graph parameters as 0001; only the operator class changes. Queries must compare
-- halfvec with halfvec (gateway/search/queries.sql casts the query vector) to use it.
CREATE INDEX idx_chunk_embeddings_hnsw ON chunk_embeddings
    USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64);
