-- Judgments' and plaintiffs' ids (migration 0035, docs/decisions/0182) are made by Postgres 18's
-- own uuidv7() where the server has it: the same layout (RFC 9562 version 7: milliseconds, then
-- random bits), made in C instead of gen_random_uuid() + overlay + set_bit + a hex round trip,
-- about half the CPU per id on the database that writes a judgments slice (issue 31,
-- docs/decisions/0274). The defaults keep calling uuid_time_ordered(), so they are unchanged;
-- on Postgres 16 or 17 (managed Postgres, docs/decisions/0087) the function stays as 0035 wrote
-- it, so this migration applies there too.
-- Append-only: once applied anywhere, this file never changes.

DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 180000 THEN
        EXECUTE $fn$
            CREATE OR REPLACE FUNCTION uuid_time_ordered() RETURNS uuid
            LANGUAGE sql VOLATILE PARALLEL SAFE AS 'SELECT uuidv7()'
        $fn$;
    END IF;
END
$$;
