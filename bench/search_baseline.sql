-- The honest baseline of bench/search.py and of tests/integration/test_search_bm25_pruning.py:
-- BM25 over the same tables (same GIN index, same bm25 column of migration 0055, same IDF),
-- written by hand the plain way, without filters. Every chunk of the tenant's active content
-- that holds any query lexeme is scored, and the top n are kept by a bounded sort: the exact
-- ranking, at the cost of one score per match. (The gateway's keyword query until ADR 0225.)

-- name: bm25_every_match
WITH terms AS MATERIALIZED (
    SELECT search_term_id(t.lexeme) AS id,
           strip(array_to_tsvector(ARRAY[t.lexeme]))::text::tsquery AS one
    FROM unnest(to_tsvector('english', %(q)s::text)) AS t
), total AS (
    SELECT greatest(coalesce(sum(chunk_count), 0), 1) AS n
    FROM document_versions WHERE tenant_id = %(tenant_id)s AND is_active
), idf AS (
    -- df: the lexeme's active chunks of the tenant, counted from the GIN index's bitmap.
    SELECT t.id, ln(1 + (greatest(total.n, df.n) - df.n + 0.5) / (df.n + 0.5)) AS idf
    FROM terms t
    CROSS JOIN total
    CROSS JOIN LATERAL (
        SELECT count(*) AS n
        FROM chunk_fts f
        JOIN document_versions v ON v.doc_version_id = f.doc_version_id
                                AND v.tenant_id = f.tenant_id
        WHERE f.tenant_id = %(tenant_id)s AND v.is_active AND f.tsv @@ t.one) df
), query AS (
    SELECT format('{%%s}/1000000000',
                  string_agg(id || ':' || idf::real, ',' ORDER BY id))::sparsevec AS vec
    FROM (SELECT id, sum(idf) AS idf FROM idf GROUP BY id) per_dimension
)
SELECT f.chunk_id, v.doc_id, -(f.bm25 <#> query.vec) AS score
FROM chunk_fts f
JOIN document_versions v ON v.doc_version_id = f.doc_version_id AND v.tenant_id = f.tenant_id
CROSS JOIN query
WHERE f.tenant_id = %(tenant_id)s
  AND v.is_active
  AND f.tsv @@ replace(strip(to_tsvector('english', %(q)s::text))::text, ' ', ' | ')::tsquery
ORDER BY f.bm25 <#> query.vec, f.chunk_id
LIMIT %(n)s;
