-- An e-mail address is unique within its tenant, not across tenants (docs/decisions/0202): a
-- tenant admin adding someone@rival.com must get the same answer whether or not another tenant
-- has that address. Sign-in names the tenant, so (tenant, e-mail) still finds one account.
ALTER TABLE users DROP CONSTRAINT users_email_key;
ALTER TABLE users ADD CONSTRAINT users_tenant_email_key UNIQUE (tenant_id, email);
-- The operators' CLI still finds accounts by e-mail alone, across tenants.
CREATE INDEX idx_users_email ON users (email);
