"""The run pages of the web UI show a tenant its own runs only, in every status and filter."""

from __future__ import annotations

import pytest

from shared import objectstore
from tests.integration.test_web import sign_in
from tests.support import ops

STATUSES = ("queued", "running", "succeeded", "failed")


@pytest.fixture
def store_root(stack_env):
    return objectstore.file_path(stack_env["UPLOAD_STORE_URI"])


@pytest.mark.parametrize("role", ["user", "admin"])
def test_another_tenants_runs_are_never_listed_and_their_pages_are_404(
        gateway, conn, tenants, store_root, role):
    # Given runs of every status in our tenant and in another one, under a distinctive name
    reader = tenants.user(tenant="acme", role=role)
    other = tenants.user(tenant="globex", role="admin")
    ours = {s: ops.make_run(conn, store_root, reader, status=s, name=f"ours-{s}.md")
            for s in STATUSES}
    theirs = {s: ops.make_run(conn, store_root, other, status=s, name=f"globex-{s}.md")
              for s in STATUSES}

    with sign_in(gateway, reader.email) as browser:
        # When our reader lists the runs, unfiltered and per status
        for status in (None, *STATUSES):
            page = browser.get("/runs", params={"status": status} if status else {})
            assert page.status_code == 200, page.text
            # Then every one of ours in that status is listed and none of theirs
            for s, run in ours.items():
                assert (str(run.run_id) in page.text) == (status in (None, s)), (status, s)
            for run in theirs.values():
                assert str(run.run_id) not in page.text, status
            assert "globex-" not in page.text

        # And another tenant's run, by its exact id, is a 404 page, like a run that never was
        for run in theirs.values():
            answer = browser.get(f"/runs/{run.run_id}")
            assert answer.status_code == 404
            assert "text/html" in answer.headers["content-type"]
            assert "globex-" not in answer.text and str(other.tenant_id) not in answer.text
        # while our own open
        assert browser.get(f"/runs/{ours['failed'].run_id}").status_code == 200
