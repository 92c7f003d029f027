"""4. The S3 source serves exactly the bucket's final listing."""

from __future__ import annotations

import hashlib

from bench.soak.checks.world import Verdict, World, verdict
from bench.soak.work.sources import BUCKET


def check(world: World) -> list[Verdict]:
    listing = world.sources.listing()
    want = {f"s3://{BUCKET}/{k}": "sha256:" + hashlib.sha256(v).hexdigest()
            for k, v in listing.items()}
    rows = world.sql("""
        SELECT d.source_uri, v.content_hash FROM documents d
        JOIN document_versions v ON v.doc_id = d.doc_id AND v.is_active
        WHERE d.tenant_id = %s AND d.source_id = %s""",
                     (world.tenant_id, world.sources.source_id or None))
    served = {r["source_uri"]: r["content_hash"] for r in rows}
    problems = [f"{k}: in the bucket, not served" for k in sorted(set(want) - set(served))]
    problems += [f"{k}: served, not in the bucket" for k in sorted(set(served) - set(want))]
    problems += [f"{k}: serves other bytes than the bucket's" for k in sorted(set(want) & set(
        served)) if want[k] != served[k]]
    if world.sources.final is None:
        problems.append("no sync after the last change finished")
    syncs = world.sources.syncs
    note = (f"{len(syncs)} syncs, {sum(1 for s in syncs if s['status'] == 'failed')} failed; "
            f"{world.sources.changes} changes to the bucket")
    return [verdict("4", "S3 source: active documents equal the bucket's final listing",
                    len(want), problems, note)]
