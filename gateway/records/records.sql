-- Reads of the production records (gateway/records/service.py): judgments, plaintiffs and the
-- plaintiffs' duplicate candidates. The worker's records pipeline writes these tables; the
-- gateway only reads them. Every query names the tenant.
--
-- A filter left NULL does not filter. Listings read through a NOT MATERIALIZED CTE so the
-- filters are written once, and inlined twice: into the page (keyset on the
-- (tenant_id, created_at DESC, id DESC) index) and into its total.
--
-- A batch's rows are seen all at once (docs/decisions/0181): a row is read only when its
-- batch_id is NULL (an event wrote it) or names a batch of the tenant that is completed or
-- partial. The worker inserts a large batch's rows over many transactions while the batch is
-- promoting, and completes the batch in one: until then none of them is seen. The tenant's
-- finished batches are a hashed set, looked up once per query.

-- name: list_judgments
-- q: a part of the normalised case number (A–Z0–9, the contract's key) or of either party's
-- normalised name; both answered by the trigram indexes of 0015.
WITH f AS NOT MATERIALIZED (
    SELECT j.id, j.case_number, j.case_number_normalized, j.plaintiff_name, j.defendant_name,
           j.amount, j.filed_date, j.court, j.county, j.source, j.source_reference, j.batch_id,
           j.created_at, j.updated_at
    FROM judgments j
    WHERE j.tenant_id = %(tenant_id)s
      AND (j.batch_id IS NULL OR j.batch_id IN (
          SELECT v.batch_id FROM import_batches v
          WHERE v.tenant_id = %(tenant_id)s AND v.status IN ('completed', 'partial')))
      AND (%(q_key)s::text IS NULL
           OR j.case_number_normalized LIKE %(q_key)s
           OR j.plaintiff_name_normalized ILIKE %(q_name)s
           OR j.defendant_name_normalized ILIKE %(q_name)s)
      AND (%(case_number)s::text IS NULL OR j.case_number_normalized = %(case_number)s)
      AND (%(county)s::text IS NULL OR lower(j.county) = lower(%(county)s))
      AND (%(court)s::text IS NULL OR lower(j.court) = lower(%(court)s))
      AND (%(filed_from)s::date IS NULL OR j.filed_date >= %(filed_from)s)
      AND (%(filed_to)s::date IS NULL OR j.filed_date <= %(filed_to)s)
      AND (%(amount_min)s::numeric IS NULL OR j.amount >= %(amount_min)s)
      AND (%(amount_max)s::numeric IS NULL OR j.amount <= %(amount_max)s)
      AND (%(batch_id)s::uuid IS NULL OR j.batch_id = %(batch_id)s)
)
SELECT f.*, (SELECT count(*) FROM f) AS total
FROM f
WHERE (%(after_at)s::timestamptz IS NULL
       OR (f.created_at, f.id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY f.created_at DESC, f.id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: list_plaintiffs
-- q: a part of the normalised name; case_number: plaintiffs linked to that judgment.
WITH f AS NOT MATERIALIZED (
    SELECT p.id, p.name, p.address_line1, p.address_line2, p.city, p.state, p.zip, p.phone,
           p.email, p.contact_name, p.status, p.source, p.source_reference, p.batch_id,
           p.created_at, p.updated_at
    FROM plaintiffs p
    WHERE p.tenant_id = %(tenant_id)s
      AND (p.batch_id IS NULL OR p.batch_id IN (
          SELECT v.batch_id FROM import_batches v
          WHERE v.tenant_id = %(tenant_id)s AND v.status IN ('completed', 'partial')))
      AND (%(q_name)s::text IS NULL OR p.name_normalized ILIKE %(q_name)s)
      AND (%(status)s::text IS NULL OR p.status = %(status)s)
      AND (%(state)s::text IS NULL OR p.state = %(state)s)
      AND (%(batch_id)s::uuid IS NULL OR p.batch_id = %(batch_id)s)
      AND (%(case_number)s::text IS NULL OR EXISTS (
          SELECT 1 FROM plaintiff_judgments l
          JOIN judgments j ON j.tenant_id = l.tenant_id AND j.id = l.judgment_id
          WHERE l.tenant_id = %(tenant_id)s AND l.plaintiff_id = p.id
            AND j.tenant_id = %(tenant_id)s AND j.case_number_normalized = %(case_number)s
            AND (l.batch_id IS NULL OR l.batch_id IN (
              SELECT v.batch_id FROM import_batches v
              WHERE v.tenant_id = %(tenant_id)s AND v.status IN ('completed', 'partial')))
            AND (j.batch_id IS NULL OR j.batch_id IN (
              SELECT v.batch_id FROM import_batches v
              WHERE v.tenant_id = %(tenant_id)s AND v.status IN ('completed', 'partial')))))
)
SELECT f.*, (SELECT count(*) FROM f) AS total,
       -- The judgments a plaintiff is linked to, as displayed (a few; the link table's index).
       ARRAY(SELECT j.case_number FROM plaintiff_judgments l
             JOIN judgments j ON j.tenant_id = l.tenant_id AND j.id = l.judgment_id
             WHERE l.tenant_id = %(tenant_id)s AND l.plaintiff_id = f.id
               AND (l.batch_id IS NULL OR l.batch_id IN (
                 SELECT v.batch_id FROM import_batches v
                 WHERE v.tenant_id = %(tenant_id)s AND v.status IN ('completed', 'partial')))
               AND (j.batch_id IS NULL OR j.batch_id IN (
                 SELECT v.batch_id FROM import_batches v
                 WHERE v.tenant_id = %(tenant_id)s AND v.status IN ('completed', 'partial')))
             ORDER BY j.case_number_normalized LIMIT 20) AS case_numbers
FROM f
WHERE (%(after_at)s::timestamptz IS NULL
       OR (f.created_at, f.id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY f.created_at DESC, f.id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: similarity_threshold
-- For this transaction only (is_local): the trigram operator (a percent sign) below then means
-- similarity >= the threshold, which the GIN index answers (a similarity() call could not use
-- it). Sequential scans are off because the planner prices that operator like a cheap
-- comparison and, on a few thousand rows, would scan the table once per plaintiff, computing
-- millions of similarities; with them off it takes the index (docs/decisions/0121).
SELECT set_config('pg_trgm.similarity_threshold', %(threshold)s, true),
       set_config('enable_seqscan', 'off', true);

-- name: duplicate_pairs
-- Candidate pairs of one tenant's plaintiffs (records-data-contract.md "Duplicate Detection
-- Query", scored as docs/decisions/0121 says). The spec's CROSS JOIN compares every pair; here
-- each plaintiff's partners come from a parameterised scan of idx_plaintiffs_name_trgm
-- (the trigram similarity operator), and both sides are filtered to the tenant.
-- a.id < b.id lists each pair once. All candidates are scored, then sorted by confidence and
-- paged: the ordering needs every score, and the index join keeps their number small.
WITH pairs AS (
    SELECT p1.id AS a_id, p1.name AS a_name, p1.address_line1 AS a_address, p1.city AS a_city,
           p1.state AS a_state, p1.zip AS a_zip, p1.created_at AS a_created_at,
           p2.id AS b_id, p2.name AS b_name, p2.address_line1 AS b_address, p2.city AS b_city,
           p2.state AS b_state, p2.zip AS b_zip, p2.created_at AS b_created_at,
           similarity(p1.name_normalized, p2.name_normalized) AS name_similarity,
           -- fuzzystrmatch's levenshtein() refuses arguments over 255 characters.
           levenshtein(left(p1.name_normalized, 255), left(p2.name_normalized, 255))
               AS name_distance,
           greatest(length(left(p1.name_normalized, 255)),
                    length(left(p2.name_normalized, 255)), 1) AS name_length,
           (upper(trim(regexp_replace(p1.address_line1, '\s+', ' ', 'g')))
              = upper(trim(regexp_replace(p2.address_line1, '\s+', ' ', 'g'))))
               IS TRUE AS address_match,
           (left(p1.zip, 5) = left(p2.zip, 5)) IS TRUE AS zip_match,
           (p1.phone = p2.phone) IS TRUE AS phone_match,
           (p1.email_normalized = p2.email_normalized) IS TRUE AS email_match
    FROM plaintiffs p1
    -- OFFSET 0 fences the subquery: the trigram condition is the only one inside, so the GIN
    -- index answers it. Flattened, the planner walks the tenant's (tenant_id, id) btree and
    -- compares every pair (tests/integration/test_records_readback.py checks the plan). Rows
    -- of other tenants the index finds are dropped by the ON condition below.
    JOIN LATERAL (
        SELECT q.* FROM plaintiffs q
        WHERE q.name_normalized %% p1.name_normalized
        OFFSET 0
    ) p2 ON p2.tenant_id = %(tenant_id)s AND p1.id < p2.id
        AND (p2.batch_id IS NULL OR p2.batch_id IN (
              SELECT v.batch_id FROM import_batches v
              WHERE v.tenant_id = %(tenant_id)s AND v.status IN ('completed', 'partial')))
    WHERE p1.tenant_id = %(tenant_id)s
      AND (p1.batch_id IS NULL OR p1.batch_id IN (
          SELECT v.batch_id FROM import_batches v
          WHERE v.tenant_id = %(tenant_id)s AND v.status IN ('completed', 'partial')))
      AND similarity(p1.name_normalized, p2.name_normalized) > %(min_similarity)s
), scored AS (
    SELECT pairs.*,
           round((0.5 * (1 - name_distance::numeric / name_length)
                  + 0.2 * address_match::int + 0.1 * zip_match::int
                  + 0.1 * phone_match::int + 0.1 * email_match::int), 3) AS confidence
    FROM pairs
)
SELECT scored.*, count(*) OVER () AS total
FROM scored
ORDER BY confidence DESC, name_similarity DESC, a_id, b_id
LIMIT %(limit)s OFFSET %(offset)s;
