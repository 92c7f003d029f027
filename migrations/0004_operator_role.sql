-- Platform operators (dead letters, fleet-wide numbers, any S3 bucket) are not tenant admins.
-- An operator belongs to a tenant like every user and is also an admin of it; operators are
-- created only by the CLI (`ingest users create --role operator`), never through the API.
ALTER TABLE users DROP CONSTRAINT users_role_check;
ALTER TABLE users ADD CONSTRAINT users_role_check CHECK (role IN ('admin', 'user', 'operator'));
