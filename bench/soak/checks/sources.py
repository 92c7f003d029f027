"""4. The S3 source serves exactly the bucket's final listing.

``gather`` reads (the customer's bucket, the store); ``judge`` decides from what was gathered
(tests/unit/test_soak_checks.py)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from bench.soak.checks.world import Verdict, World, verdict
from bench.soak.work.sources import BUCKET


@dataclass
class Facts:
    listing: dict[str, str]          # s3://bucket/key → "sha256:<hex>" of its final bytes
    served: list[dict]               # the source's documents' active versions: uri, hash
    final: dict | None = None        # the sync after the last change, as it ended
    syncs: list[dict] = field(default_factory=list)
    changes: int = 0


def gather(world: World) -> Facts:
    listing = {f"s3://{BUCKET}/{k}": "sha256:" + hashlib.sha256(v).hexdigest()
               for k, v in world.sources.listing().items()}
    served = world.sql("""
        SELECT d.source_uri, v.content_hash FROM documents d
        JOIN document_versions v ON v.doc_id = d.doc_id AND v.is_active
        WHERE d.tenant_id = %s AND d.source_id = %s""",
                       (world.tenant_id, world.sources.source_id or None))
    return Facts(listing, served, world.sources.final, list(world.sources.syncs),
                 world.sources.changes)


def judge(facts: Facts) -> list[Verdict]:
    served: dict[str, str] = {r["source_uri"]: r["content_hash"] for r in facts.served}
    want = facts.listing
    problems = [f"{k}: in the bucket, not served" for k in sorted(set(want) - set(served))]
    problems += [f"{k}: served, not in the bucket" for k in sorted(set(served) - set(want))]
    problems += [f"{k}: serves other bytes than the bucket's" for k in sorted(set(want) & set(
        served)) if want[k] != served[k]]
    if facts.final is None:
        problems.append("no sync after the last change finished")
    failed = sum(1 for s in facts.syncs if s["status"] == "failed")
    note = f"{len(facts.syncs)} syncs, {failed} failed; {facts.changes} changes to the bucket"
    return [verdict("4", "S3 source: active documents equal the bucket's final listing",
                    len(want), problems, note)]
