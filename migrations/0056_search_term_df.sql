-- BM25's document frequencies without visiting every match (docs/decisions/0225). Append-only.
--
-- df of a lexeme = the count of the tenant's active chunks that hold it. Counting it on the GIN
-- bitmap visits one heap page of chunk_fts per match: 43 % of the keyword query's CPU at
-- 100,000 chunks. Here each version keeps, per lexeme, how many of its chunks hold it; the
-- query sums the rows of the tenant's active versions (under its filters), read from an index.
-- Rows belong to one version, and a version is indexed by one worker job, so no two writers
-- share a row (unlike per-tenant counts, which ADR 0220 rejected for that reason).
CREATE TABLE search_term_df (
    tenant_id      UUID NOT NULL REFERENCES tenants(tenant_id),
    lexeme         TEXT NOT NULL,
    doc_version_id UUID NOT NULL REFERENCES document_versions(doc_version_id),
    df             INTEGER NOT NULL,
    -- One index serves both the triggers' upserts and the query's read (one lexeme of one
    -- tenant, every version holding it, index-only with df); a second index would double
    -- the triggers' cost, which the worker pays per chunk indexed.
    PRIMARY KEY (tenant_id, lexeme, doc_version_id) INCLUDE (df)
);

-- Kept by Postgres from chunk_fts' own writes, whoever makes them (the worker's insert_fts,
-- tests, a repair by hand): statement-level triggers over the transition tables. Rows are
-- added in lexeme order, so two statements never lock the same rows in opposite orders.
CREATE FUNCTION search_term_df_add() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_term_df (tenant_id, lexeme, doc_version_id, df)
    SELECT n.tenant_id, t.lexeme, n.doc_version_id, count(*)
    FROM new_rows n, unnest(n.tsv) AS t
    GROUP BY n.tenant_id, n.doc_version_id, t.lexeme
    ORDER BY n.tenant_id, t.lexeme, n.doc_version_id
    ON CONFLICT (tenant_id, lexeme, doc_version_id)
        DO UPDATE SET df = search_term_df.df + excluded.df;
    RETURN NULL;
END $$;

CREATE FUNCTION search_term_df_remove() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_term_df s SET df = s.df - gone.df
    FROM (SELECT o.tenant_id, t.lexeme, o.doc_version_id, count(*) AS df
          FROM old_rows o, unnest(o.tsv) AS t
          GROUP BY o.tenant_id, t.lexeme, o.doc_version_id) gone
    WHERE (s.tenant_id, s.lexeme, s.doc_version_id)
        = (gone.tenant_id, gone.lexeme, gone.doc_version_id);
    DELETE FROM search_term_df s
    USING (SELECT DISTINCT o.tenant_id, t.lexeme, o.doc_version_id
           FROM old_rows o, unnest(o.tsv) AS t) gone
    WHERE (s.tenant_id, s.lexeme, s.doc_version_id)
        = (gone.tenant_id, gone.lexeme, gone.doc_version_id)
      AND s.df <= 0;
    RETURN NULL;
END $$;

CREATE TRIGGER chunk_fts_term_df_insert AFTER INSERT ON chunk_fts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION search_term_df_add();
CREATE TRIGGER chunk_fts_term_df_delete AFTER DELETE ON chunk_fts
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION search_term_df_remove();
-- An UPDATE of tsv (none in the code today) is the removal of the old rows and the addition
-- of the new ones.
CREATE TRIGGER chunk_fts_term_df_update_old AFTER UPDATE ON chunk_fts
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION search_term_df_remove();
CREATE TRIGGER chunk_fts_term_df_update_new AFTER UPDATE ON chunk_fts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION search_term_df_add();

-- The rows already there.
INSERT INTO search_term_df (tenant_id, lexeme, doc_version_id, df)
SELECT f.tenant_id, t.lexeme, f.doc_version_id, count(*)
FROM chunk_fts f, unnest(f.tsv) AS t
GROUP BY f.tenant_id, t.lexeme, f.doc_version_id;
