-- The keyword index keeps a short pending list (issue 35, docs/decisions/0344).
-- idx_chunk_fts_gin is a GIN index with fastupdate: the workers' new rows go to a pending list
-- that every keyword search reads whole, merged only past gin_pending_list_limit (4 MB by
-- default, about 40 documents of 100 chunks) or when autovacuum comes by. At 483 pending pages
-- the text leg's SQL took 21.5 ms instead of 15.6 ms at one connection, and 8 connections got
-- 88 instead of 131 queries/s (bench/search_gin_pending.py). 256 kB keeps at most 32 pages
-- pending; the write that crosses it merges them, about 10 ms more a document of 100 chunks.
-- fastupdate stays on: with it off every row updates the index's tree itself (+46 % a write).
-- Append-only: once applied anywhere, this file never changes.

ALTER INDEX idx_chunk_fts_gin SET (gin_pending_list_limit = 256);

-- What is pending now would wait for the next merge: take it into the index at once.
SELECT gin_clean_pending_list('idx_chunk_fts_gin'::regclass);
