"""`ingest events list | show | replay | discard | edit`: the event ledger, for operators.

The same service as the API (gateway/events/replay.py), across every tenant unless --tenant
names one. Results go to stdout (a table, or JSON with --json); a replay is recorded in
event_replays, a discard or an edit (with its --reason) in event_actions, as
``cli:<--actor or the OS user>``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import Any

import orjson


def add_commands(sub: Any) -> None:
    events = sub.add_parser("events", help="event ledger: list, show and replay dead letters")
    actions = events.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="events, newest first (dead letters by default)")
    listing.add_argument("--state", choices=("pending", "processed", "dead_letter", "discarded",
                                             "all"),
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

    discard = actions.add_parser("discard", help="set a pending or dead-letter event aside "
                                 "for good (one by id, or every one --matching a filter), "
                                 "on the record")
    discard.add_argument("ledger_id", type=int, nargs="?", default=None)
    discard.add_argument("--matching", action="store_true", help="every pending or dead-letter "
                         "event matching --state/--source/--type/--error/--since/--until")
    discard.add_argument("--state", choices=("pending", "dead_letter"), default=None,
                         help="with --matching: only this state (default both)")
    _filters(discard)
    discard.add_argument("--since", default=None, help="with --matching: first seen at or "
                         "after this ISO 8601 time")
    discard.add_argument("--until", default=None, help="with --matching: first seen before")
    discard.add_argument("--preview", action="store_true",
                         help="with --matching: only count what matches")
    discard.add_argument("--at-most", type=int, default=None, help="with --matching: refuse "
                         "if more than this many match (the count you previewed)")
    _seen(discard)
    _why(discard)
    discard.set_defaults(run=_discard)

    edit = actions.add_parser("edit", help="correct a pending or dead-letter event (payload, "
                              "time, sequence) and apply it again, on the record")
    edit.add_argument("ledger_id", type=int)
    payload = edit.add_mutually_exclusive_group()
    payload.add_argument("--payload", default=None, help="the new payload, a JSON object")
    payload.add_argument("--payload-file", default=None,
                         help="a file holding the new payload ('-': standard input)")
    edit.add_argument("--emitted-at", default=None, help="the corrected source_emitted_at "
                      "(ISO 8601 with its offset; 'none' clears it)")
    edit.add_argument("--sequence", default=None, help="the corrected source_sequence "
                      "('none' clears it)")
    _seen(edit)
    _why(edit)
    edit.set_defaults(run=_edit)


def _seen(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--if-version", type=int, default=None, help="act only if the event is "
                        "still at this version (`ingest events show ID` prints it); a retry "
                        "of an action already taken answers as it did")
    parser.add_argument("--if-state", choices=("pending", "dead_letter"), default=None,
                        help="act only if the event is still in this state")


def _why(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", default=None, help="why: kept with the action "
                        "(required but for --preview)")
    parser.add_argument("--actor", default=None, help="who acts (default: the OS user)")
    _common(parser)


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


def _discard(args: argparse.Namespace) -> int:
    if args.matching == (args.ledger_id is not None):
        print("Give an event id, or --matching with a filter; not both.", file=sys.stderr)
        return 2
    if not args.reason and not (args.matching and args.preview):
        print("Say why with --reason: it is kept with the action.", file=sys.stderr)
        return 2
    if args.matching:
        return _discard_matching(args)
    return _act(args, lambda replay, conn, tenant_id: replay.discard(
        conn, args.ledger_id, tenant_id=tenant_id, actor=_actor(args), actor_user_id=None,
        reason=args.reason, seen=replay.Seen(args.if_version, args.if_state)))


def _discard_matching(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {}

    def work(replay: Any, conn: Any, tenant_id: Any) -> dict[str, Any]:
        wanted = replay.Filter.of(state=args.state, source_system=args.source_system,
                                  type=args.type, error=args.error, since=args.since,
                                  until=args.until)
        result.update(replay.discard_matching(
            conn, tenant_id=tenant_id, wanted=wanted, actor=_actor(args), actor_user_id=None,
            reason=args.reason or "", preview=args.preview, at_most=args.at_most))
        return result

    code = _run(args, work)
    if code != -1:
        return code
    if args.preview:
        print(f"{result['matched']} event(s) match; discard them with the same filter and "
              f"--at-most {result['matched']}")
    else:
        purge = f" (purge {result['purge_id']})" if result["purge_id"] else ""
        print(f"discarded {result['discarded']} event(s){purge}")
    return 0


def _edit(args: argparse.Namespace) -> int:
    from gateway.events.replay import UNSET

    changes: dict[str, Any] = {}
    text = args.payload
    if args.payload_file is not None:
        text = sys.stdin.read() if args.payload_file == "-" else Path(args.payload_file).read_text()
    if text is not None:
        try:
            changes["payload"] = json.loads(text)
        except ValueError:
            print("The payload is not valid JSON; give one JSON object.", file=sys.stderr)
            return 1
    if args.emitted_at is not None:
        changes["source_emitted_at"] = None if args.emitted_at == "none" else args.emitted_at
    if args.sequence is not None:
        try:
            changes["source_sequence"] = None if args.sequence == "none" else int(args.sequence)
        except ValueError:
            print("--sequence must be a whole number, or none.", file=sys.stderr)
            return 1
    if not args.reason:
        print("Say why with --reason: it is kept with the action.", file=sys.stderr)
        return 2
    if not changes:
        print("Say what to correct: --payload/--payload-file, --emitted-at or --sequence.",
              file=sys.stderr)
        return 2
    return _act(args, lambda replay, conn, tenant_id: replay.edit(
        conn, args.ledger_id, tenant_id=tenant_id, actor=_actor(args), actor_user_id=None,
        reason=args.reason, seen=replay.Seen(args.if_version, args.if_state),
        **{k: changes.get(k, UNSET) for k in ("payload", "source_emitted_at",
                                                 "source_sequence")}))


def _actor(args: argparse.Namespace) -> str:
    return f"cli:{args.actor or getpass.getuser()}"


def _act(args: argparse.Namespace, action: Any) -> int:
    result: dict[str, Any] = {}

    def work(replay: Any, conn: Any, tenant_id: Any) -> dict[str, Any]:
        result.update(action(replay, conn, tenant_id))
        return result

    code = _run(args, work)
    if code != -1:
        return code
    print(f"event {result['ledger_id']}: {result['action']} recorded "
          f"(action {result['action_id']}); now {result['state']}")
    return 0
