-- Search and answers (gateway/search/service.py). Read-only: the worker owns these tables
-- (specs/gateway-worker-ingestion.md §2.5). Every query names the caller's tenant, and every
-- query joins document_versions with is_active so that only what is served today is found
-- (§2.2). The optional filters are one shape: a NULL parameter means "no filter".

-- name: text_candidates
-- The keyword list: chunks ranked by BM25 (docs/decisions/0220), best first, with the score;
-- the exact top n, found without scoring every match (docs/decisions/0225).
-- Which chunks: those holding ANY of the query's lexemes (english stemming, stop words out),
-- or, when the user typed search syntax (%(syntax)s: "a phrase", -word, OR), those matching
-- websearch_to_tsquery, which keeps its AND, phrase and NOT. The GIN index on tsv finds them;
-- the tsquery expressions of the parameters are folded into constants when the statement is
-- planned (a custom plan each execution: search_settings), so the planner sees the real query.
-- Score: each chunk's bm25 column holds the document side of BM25 per lexeme (migration 0055);
-- the query side is each query lexeme's IDF, ln(1 + (N − df + 0.5) / (df + 0.5)), where df is
-- the count of the tenant's active chunks under the filters that hold the lexeme (kept per
-- version by migration 0056's triggers), and N the tenant's active chunk count. The score is the inner product of the two sparse vectors.
-- Pruning (MaxScore): a document-side weight is below k1 + 1 = 2.2, so a lexeme adds at most
-- 2.2·IDF (BOUND, with room for float4 rounding). θ, the n-th best exact score among the chunks
-- holding the rarest lexeme, is a score n chunks reach; a chunk holding none of the rarer
-- lexemes whose bounds, with every commoner one's, reach θ scores below θ and cannot be in the
-- top n. So only chunks holding one of those rarer ("essential") lexemes are scored. Fewer than
-- n probe chunks, or typed syntax: θ = 0, every lexeme is essential, every match is scored.
-- The filters on documents are one EXISTS: without filters it folds to TRUE and no join is made.
WITH terms AS MATERIALIZED (
    -- One tsquery per query lexeme, quoted by tsvector's own output; computed once each.
    SELECT t.lexeme, search_term_id(t.lexeme) AS id,
           strip(array_to_tsvector(ARRAY[t.lexeme]))::text::tsquery AS one
    FROM unnest(to_tsvector('english', %(q)s::text)) AS t
), total AS (
    SELECT greatest(coalesce(sum(chunk_count), 0), 1) AS n
    FROM document_versions WHERE tenant_id = %(tenant_id)s AND is_active
), idf AS MATERIALIZED (
    -- df: the lexeme's chunks among the tenant's active content under the filters, summed
    -- over the versions' own counts (search_term_df, migration 0056), no chunk is read.
    SELECT t.id, t.one, ln(1 + (greatest(total.n, df.n) - df.n + 0.5) / (df.n + 0.5)) AS idf
    FROM terms t
    CROSS JOIN total
    CROSS JOIN LATERAL (
        SELECT coalesce(sum(s.df), 0) AS n
        FROM search_term_df s
        JOIN document_versions v ON v.doc_version_id = s.doc_version_id
                                AND v.tenant_id = s.tenant_id
        WHERE s.tenant_id = %(tenant_id)s
          AND s.lexeme = t.lexeme
          AND v.is_active
          AND (%(doc_ids)s::uuid[] IS NULL AND %(source_id)s::uuid IS NULL
               AND %(file_type)s::text IS NULL AND %(after)s::timestamptz IS NULL
               AND %(before)s::timestamptz IS NULL
               OR EXISTS (SELECT FROM documents d
                          WHERE d.doc_id = v.doc_id AND d.tenant_id = v.tenant_id
                            AND (%(doc_ids)s::uuid[] IS NULL OR d.doc_id = ANY(%(doc_ids)s::uuid[]))
                            AND (%(source_id)s::uuid IS NULL OR d.source_id = %(source_id)s::uuid)
                            AND (%(file_type)s::text IS NULL OR d.source_type = %(file_type)s::text)
                            AND (%(after)s::timestamptz IS NULL OR d.created_at >= %(after)s::timestamptz)
                            AND (%(before)s::timestamptz IS NULL OR d.created_at < %(before)s::timestamptz)))) df
), query AS MATERIALIZED (
    SELECT format('{%%s}/1000000000',
                  string_agg(id || ':' || idf::real, ',' ORDER BY id))::sparsevec AS vec
    FROM (SELECT id, sum(idf) AS idf FROM idf GROUP BY id) per_dimension
), probe AS MATERIALIZED (
    -- The exact scores of the best n chunks holding the rarest lexeme. Skipped for syntax, and
    -- where it cannot pay: a chunk holding a lexeme once scores about 1.2·IDF, so θ falls
    -- below the commonest lexeme's bound (2.2·IDF) unless the IDFs differ by about 2.2 / 1.2;
    -- below 1.5 the probe only costs time (skipping it is always exact: θ = 0).
    SELECT -(f.bm25 <#> query.vec) AS score
    FROM chunk_fts f
    JOIN document_versions v ON v.doc_version_id = f.doc_version_id AND v.tenant_id = f.tenant_id
    CROSS JOIN query
    WHERE NOT %(syntax)s::boolean
      AND (SELECT max(idf) > 1.5 * min(idf) FROM idf)
      AND f.tenant_id = %(tenant_id)s
      AND v.is_active
      AND f.tsv @@ (SELECT one FROM idf ORDER BY idf DESC, id LIMIT 1)
      AND (%(doc_ids)s::uuid[] IS NULL AND %(source_id)s::uuid IS NULL
           AND %(file_type)s::text IS NULL AND %(after)s::timestamptz IS NULL
           AND %(before)s::timestamptz IS NULL
           OR EXISTS (SELECT FROM documents d
                      WHERE d.doc_id = v.doc_id AND d.tenant_id = v.tenant_id
                        AND (%(doc_ids)s::uuid[] IS NULL OR d.doc_id = ANY(%(doc_ids)s::uuid[]))
                        AND (%(source_id)s::uuid IS NULL OR d.source_id = %(source_id)s::uuid)
                        AND (%(file_type)s::text IS NULL OR d.source_type = %(file_type)s::text)
                        AND (%(after)s::timestamptz IS NULL OR d.created_at >= %(after)s::timestamptz)
                        AND (%(before)s::timestamptz IS NULL OR d.created_at < %(before)s::timestamptz)))
    ORDER BY score DESC
    LIMIT %(n)s
), theta AS (
    SELECT CASE WHEN count(*) >= %(n)s THEN min(score) ELSE 0 END AS t FROM probe
), essential AS MATERIALIZED (
    -- BOUND = 2.201 > 2.2: the stored weights and IDFs are float4, rounded either way.
    SELECT string_agg(one::text, ' | ')::tsquery AS match
    FROM (SELECT one, sum(2.201 * idf) OVER (ORDER BY idf, id ROWS UNBOUNDED PRECEDING) AS most
          FROM idf) bounded, theta
    WHERE most >= theta.t
)
SELECT f.chunk_id, v.doc_id, -(f.bm25 <#> query.vec) AS score
FROM chunk_fts f
JOIN document_versions v ON v.doc_version_id = f.doc_version_id AND v.tenant_id = f.tenant_id
CROSS JOIN query
WHERE f.tenant_id = %(tenant_id)s
  AND v.is_active
  AND f.tsv @@ (CASE WHEN %(syntax)s::boolean
                     THEN websearch_to_tsquery('english', %(q)s::text)
                     ELSE (SELECT match FROM essential) END)
  AND (%(doc_ids)s::uuid[] IS NULL AND %(source_id)s::uuid IS NULL
       AND %(file_type)s::text IS NULL AND %(after)s::timestamptz IS NULL
       AND %(before)s::timestamptz IS NULL
       OR EXISTS (SELECT FROM documents d
                  WHERE d.doc_id = v.doc_id AND d.tenant_id = v.tenant_id
                    AND (%(doc_ids)s::uuid[] IS NULL OR d.doc_id = ANY(%(doc_ids)s::uuid[]))
                    AND (%(source_id)s::uuid IS NULL OR d.source_id = %(source_id)s::uuid)
                    AND (%(file_type)s::text IS NULL OR d.source_type = %(file_type)s::text)
                    AND (%(after)s::timestamptz IS NULL OR d.created_at >= %(after)s::timestamptz)
                    AND (%(before)s::timestamptz IS NULL OR d.created_at < %(before)s::timestamptz)))
-- By the output column, so the inner product is computed once a match, not once for the sort
-- and again for the output (docs/decisions/0345); score DESC is <#> ascending, exactly.
ORDER BY score DESC, f.chunk_id
LIMIT %(n)s;

-- name: vector_candidates
-- The chunks nearest the query vector by cosine distance. Written as ORDER BY embedding <=> q
-- LIMIT n so the planner walks the HNSW index (idx_chunk_embeddings_hnsw); the index is shared
-- by all tenants, so the tenant and activity filters apply to what the walk returns, and the
-- caller turns on pgvector's iterative scan (search_settings below) so that the walk goes on until n
-- rows pass them (docs/decisions/0105, 0158). Only
-- versions embedded by the gateway's own model are compared: other models' vectors live in
-- another space (docs/decisions/0004). The query is cast to halfvec, the column's type: the
-- index's operator class is halfvec_cosine_ops (migration 0024, docs/decisions/0156).
SELECT e.chunk_id, v.doc_id, (e.embedding <=> %(vector)s::halfvec) AS distance
FROM chunk_embeddings e
JOIN document_versions v ON v.doc_version_id = e.doc_version_id AND v.tenant_id = e.tenant_id
JOIN documents d ON d.doc_id = v.doc_id AND d.tenant_id = v.tenant_id
WHERE e.tenant_id = %(tenant_id)s
  AND v.is_active
  AND v.embedding_model = %(model)s
  AND (%(doc_ids)s::uuid[] IS NULL OR d.doc_id = ANY(%(doc_ids)s::uuid[]))
  AND (%(source_id)s::uuid IS NULL OR d.source_id = %(source_id)s::uuid)
  AND (%(file_type)s::text IS NULL OR d.source_type = %(file_type)s::text)
  AND (%(after)s::timestamptz IS NULL OR d.created_at >= %(after)s::timestamptz)
  AND (%(before)s::timestamptz IS NULL OR d.created_at < %(before)s::timestamptz)
ORDER BY e.embedding <=> %(vector)s::halfvec
LIMIT %(n)s;

-- name: vector_candidates_exact
-- vector_candidates without the HNSW index: every active chunk of the tenant compared, the n
-- nearest by exact cosine distance, ties by chunk id. Ask judges its evidence on this
-- neighbourhood (its lift's background is the median of ranks 10-40): the approximate walk's
-- neighbourhood depends on the graph, which another build of the same corpus draws anew, and a
-- question's decision moved with it (lift 0.23x -> 0.243, docs/decisions/0420). OFFSET 0
-- keeps the subquery whole, so the planner cannot order it by the index.
SELECT chunk_id, doc_id, distance
FROM (SELECT e.chunk_id, v.doc_id, (e.embedding <=> %(vector)s::halfvec) AS distance
      FROM chunk_embeddings e
      JOIN document_versions v ON v.doc_version_id = e.doc_version_id
                              AND v.tenant_id = e.tenant_id
      JOIN documents d ON d.doc_id = v.doc_id AND d.tenant_id = v.tenant_id
      WHERE e.tenant_id = %(tenant_id)s
        AND v.is_active
        AND v.embedding_model = %(model)s
        AND (%(doc_ids)s::uuid[] IS NULL OR d.doc_id = ANY(%(doc_ids)s::uuid[]))
        AND (%(source_id)s::uuid IS NULL OR d.source_id = %(source_id)s::uuid)
        AND (%(file_type)s::text IS NULL OR d.source_type = %(file_type)s::text)
        AND (%(after)s::timestamptz IS NULL OR d.created_at >= %(after)s::timestamptz)
        AND (%(before)s::timestamptz IS NULL OR d.created_at < %(before)s::timestamptz)
      OFFSET 0) near
ORDER BY distance, chunk_id
LIMIT %(n)s;

-- name: search_settings
-- First statement of a search's candidate reads, for this transaction only:
-- - plan_cache_mode: the candidate statements are prepared (parsed once a connection) and
--   planned anew for each execution's own parameters, as an unprepared statement is: the
--   generic plan of their "NULL = no filter" shapes scans every chunk of the tenant instead of
--   the GIN or HNSW index (ADR 0158), and text_candidates' tsquery expressions must fold into
--   constants (ADR 0225). Preparing saves Postgres the parse of these long statements, and the
--   gateway their conversion and sending, each request (ADR 0318).
-- - the HNSW walk of vector_candidates: a candidate list of ef_search, and strict_order
--   iterative scans (pgvector 0.8), which walk on, still in distance order, while the tenant and
--   activity filters leave fewer than LIMIT rows (up to hnsw.max_scan_tuples, 20,000 by
--   default). ADR 0158.
SELECT set_config('plan_cache_mode', 'force_custom_plan', true),
       set_config('hnsw.ef_search', %(ef_search)s, true),
       set_config('hnsw.iterative_scan', 'strict_order', true);

-- name: search_settings_reset
-- After the candidate statements: the transaction's later statements (the hits, prepared by the
-- driver after a few runs) may use their generic plans again.
RESET plan_cache_mode;

-- name: hits
-- What a result shows, for the fused chunk ids; re-checks tenant and activity, so a version
-- deactivated since the candidates were read is dropped, never shown. The snippet marks the
-- query's words (any of them, or the typed syntax's, as text_candidates matched) with
-- U+E000/U+E001 (removed from the text first), which service.py turns into escaped HTML with
-- <mark>.
SELECT c.chunk_id, v.doc_id, v.version_number, c.ordinal, c.page, c.heading_path, d.title,
       a.doc_id AS parent_doc_id, p.title AS parent_title, a.message_subject,
       ts_headline('english',
                   translate(c.text, U&'\E000\E001', ''),
                   CASE WHEN %(syntax)s::boolean
                        THEN websearch_to_tsquery('english', %(q)s::text)
                        ELSE replace(strip(to_tsvector('english', %(q)s::text))::text,
                                     ' ', ' | ')::tsquery END,
                   U&'StartSel=\E000, StopSel=\E001, MaxWords=35, MinWords=15, MaxFragments=2, FragmentDelimiter=" … "'
       ) AS snippet,
       c.text
FROM chunks c
JOIN document_versions v ON v.doc_version_id = c.doc_version_id AND v.tenant_id = c.tenant_id
JOIN documents d ON d.doc_id = v.doc_id AND d.tenant_id = v.tenant_id
-- An e-mail attachment's hit names its message (docs/decisions/0250): the message document,
-- and the Subject of the version the attachment came from.
LEFT JOIN message_attachments a ON a.child_doc_id = d.doc_id AND a.tenant_id = d.tenant_id
LEFT JOIN documents p ON p.doc_id = a.doc_id AND p.tenant_id = a.tenant_id
WHERE c.tenant_id = %(tenant_id)s
  AND v.is_active
  AND c.chunk_id = ANY(%(chunk_ids)s::uuid[]);

-- name: active_chunks
-- Which of these chunks still belong to an active version of the tenant: the last check before
-- an answer is returned (§2.4), after a provider took its time to write it.
SELECT c.chunk_id
FROM chunks c
JOIN document_versions v ON v.doc_version_id = c.doc_version_id AND v.tenant_id = c.tenant_id
WHERE c.tenant_id = %(tenant_id)s
  AND v.is_active
  AND c.chunk_id = ANY(%(chunk_ids)s::uuid[]);

-- name: snapshot
-- First statement of an answer's transaction: every read of it sees one snapshot, so the
-- passages retrieved and the hits built from them agree on what is active (§2.2).
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: question_terms
-- The question's words as the chunks were indexed (english parser and stemmer, stop words with
-- no lexeme), in order, each lexeme with the count of the tenant's active chunks holding it
-- (search_term_df, as text_candidates counts it) and the tenant's active chunk count: what
-- ask's evidence tests weigh (gateway/search/terms.py, docs/decisions/0312, 0315).
WITH total AS (
    SELECT greatest(coalesce(sum(chunk_count), 0), 1) AS n
    FROM document_versions WHERE tenant_id = %(tenant_id)s AND is_active
)
SELECT w.at, w.alias, w.token, l.lexeme, df.n AS df, total.n AS total
FROM ts_debug('english', %(q)s::text)
         WITH ORDINALITY AS w(alias, description, token, dictionaries, dictionary, lexemes, at)
LEFT JOIN LATERAL unnest(w.lexemes) AS l(lexeme) ON true
CROSS JOIN total
CROSS JOIN LATERAL (
    SELECT coalesce(sum(s.df), 0) AS n
    FROM search_term_df s
    JOIN document_versions v ON v.doc_version_id = s.doc_version_id
                            AND v.tenant_id = s.tenant_id
    WHERE s.tenant_id = %(tenant_id)s AND s.lexeme = l.lexeme AND v.is_active) df
ORDER BY w.at;

-- name: chunk_lexemes
-- The lexemes of these chunks' indexed text (contextual header and text, as insert_fts made
-- them): which of the question's words and names each of its nearest chunks holds.
SELECT f.chunk_id, tsvector_to_array(f.tsv) AS lexemes
FROM chunk_fts f
WHERE f.tenant_id = %(tenant_id)s
  AND f.chunk_id = ANY(%(chunk_ids)s::uuid[]);
