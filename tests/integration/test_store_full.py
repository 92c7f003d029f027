"""A full object store is a passing outage, not a bug (found by the chaos soak, issue 24): the
gateway answers 503 `storage_unavailable` instead of 500 "unhandled error" and leaves nothing
behind, and a worker that cannot write a version's artifact leaves the job for redelivery
instead of failing the run as `unexpected_error`.

The full file system is a real one: a 1 MB tmpfs filled up (root and `mount` needed; skipped
elsewhere), and /dev/full, which answers every write with ENOSPC.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import errors, objectstore, retry
from tests.integration.test_upload import assert_error, counts, stored_files, upload
from tests.support import stack
from worker import handler


@pytest.fixture
def full_store(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs with every byte taken."""
    root = tmp_path / "store"
    root.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here: {done.stderr.strip()}")
    try:
        filler = root / ".filler"
        with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 4096)
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], capture_output=True)


def test_a_full_file_store_raises_storage_unavailable(tmp_path):
    # Given a writer whose file is /dev/full (every write: ENOSPC)
    target = tmp_path / "t" / "doc.md"
    target.parent.mkdir()
    (tmp_path / "t" / "doc.md.part").symlink_to("/dev/full")

    # When bytes are written and committed, Then the store says it is full, as an outage
    store = objectstore.FileStore(tmp_path)
    with pytest.raises(errors.StorageUnavailable) as caught:
        store.put_bytes("t/doc.md", b"x" * 100_000)
    assert caught.value.code == "storage_unavailable"
    # and a worker treats it as passing: retried, then the message left for redelivery
    assert retry.is_transient(caught.value)
    assert handler._is_infrastructure(caught.value)


def test_an_upload_to_a_full_store_is_503_and_leaves_nothing(full_store, stack_env, tenants,
                                                             conn, out_dir):
    env = {**stack_env, "UPLOAD_STORE_URI": full_store.as_uri()}
    gateway = stack.start_gateway(env, out_dir)
    try:
        user = tenants.user(role="user")
        with gateway.client(user.token) as client:
            response = upload(client, "notes.md", b"# Notes\n\n" + b"words " * 5000)
        body = assert_error(response, 503, "storage_unavailable")
        assert "full" in body["detail"]
        assert counts(conn) == dict.fromkeys(counts(conn), 0)
        assert [p.name for p in stored_files(full_store)] == [".filler"]
        assert "unhandled error" not in gateway.logs()
    finally:
        gateway.stop()
