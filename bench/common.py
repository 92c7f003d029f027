"""What the benchmarks share: the repo on sys.path, offline/moto settings, a bench user.

Import this first: it sets the environment before anything imports boto3 or the model.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", HF_HUB_OFFLINE="1",
                  TRANSFORMERS_OFFLINE="1")


class BenchUser:
    """A tenant `bench` and its admin, written straight into the database."""

    def __init__(self, conn) -> None:  # type: ignore[no-untyped-def]
        self.tenant_id = conn.execute("INSERT INTO tenants (name) VALUES ('bench') "
                                      "RETURNING tenant_id").fetchone()["tenant_id"]
        self.user_id = conn.execute(
            "INSERT INTO users (tenant_id, email, password_hash, role) VALUES (%s, %s, 'x', 'admin') "
            "RETURNING user_id", (self.tenant_id, "bench@bench.test")).fetchone()["user_id"]


@contextlib.contextmanager
def stack(prefix: str) -> Iterator[tuple[Path, Any, Any]]:
    """A temp folder, a disposable Postgres and a moto server, stopped whatever happens."""
    from cli.embedded import EmbeddedPostgres, MotoServer

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        pg, moto = EmbeddedPostgres(root / "pg", disposable=True), MotoServer()
        pg.start()
        moto.start()
        try:
            yield root, pg, moto
        finally:
            moto.stop()
            pg.stop("immediate")
