"""Operator commands: `ingest sources grant|revoke|grants`, which buckets a tenant may sync.

A tenant admin may register an S3 source only inside a bucket (and folder) granted here
(docs/decisions/0065). Granting is an operator's act, so it lives in the CLI, next to the
database, and never in the tenant-facing API.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any
from uuid import UUID

import orjson

from shared import errors
from shared import logging as applog


def add_commands(sub: Any) -> None:
    parser = sub.add_parser("sources", help="grant tenants the S3 buckets their sources may read")
    actions = parser.add_subparsers(dest="action", required=True)

    grant = actions.add_parser("grant", help="let a tenant's admins sync a bucket (or a folder)")
    _target(grant)
    grant.add_argument("--actor", default=None, help="who (default: your login name)")
    grant.set_defaults(run=_grant)

    revoke = actions.add_parser("revoke", help="stop a tenant's sources of a bucket syncing")
    _target(revoke)
    revoke.add_argument("--actor", default=None, help="who (default: your login name)")
    revoke.set_defaults(run=_revoke)

    listing = actions.add_parser("grants", help="list grants")
    listing.add_argument("--tenant", default=None, help="only this tenant (name)")
    listing.add_argument("--all", action="store_true", help="include revoked grants")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=_list)


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True, help="tenant name")
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", default=None,
                        help="a folder inside the bucket, e.g. 'acme/' (default: the whole "
                             "bucket; for revoke: every grant of the bucket)")


def _grant(args: argparse.Namespace) -> int:
    from gateway.sources import access as source_access
    from gateway.sources import definitions as sources

    def run(conn: Any, settings: Any) -> int:
        tenant_id = _tenant_id(conn, args.tenant)
        row, new = source_access.grant(
            conn, tenant_id=tenant_id, bucket=sources.bucket_name(args.bucket),
            prefix=sources.clean_prefix(args.prefix or ""), granted_by=_who(args),
            platform=source_access.platform_buckets(settings))
        where = f"{row['bucket']}/{row['prefix']}"
        print(f"{'granted' if new else 'already granted'}: tenant {args.tenant} may sync "
              f"s3://{where}")
        return 0

    return _with_db(run)


def _revoke(args: argparse.Namespace) -> int:
    from gateway.sources import access as source_access
    from gateway.sources import definitions as sources

    def run(conn: Any, _: Any) -> int:
        tenant_id = _tenant_id(conn, args.tenant)
        prefix = None if args.prefix is None else sources.clean_prefix(args.prefix)
        revoked = source_access.revoke(conn, tenant_id=tenant_id,
                                       bucket=sources.bucket_name(args.bucket), prefix=prefix,
                                       revoked_by=_who(args))
        if not revoked:
            print(f"tenant {args.tenant} has no live grant for that bucket/prefix; nothing "
                  "revoked", file=sys.stderr)
            return 1
        for row in revoked:
            print(f"revoked: s3://{row['bucket']}/{row['prefix']} for tenant {args.tenant}")
        count = source_access.sources_of_bucket(conn, tenant_id=tenant_id, bucket=args.bucket)
        print(f"{count} source(s) of tenant {args.tenant} on this bucket: from their next sync "
              "on, those no grant covers are refused (their documents stay until deleted)")
        return 0

    return _with_db(run)


def _list(args: argparse.Namespace) -> int:
    from gateway.sources import access as source_access

    def run(conn: Any, _: Any) -> int:
        tenant_id = None if args.tenant is None else _tenant_id(conn, args.tenant)
        rows = source_access.list_grants(conn, tenant_id=tenant_id, include_revoked=args.all)
        if args.json:
            sys.stdout.write(orjson.dumps(rows, default=str,
                                          option=orjson.OPT_INDENT_2).decode() + "\n")
            return 0
        cells = [["TENANT", "BUCKET", "PREFIX", "GRANTED BY", "GRANTED AT", "REVOKED"]] + [
            [r["tenant"], r["bucket"], r["prefix"] or "(all)", r["granted_by"],
             f"{r['granted_at']:%Y-%m-%d %H:%M}",
             f"{r['revoked_at']:%Y-%m-%d %H:%M} by {r['revoked_by']}" if r["revoked_at"] else "-"]
            for r in rows]
        widths = [max(len(str(row[i])) for row in cells) for i in range(len(cells[0]))]
        for row in cells:
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        print(f"\n{len(rows)} grant(s)")
        return 0

    return _with_db(run)


def _with_db(run: Any) -> int:
    from shared import db
    from shared.settings import CommonSettings

    settings = CommonSettings()
    applog.setup("cli", settings.log_level)
    try:
        with db.connect(settings.database_url, autocommit=True, connect_timeout=10) as conn:
            return int(run(conn, settings))
    except errors.AppError as exc:
        print(f"{exc.code}: {exc.detail}", file=sys.stderr)
        return 2


def _tenant_id(conn: Any, name: str) -> UUID:
    from gateway.sources import access as source_access

    tenant_id = source_access.tenant_named(conn, name)
    if tenant_id is None:
        raise errors.NotFound(f"No tenant named {name!r}; create it with `ingest users create`.")
    return tenant_id


def _who(args: argparse.Namespace) -> str:
    return f"cli:{args.actor or getpass.getuser()}"
