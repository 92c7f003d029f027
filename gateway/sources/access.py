"""Which buckets a tenant's S3 sources may read, and where their requests may go.

The gateway's credentials can read more than any one tenant should: the platform's own upload
and artifact buckets (every tenant's files) and whatever else its role reaches. So
(docs/decisions/0065):

- nobody, operators included, registers the platform's upload or artifact bucket;
- an operator (platform staff) may register any other bucket;
- a tenant admin only a bucket an operator granted its tenant (``ingest sources grant``), and
  with a granted prefix only a source prefix inside that folder;
- a source's endpoint passes gateway/sources/endpoints.py.

The same rules run when a source is created or changed and again before every sync, so a
revoked grant or a removed allowlist entry stops the syncs that relied on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from uuid import UUID

from gateway.sources import endpoints
from shared import db, errors, objectstore
from shared.settings import CommonSettings

Q = db.load_queries(Path(__file__).with_name("sources.sql"))


@dataclass(frozen=True)
class Rules:
    platform_buckets: frozenset[str]
    allowlist: tuple[str, ...]
    dev_mode: bool

    @classmethod
    def of(cls, settings: Any) -> Rules:
        return cls(platform_buckets(settings), tuple(settings.source_endpoint_allowlist),
                   settings.dev_mode)


def platform_buckets(settings: CommonSettings) -> frozenset[str]:
    """The buckets of UPLOAD_STORE_URI and ARTIFACT_STORE_URI, where they are s3://."""
    return frozenset(objectstore.split_s3(uri)[0]
                     for uri in (settings.upload_store_uri, settings.artifact_store_uri)
                     if urlparse(uri).scheme == "s3")


# ── the decision, pure ──────────────────────────────────────────────────────────────────────
def refuse_platform(bucket: str, platform: Iterable[str]) -> None:
    if bucket in platform:
        raise errors.PlatformBucket(
            f"Bucket {bucket!r} holds the platform's own uploads or artifacts, with every "
            "tenant's files; no source may read it. Choose another bucket.")


def grant_covers(grant_prefix: str, source_prefix: str) -> bool:
    """A grant of ``team-a/`` covers ``team-a/`` and ``team-a/x``, never ``team-a-x/`` nor ``team-a``.

    Grant prefixes are folders (stored with their trailing ``/``): S3 prefixes match as plain
    string starts, so ``team-a`` would also list ``team-a-secrets/``.
    """
    return source_prefix.startswith(grant_prefix)


def decide(bucket: str, prefix: str, *, by_operator: bool, grants: Iterable[str],
           platform: Iterable[str]) -> None:
    """Raise unless a source of ``bucket``/``prefix`` may be read; ``grants`` are the live grant
    prefixes of this tenant for this bucket."""
    refuse_platform(bucket, platform)
    if by_operator:
        return
    granted = list(grants)
    if not granted:
        raise errors.BucketNotGranted(
            f"Your tenant has no grant for bucket {bucket!r}; ask an operator to run "
            f"`ingest sources grant --tenant <your tenant> --bucket {bucket}`.")
    if not any(grant_covers(g, prefix) for g in granted):
        folders = ", ".join(repr(g) for g in sorted(granted))
        raise errors.BucketNotGranted(
            f"Your tenant may read bucket {bucket!r} only under {folders}; set a prefix that "
            "starts with one of them.")


def grant_prefix(value: str) -> str:
    """A grant's prefix as stored: '' (whole bucket) or a folder ending in '/'."""
    value = value.lstrip("/")
    return value if not value or value.endswith("/") else value + "/"


# ── in the gateway (async) ──────────────────────────────────────────────────────────────────
async def authorize(conn: db.AsyncConn, rules: Rules, *, tenant_id: UUID, bucket: str,
                    prefix: str, by_operator: bool) -> None:
    """The bucket rules against this tenant's live grants (create, update, before a sync)."""
    rows = await (await conn.execute(Q["live_grant_prefixes"], {
        "tenant_id": tenant_id, "bucket": bucket})).fetchall()
    decide(bucket, prefix, by_operator=by_operator, grants=[r["prefix"] for r in rows],
           platform=rules.platform_buckets)


async def check_endpoint(rules: Rules, url: str | None) -> None:
    # getaddrinfo blocks: off the event loop.
    await asyncio.to_thread(endpoints.check, url, allowlist=rules.allowlist,
                            dev_mode=rules.dev_mode)


async def check_before_sync(conn: db.AsyncConn, rules: Rules, source: dict[str, Any]) -> None:
    """Run every rule again on a stored source: grants may be revoked, DNS may change.

    Operator authority belongs to the source's creator: a source an operator registered keeps
    syncing while its creator is an operator; any other needs a live grant.
    """
    by_operator = await creator_is_operator(conn, tenant_id=source["tenant_id"],
                                            source_id=source["source_id"])
    try:
        await authorize(conn, rules, tenant_id=source["tenant_id"], bucket=source["bucket"],
                        prefix=source["prefix"], by_operator=by_operator)
    except errors.BucketNotGranted as exc:
        raise errors.BucketNotGranted(
            "This source can no longer sync: its tenant's grant for the bucket was revoked or "
            f"does not cover its prefix. {exc.detail}") from exc
    await check_endpoint(rules, source["endpoint_url"])


async def creator_is_operator(conn: db.AsyncConn, *, tenant_id: UUID, source_id: UUID) -> bool:
    row = await (await conn.execute(Q["source_creator_is_operator"], {
        "tenant_id": tenant_id, "source_id": source_id})).fetchone()
    return bool(row and row["by_operator"])


# ── operators' grants (the CLI; sync) ───────────────────────────────────────────────────────
def grant(conn: db.Conn, *, tenant_id: UUID, bucket: str, prefix: str, granted_by: str,
          platform: Iterable[str]) -> tuple[dict[str, Any], bool]:
    """Grant a bucket (and folder) to a tenant; (the grant, whether it is new)."""
    refuse_platform(bucket, platform)
    keys = {"tenant_id": tenant_id, "bucket": bucket, "prefix": grant_prefix(prefix)}
    with conn.transaction():
        row = conn.execute(Q["insert_grant"], {**keys, "granted_by": granted_by}).fetchone()
        if row is not None:
            return row, True
        existing = conn.execute(Q["live_grant"], keys).fetchone()
    assert existing is not None
    return existing, False


def revoke(conn: db.Conn, *, tenant_id: UUID, bucket: str, prefix: str | None,
           revoked_by: str) -> list[dict[str, Any]]:
    """Revoke the live grants of a bucket (one folder, or every one when prefix is None)."""
    return conn.execute(Q["revoke_grants"], {
        "tenant_id": tenant_id, "bucket": bucket, "revoked_by": revoked_by,
        "prefix": None if prefix is None else grant_prefix(prefix)}).fetchall()


def list_grants(conn: db.Conn, *, tenant_id: UUID | None,
                include_revoked: bool = False) -> list[dict[str, Any]]:
    return conn.execute(Q["list_grants"], {"tenant_id": tenant_id,
                                           "include_revoked": include_revoked}).fetchall()


def sources_of_bucket(conn: db.Conn, *, tenant_id: UUID, bucket: str) -> int:
    row = conn.execute(Q["count_live_sources_of_bucket"], {"tenant_id": tenant_id,
                                                           "bucket": bucket}).fetchone()
    return int(row["n"]) if row else 0


def tenant_named(conn: db.Conn, name: str) -> UUID | None:
    row = conn.execute(Q["tenant_named"], {"name": name}).fetchone()
    return None if row is None else UUID(str(row["tenant_id"]))
