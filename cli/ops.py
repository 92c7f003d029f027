"""Operator commands: `ingest dlq sync|list|show|redrive|purge` and `ingest cleanup`.

The same services as the operators' API (gateway/operations/dlq.py, gateway/operations/cleanup.py), across every
tenant: the CLI is the operator's tool. Results go to stdout (a table, or JSON with --json); logs go to
stderr as JSON lines, like every process's.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import Any
from uuid import UUID

import orjson

from shared import logging as applog

Handler = Callable[[argparse.Namespace], int]


def add_commands(sub: Any) -> None:
    dlq = sub.add_parser("dlq", help="dead letters: archive from SQS, list, redrive, purge")
    actions = dlq.add_subparsers(dest="action", required=True)

    sync = actions.add_parser("sync", help="move what is in the SQS dead-letter queue into "
                                            "Postgres now (gateways do it every 30 s)")
    sync.add_argument("--max", type=int, default=1000, help="move at most this many")
    sync.add_argument("--json", action="store_true", help="print JSON")
    sync.set_defaults(run=_sync)

    listing = actions.add_parser("list", help="dead letters, oldest first, with their reasons")
    listing.add_argument("--status", choices=("open", "redriven", "purged", "all"),
                         default="open")
    listing.add_argument("--page", type=int, default=1)
    listing.add_argument("--limit", type=int, default=50, help="per page (default 50)")
    _common(listing)
    listing.set_defaults(run=_list)

    show = actions.add_parser("show", help="one dead letter in full")
    show.add_argument("message_id")
    _common(show)
    show.set_defaults(run=_show)

    redrive = actions.add_parser("redrive", help="send dead letters' jobs back through the "
                                                 "outbox to the ingest queue")
    which = redrive.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every open dead letter")
    which.add_argument("--run-id", type=UUID, action="append", default=[], dest="run_ids",
                       help="the dead letters of this run (repeatable)")
    which.add_argument("--message-id", action="append", default=[], dest="message_ids",
                       help="this message (repeatable)")
    redrive.add_argument("--dry-run", action="store_true", help="show what would happen only")
    redrive.add_argument("--limit", type=int, default=None, help="redrive at most this many")
    _actor(redrive, "redriven from the dead-letter queue by an operator")
    _common(redrive)
    redrive.set_defaults(run=_redrive)

    purge = actions.add_parser("purge", help="resolve dead letters older than an age as purged")
    purge.add_argument("--older-than", required=True, help="90s, 15m, 2h, 7d, 1w")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    purge.add_argument("--dry-run", action="store_true", help="show what would go only")
    _actor(purge, "purged from the dead-letter queue by an operator")
    _common(purge)
    purge.set_defaults(run=_purge)

    cleanup = sub.add_parser("cleanup", help="remove uploads and artifacts nothing needs")
    cleanup.add_argument("--dry-run", action="store_true", help="show what would go only")
    cleanup.add_argument("--json", action="store_true", help="print JSON")
    cleanup.set_defaults(run=_cleanup)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", type=UUID, default=None, help="only this tenant's messages")
    parser.add_argument("--no-sync", action="store_false", dest="sync",
                        help="do not move what is in SQS into Postgres first")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _actor(parser: argparse.ArgumentParser, reason: str) -> None:
    parser.add_argument("--reason", default=reason, help="why (recorded on each run)")
    parser.add_argument("--actor", default=None, help="who (default: your login name)")


# ── dlq ─────────────────────────────────────────────────────────────────────────────────────
# Every command but `sync` reads and writes the dead_letters table only; by default it first
# runs the same mover as the gateways' housekeeping, so it sees what reached SQS a moment ago.
def _sync(args: argparse.Namespace) -> int:
    report = _with_db(lambda conn: _archive(conn, args.max))
    if args.json:
        return _print_json(report)
    print(f"moved {report['moved']} dead letter(s) from SQS into Postgres"
          f"{'' if report['complete'] else f' (stopped after --max {args.max}; run it again)'}")
    return 0


def _archive(conn: Any, max_messages: int = 1000) -> dict[str, Any]:
    from dataclasses import asdict

    from gateway.operations import dlq
    from shared import queue
    from shared.settings import CommonSettings

    sqs = dlq.DeadLetterQueue.of(queue.from_settings(CommonSettings()))
    return asdict(dlq.archive(sqs, conn, max_messages=max_messages))


def _list(args: argparse.Namespace) -> int:
    from gateway.operations import dlq

    result = _with_db(lambda conn: dlq.list_letters(
        conn, tenant_id=args.tenant, status=None if args.status == "all" else args.status,
        page=args.page, limit=args.limit), sync=args.sync)
    if args.json:
        return _print_json(result)
    rows = [[i["message_id"], i["run_id"] or "-", i["tenant_id"] or "-", i["receive_count"],
             i["deliveries"] if i["deliveries"] is not None else "-", _age(i["age_s"]),
             i["status"], i["run_status"] or "-", i["reason"]] for i in result["items"]]
    _table(["MESSAGE", "RUN", "TENANT", "RECEIVES", "DELIVERIES", "AGE", "STATE", "RUN STATUS",
            "REASON"], rows)
    pages = max(1, -(-result["total"] // args.limit))
    print(f"\npage {result['page']} of {pages}, {result['total']} dead letter(s)")
    return 0


def _show(args: argparse.Namespace) -> int:
    from gateway.operations import dlq

    return _print_json(_with_db(lambda conn: dlq.show(conn, args.message_id,
                                                      tenant_id=args.tenant), sync=args.sync))


def _redrive(args: argparse.Namespace) -> int:
    from gateway.operations import dlq

    selection = dlq.Selection(all=args.all, run_ids=frozenset(args.run_ids),
                              message_ids=frozenset(args.message_ids))
    def redrive(conn: Any) -> dict[str, Any]:
        from shared import queue
        from shared.settings import CommonSettings

        result = dlq.redrive(conn, selection=selection, actor=_who(args), reason=args.reason,
                             tenant_id=args.tenant, dry_run=args.dry_run, limit=args.limit)
        run_ids = [i["run_id"] for i in result["items"] if i["outcome"] == "redriven"]
        # Committed to the outbox; publish now rather than wait for a gateway's relay.
        result["published"] = dlq.publish_now(conn, queue.from_settings(CommonSettings()),
                                              run_ids) if run_ids else 0
        return result

    result = _with_db(redrive, sync=args.sync)
    if args.json:
        return _print_json(result)
    _table(["MESSAGE", "RUN", "RUN STATUS", "REOPEN", "OUTCOME", "DETAIL"], [
        [i["message_id"], i["run_id"] or "-", i.get("run_status", "-"),
         "yes" if i.get("reopened") else "no", i["outcome"], i.get("detail", "")]
        for i in result["items"]])
    if args.dry_run:
        print(f"\n{result['redriven']} message(s) would be redriven")
    else:
        waiting = result["redriven"] - result["published"]
        print(f"\n{result['redriven']} message(s) redriven, {result['published']} published to "
              f"the ingest queue" + (f"; {waiting} wait in the outbox for a gateway to publish"
                                     if waiting else ""))
    return 0


def _purge(args: argparse.Namespace) -> int:
    from gateway.operations import dlq

    older_than_s = dlq.parse_age(args.older_than)

    def purge(dry_run: bool, sync: bool) -> dict[str, Any]:
        return _with_db(lambda conn: dlq.purge(
            conn, older_than_s=older_than_s, actor=_who(args), reason=args.reason,
            tenant_id=args.tenant, dry_run=dry_run), sync=sync)

    if not (args.yes or args.dry_run):
        preview = purge(dry_run=True, sync=args.sync)
        if not preview["purged"]:
            print("No open dead letter is that old; nothing to purge.")
            return 0
        if not _confirm(f"Purge {preview['purged']} dead letter(s) older than "
                        f"{args.older_than}? They cannot be redriven after."):
            print("Nothing purged.")
            return 1
        args.sync = False  # purge what was shown, not what arrived since
    result = purge(dry_run=args.dry_run, sync=args.sync)
    if args.json:
        return _print_json(result)
    _table(["MESSAGE", "RUN", "TENANT", "AGE"], [
        [i["message_id"], i["run_id"] or "-", i["tenant_id"] or "-", _age(i["age_s"])]
        for i in result["items"]])
    print(f"\n{result['purged']} message(s) {'would be ' if args.dry_run else ''}purged")
    return 0


def _with_db(operation: Callable[[Any], dict[str, Any]], sync: bool = False) -> dict[str, Any]:
    from shared import db
    from shared.settings import CommonSettings

    settings = CommonSettings()
    applog.setup("cli", settings.log_level)
    with db.connect(settings.database_url, autocommit=True, connect_timeout=10) as conn:
        if sync:
            _archive(conn)
        return operation(conn)


def _who(args: argparse.Namespace) -> Any:
    from gateway.operations import reopen

    return reopen.Actor(f"cli:{args.actor or getpass.getuser()}")


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print(f"{question} Refusing without a terminal to ask: pass --yes.", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


# ── cleanup ─────────────────────────────────────────────────────────────────────────────────
def _cleanup(args: argparse.Namespace) -> int:
    from gateway.operations import cleanup
    from shared import aws
    from shared.settings import CommonSettings

    settings = CommonSettings()
    applog.setup("cli", settings.log_level)
    s3 = aws.client("s3", endpoint_url=settings.aws_endpoint_url, region=settings.aws_region)
    report = cleanup.run(settings.database_url, s3, upload_store_uri=settings.upload_store_uri,
                         artifact_store_uri=settings.artifact_store_uri,
                         policy=cleanup.Policy.from_settings(settings), dry_run=args.dry_run)
    if not report.ran:
        print("Another cleanup pass is running (a gateway replica?); try again later.")
        return 1
    if args.json:
        return _print_json({**report.summary(), "dry_run": args.dry_run,
                            "removed": report.removed_orphans + report.removed_finished
                            + report.removed_artifacts})
    verb = "would remove" if args.dry_run else "removed"
    for uri in report.removed_orphans + report.removed_finished + report.removed_artifacts:
        print(f"{verb} {uri}")
    summary = report.summary()
    print(f"\n{verb} {summary['orphans']} orphaned upload(s), {summary['finished_uploads']} "
          f"upload(s) of finished runs and {summary['artifacts']} artifact(s); "
          f"kept {summary['kept']}, {summary['errors']} error(s)")
    # Records imports (gateway/operations/cleanup.py): counts only, the rows have no URI.
    print(f"{verb} {summary['staged_rows']} staged import row(s) of finished batches and "
          f"{summary['row_errors']} import row error(s)")
    return 1 if report.errors else 0


# ── output ──────────────────────────────────────────────────────────────────────────────────
def _print_json(value: Any) -> int:
    sys.stdout.write(orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header) - 1)]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"
