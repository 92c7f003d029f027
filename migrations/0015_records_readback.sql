-- Records read-back (issue 12 item 5): trigram indexes for searching judgments and plaintiffs
-- by name or case number, and for the plaintiffs' duplicate candidates (docs/decisions/0121,
-- 0122). pg_trgm and fuzzystrmatch are created here, by the first feature that uses them
-- (docs/decisions/0087); both are offered by managed Postgres 16+ (RDS, Aurora, Cloud SQL).
-- Append-only: once applied anywhere, this file never changes.

CREATE EXTENSION IF NOT EXISTS pg_trgm;
-- levenshtein(): the name distance in a duplicate pair's confidence.
CREATE EXTENSION IF NOT EXISTS fuzzystrmatch;

-- ── duplicate candidates ────────────────────────────────────────────────────────────────────
-- The pairs query finds, for each plaintiff, the others whose normalised name is `%` similar
-- (pg_trgm.similarity_threshold 0.8) through this index, instead of comparing every pair.
-- GIN rather than GiST: exact (no recheck of false positives from a lossy signature) and
-- faster to search; the tenant is filtered on the index's hits (every query names it).
CREATE INDEX idx_plaintiffs_name_trgm ON plaintiffs USING gin (name_normalized gin_trgm_ops);

-- ── search ──────────────────────────────────────────────────────────────────────────────────
-- GET /v1/records/judgments?q=: a part of a case number (normalised) or of a party's name,
-- matched with LIKE/ILIKE '%…%', which trigram GIN indexes answer for 3 characters or more.
CREATE INDEX idx_judgments_case_number_trgm ON judgments USING gin (case_number_normalized gin_trgm_ops);
CREATE INDEX idx_judgments_plaintiff_name_trgm ON judgments USING gin (plaintiff_name_normalized gin_trgm_ops);
CREATE INDEX idx_judgments_defendant_name_trgm ON judgments USING gin (defendant_name_normalized gin_trgm_ops);
-- Filters by batch (plaintiffs' and judgments' "from this import").
CREATE INDEX idx_judgments_batch ON judgments (tenant_id, batch_id);
CREATE INDEX idx_plaintiffs_batch ON plaintiffs (tenant_id, batch_id);
