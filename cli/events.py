"""`ingest events list | show | replay`: the event ledger's dead letters, for operators.

The same service as the API (gateway/events/replay.py), across every tenant unless --tenant
names one. Results go to stdout (a table, or JSON with --json); a replay is recorded in
event_replays as ``cli:<--actor or the OS user>``.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

import orjson


def add_commands(sub: Any) -> None:
    events = sub.add_parser("events", help="event ledger: list, show and replay dead letters")
    actions = events.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="events, newest first (dead letters by default)")
    listing.add_argument("--state", choices=("pending", "processed", "dead_letter", "all"),
                         default="dead_letter")
    _filters(listing)
    listing.add_argument("--limit", type=int, default=100, help="at most this many (≤ 1000)")
    listing.add_argument("--offset", type=int, default=0)
    _common(listing)
    listing.set_defaults(run=_list)

    show = actions.add_parser("show", help="one event in full, payload included")
    show.add_argument("ledger_id", type=int)
    _common(show)
    show.set_defaults(run=_show)

    replay = actions.add_parser("replay", help="reset dead letters to pending, on the record")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", type=int, action="append", default=[], dest="ids",
                       help="this dead letter (repeatable)")
    which.add_argument("--matching", action="store_true",
                       help="every dead letter matching --source/--type/--error")
    _filters(replay)
    replay.add_argument("--actor", default=None, help="who replays (default: the OS user)")
    _common(replay)
    replay.set_defaults(run=_replay)


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", dest="source_system", default=None)
    parser.add_argument("--type", default=None)
    parser.add_argument("--error", default=None, help="part of the error text")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", default=None, help="tenant name (default: every tenant)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _run(args: argparse.Namespace, work: Any) -> int:
    from gateway.events import replay
    from shared import db, errors
    from shared.settings import CommonSettings

    try:
        with db.connect(CommonSettings().database_url, autocommit=True) as conn:
            tenant_id = _tenant(conn, args.tenant)
            result = work(replay, conn, tenant_id)
    except errors.AppError as exc:
        print(exc.detail, file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    return -1 if not args.json else 0


def _tenant(conn: Any, name: str | None) -> Any:
    from shared import errors

    if name is None:
        return None
    row = conn.execute("SELECT tenant_id FROM tenants WHERE name = %s", (name,)).fetchone()
    if row is None:
        raise errors.NotFound(f"No tenant is called {name!r}.")
    return row["tenant_id"]


def _list(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {}

    def work(replay: Any, conn: Any, tenant_id: Any) -> dict[str, Any]:
        wanted = replay.Filter.of(state=None if args.state == "all" else args.state,
                                  source_system=args.source_system, type=args.type,
                                  error=args.error)
        result.update(replay.list_events(conn, tenant_id=tenant_id, wanted=wanted,
                                         limit=args.limit, offset=args.offset))
        return result

    code = _run(args, work)
    if code != -1:
        return code
    for e in result["events"]:
        print(f"{e['ledger_id']:>8}  {e['state']:<11}  {e['source_system'][:20]:<20}  "
              f"{e['type'][:24]:<24}  {e['apply_attempt_count']:>3}  {(e['error'] or '')[:80]}")
    print(f"{len(result['events'])} of {result['total']} event(s)")
    return 0


def _show(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {}

    def work(replay: Any, conn: Any, tenant_id: Any) -> dict[str, Any]:
        result.update(replay.show(conn, args.ledger_id, tenant_id=tenant_id))
        return result

    code = _run(args, work)
    if code != -1:
        return code
    for key, value in result.items():
        if key != "payload":
            print(f"{key:>22}: {value}")
    print(orjson.dumps(result["payload"], option=orjson.OPT_INDENT_2).decode())
    return 0


def _replay(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {}

    def work(replay: Any, conn: Any, tenant_id: Any) -> dict[str, Any]:
        wanted = None if args.ids else replay.Filter.of(
            source_system=args.source_system, type=args.type, error=args.error)
        result.update(replay.replay(conn, tenant_id=tenant_id,
                                    actor=f"cli:{args.actor or getpass.getuser()}",
                                    actor_user_id=None, ledger_ids=args.ids or None,
                                    wanted=wanted))
        return result

    code = _run(args, work)
    if code != -1:
        return code
    print(f"replayed {result['replayed']} event(s): "
          f"{' '.join(map(str, result['ledger_ids'])) or 'none was a dead letter'}")
    return 0
