"""The chaos soak's 3-minute version (issue 24; `make soak` runs 30): `ingest dev` with two
workers under every kind of work at once, a fault every 20-60 s after a fault-free first
minute, then every invariant checked against what the clients were told (bench/soak,
docs/decisions/0240). The report, the fault log and the stack's logs stay in this test's
output folder."""

from __future__ import annotations

import json

import pytest

from bench.soak.run import Options, soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
# Seeded: the same work and the same faults at the same moments each run (what they hit
# depends on the machine's speed). This seed's two minutes of faults: Postgres killed, the
# queue away for 20 s, a worker and moto killed (where a tmpfs can be mounted; elsewhere the
# draw leaves out the disk-full fault and picks others).
SEED = 166


def test_three_minutes_of_chaos_keep_every_promise(out_dir):
    result = soak(Options(minutes=3, seed=SEED, settle_s=420, out=out_dir))

    report = (out_dir / "report.txt").read_text()
    assert sum(result.faults.values()) >= 2, report
    failed = [v.line() + "".join(f"\n    {p}" for p in v.problems[:5])
              for v in result.verdicts if not v.ok]
    assert not failed and not result.problems, "\n".join(failed + result.problems) + "\n" + report
    assert result.settled_s is not None, report
    summary = json.loads((out_dir / "summary.json").read_text())
    assert {v["key"] for v in summary["invariants"]} >= {
        "1a", "1b", "1c", "1d", "1e", "1f", "1g", "2a", "2b", "2c", "2d", "2e", "3a", "3b", "3c",
        "4", "5a", "5b", "6a", "6b", "6c"}
