-- A staged row's natural_key_hash is checked as the same 64 lower-case hex digits, by a test
-- that costs a twelfth of the old one (docs/decisions/0500). The CHECK of migration 0021,
-- `natural_key_hash ~ '^[0-9a-f]{64}$'`, ran PostgreSQL's regular expression engine with a
-- counted repetition on every staged ad-metrics row: ~6 µs a row, 100-150 ms of each
-- 10,000-row COPY into import_staged_ad_metrics (of ~210 ms; the same COPY into a copy of the
-- table without it: 40-60 ms). A length test and a search for one character outside the class
-- accept exactly the same texts (64 characters, each 0-9 or a-f; NULL unchecked): ~0.5 µs.
-- The constraint is the parent's, so every typed stage inherits it, under its old name.
-- Append-only: once applied anywhere, this file never changes.

ALTER TABLE import_staged_rows
    DROP CONSTRAINT import_staged_rows_natural_key_hash_check,
    ADD CONSTRAINT import_staged_rows_natural_key_hash_check
        CHECK (octet_length(natural_key_hash) = 64 AND natural_key_hash !~ '[^0-9a-f]');
