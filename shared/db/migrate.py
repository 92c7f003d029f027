"""Apply numbered plain-SQL migrations in order, once each, recorded in schema_migrations.

Append-only by checksum: a file that changed after it was applied is refused, because the
databases that already ran it would silently differ from new ones.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import migrations
from shared import db

log = logging.getLogger(__name__)

DEFAULT_DIR = Path(migrations.__file__).parent
# Any constant works; it only has to be the same in every process that migrates.
_LOCK_KEY = 0x1D6E57_0001


class MigrationError(Exception):
    pass


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover(directory: Path = DEFAULT_DIR) -> list[Migration]:
    found = []
    for path in sorted(directory.glob("*.sql")):
        version, _, name = path.stem.partition("_")
        if not version.isdigit():
            raise MigrationError(f"{path.name}: migration files are named NNNN_name.sql")
        found.append(Migration(version, name, path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migrations share a number in {directory}")
    return found


def apply(database_url: str, directory: Path = DEFAULT_DIR) -> list[str]:
    """Apply what is pending; return the versions applied. Safe to run from many processes."""
    migrations = discover(directory)
    with db.connect(database_url, autocommit=True) as conn:
        # A session lock, held across the per-file transactions: a second migrator waits here
        # and then finds everything applied.
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            _ensure_table(conn)
            applied = {r["version"]: r["checksum"] for r in conn.execute(
                "SELECT version, checksum FROM schema_migrations")}
            done = []
            for m in migrations:
                if m.version in applied:
                    if applied[m.version] != m.checksum:
                        raise MigrationError(
                            f"migration {m.version}_{m.name} changed after it was applied; "
                            "add a new migration instead of editing an applied one")
                    continue
                with conn.transaction():
                    conn.execute(m.sql.encode())
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                        (m.version, m.name, m.checksum))
                log.info("migration applied", extra={"version": m.version, "migration": m.name})
                done.append(m.version)
            return done
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))


def _ensure_table(conn: db.Conn) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
               version    TEXT PRIMARY KEY,
               name       TEXT NOT NULL,
               checksum   TEXT NOT NULL,
               applied_at TIMESTAMPTZ NOT NULL DEFAULT now())""")
