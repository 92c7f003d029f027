-- The keyword list read from a covering index of postings instead of the GIN bitmap and the
-- chunk_fts heap (bench/search_postings.py, docs/decisions/0345). A prototype built by the
-- bench, not a migration: one row per (chunk, lexeme) with the document side of BM25, the
-- same weight as chunk_fts.bm25 (migration 0055's formula, lexemes merged by their id as
-- search_bm25_vector merges them).

-- name: build_postings
CREATE TABLE bench_postings AS
WITH t AS (
    SELECT f.tenant_id, f.doc_version_id, f.chunk_id, search_term_id(u.lexeme) AS term,
           coalesce(array_length(u.positions, 1), 1)::real AS tf
    FROM chunk_fts f, unnest(f.tsv) AS u
), merged AS (
    SELECT tenant_id, doc_version_id, chunk_id, term, sum(tf) AS tf FROM t
    GROUP BY tenant_id, doc_version_id, chunk_id, term
), dl AS (
    SELECT chunk_id, sum(tf) AS dl FROM merged GROUP BY chunk_id
)
SELECT m.tenant_id, m.term, m.chunk_id, m.doc_version_id,
       (m.tf * 2.2 / (m.tf + 1.2 * (0.25 + 0.75 * dl.dl / 100.0)))::real AS weight
FROM merged m JOIN dl USING (chunk_id)
ORDER BY m.tenant_id, m.term, m.chunk_id;

-- name: index_postings
CREATE INDEX bench_postings_term ON bench_postings (tenant_id, term, chunk_id)
    INCLUDE (doc_version_id, weight);

-- name: text_postings
-- text_candidates' ranking (no filters, no syntax) from the postings: the same IDF (df from
-- search_term_df over the active versions), score = Σ IDF · weight, every match scored.
WITH terms AS MATERIALIZED (
    SELECT t.lexeme, search_term_id(t.lexeme) AS id
    FROM unnest(to_tsvector('english', %(q)s::text)) AS t
), total AS (
    SELECT greatest(coalesce(sum(chunk_count), 0), 1) AS n
    FROM document_versions WHERE tenant_id = %(tenant_id)s AND is_active
), idf AS MATERIALIZED (
    SELECT t.id, ln(1 + (greatest(total.n, df.n) - df.n + 0.5) / (df.n + 0.5))::real AS idf
    FROM terms t CROSS JOIN total
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(s.df), 0) AS n
        FROM search_term_df s
        JOIN document_versions v ON v.doc_version_id = s.doc_version_id
                                AND v.tenant_id = s.tenant_id
        WHERE s.tenant_id = %(tenant_id)s AND s.lexeme = t.lexeme AND v.is_active) df
)
SELECT p.chunk_id, v.doc_id, sum(idf.idf * p.weight) AS score
FROM idf
JOIN bench_postings p ON p.tenant_id = %(tenant_id)s AND p.term = idf.id
JOIN document_versions v ON v.doc_version_id = p.doc_version_id AND v.tenant_id = p.tenant_id
WHERE v.is_active
GROUP BY p.chunk_id, v.doc_id
ORDER BY score DESC, p.chunk_id
LIMIT %(n)s;

-- name: matches_only
-- The floor of the GIN way: the bitmap and the heap visit of every match, nothing scored.
SELECT count(*) AS matches
FROM chunk_fts f
WHERE f.tenant_id = %(tenant_id)s
  AND f.tsv @@ replace(strip(to_tsvector('english', %(q)s::text))::text, ' ', ' | ')::tsquery;
