"""The embedded Postgres of `ingest dev` and the tests (cli/embedded.py, decision 0087): Postgres
18 with the extensions records imports need, and a data folder of another major version (the
old pgserver wheel's 16) refused before anything touches it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cli.embedded import DataFolderVersionError, EmbeddedPostgres

# Records imports' matching and constraints (issue 12); core's gen_random_uuid needs none.
EXTENSIONS = ("vector", "pg_trgm", "fuzzystrmatch", "unaccent", "btree_gist")


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url, autocommit=True) as c:  # tuple rows
        yield c


def test_the_server_is_postgres_18_with_the_extensions_records_need(conn: psycopg.Connection):
    assert int(conn.execute("SHOW server_version_num").fetchone()[0]) >= 180000
    for name in EXTENSIONS:
        conn.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
    versions = dict(conn.execute("SELECT extname, extversion FROM pg_extension").fetchall())
    assert tuple(int(n) for n in versions["vector"].split(".")[:2]) >= (0, 8)

    # Each does what records imports will ask of it
    row = conn.execute(
        "SELECT similarity('jonathan smith', 'jonathon smith') > 0.5,"
        "       levenshtein('smith', 'smyth'), unaccent('Zoë Müller'),"
        "       gen_random_uuid() <> gen_random_uuid()").fetchone()
    assert row == (True, 1, "Zoe Muller", True)
    conn.execute("CREATE TABLE spans (k int, during int4range,"
                 " EXCLUDE USING gist (k WITH =, during WITH &&))")
    conn.execute("INSERT INTO spans VALUES (1, '[1,5)')")
    with pytest.raises(psycopg.errors.ExclusionViolation):
        conn.execute("INSERT INTO spans VALUES (1, '[3,8)')")


@pytest.fixture
def folder() -> Iterator[Path]:
    # Outside pytest's temp root, as tests/conftest.py's pg fixture explains.
    path = Path(tempfile.mkdtemp(prefix="ingest-test-pgdata-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_postgres_16_folder_is_refused_and_left_untouched(folder: Path):
    # Given a data folder the pgserver wheel made (its PG_VERSION says 16)
    data = folder / "pgdata"
    data.mkdir(mode=0o700)
    (data / "PG_VERSION").write_text("16\n")
    (data / "postmaster.opts").write_text("/old/bin/postgres\n")
    before = _snapshot(data)

    # When the launcher is asked to start it
    pg = EmbeddedPostgres(data, password="secret")
    with pytest.raises(DataFolderVersionError) as refused:
        pg.start()

    # Then it says what it found and both ways on, and changed nothing (not even the owner)
    message = str(refused.value)
    for needle in (str(data), "Postgres 16", "Postgres 18", "pg_dump", "pg_upgrade",
                   f"mv {data} {data}-pg16", "docs/operations.md"):
        assert needle in message
    assert _snapshot(data) == before
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg.url(), connect_timeout=3).close()


def _snapshot(folder: Path) -> dict[str, tuple[int, int, int, bytes]]:
    return {p.name: (p.stat().st_uid, p.stat().st_mode, p.stat().st_size,
                     p.read_bytes() if p.is_file() else b"")
            for p in [folder, *folder.iterdir()]}
