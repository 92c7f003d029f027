"""The `ingest` command: dev stack, gateway, worker, migrations and admin scripts."""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import sys
from pathlib import Path
from typing import Any

from cli import ops
from shared import logging as applog

DEV_ENV_FILE = Path(".ingest/dev.env")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _load_dev_env(args.command)
    # JSON lines from the first moment: a crash while reading settings is logged, redacted,
    # instead of a raw traceback that may quote DATABASE_URL. Commands refine the level.
    applog.setup(args.command if args.command in ("gateway", "worker") else "cli",
                 os.environ.get("LOG_LEVEL", "INFO"))
    return int(args.run(args) or 0)


# E-mails are unique per tenant (docs/decisions/0202): an address two tenants use needs one.
TENANT_HELP = "tenant name; needed when several tenants have this e-mail"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="run the whole embedded stack on this machine")
    dev.add_argument("--workers", type=int, default=None, help="worker processes (default 1)")
    dev.add_argument("--port", type=int, default=None, help="gateway port (default 8000)")
    dev.set_defaults(run=_dev)

    gw = sub.add_parser("gateway", help="serve the HTTP API")
    gw.add_argument("--host", default=None)
    gw.add_argument("--port", type=int, default=None)
    gw.set_defaults(run=_gateway)

    worker = sub.add_parser("worker", help="consume ingest jobs from SQS")
    worker.add_argument("--once", action="store_true", help="process what is queued, then exit")
    worker.set_defaults(run=_worker)

    sub.add_parser("migrate", help="apply pending database migrations").set_defaults(run=_migrate)

    boot = sub.add_parser("bootstrap", help="migrate, and create the queues and upload bucket")
    boot.add_argument("--queue-name", default="ingest-jobs")
    boot.add_argument("--bucket", default=None, help="bucket to create (default: none)")
    boot.set_defaults(run=_bootstrap)

    users = sub.add_parser("users", help="manage users").add_subparsers(dest="action", required=True)
    create = users.add_parser("create", help="create a user (and its tenant if new)")
    create.add_argument("--tenant", required=True, help="tenant name")
    create.add_argument("--email", required=True)
    create.add_argument("--role", choices=("admin", "user", "operator"), default="user")
    create.add_argument("--password", help="default: $INGEST_PASSWORD or a prompt")
    create.set_defaults(run=_users_create)
    listing = users.add_parser("list", help="list a tenant's users")
    listing.add_argument("--tenant", required=True, help="tenant name")
    listing.set_defaults(run=_users_list)
    set_role = users.add_parser("set-role", help="change a user's role (ends their sessions)")
    set_role.add_argument("--email", required=True)
    set_role.add_argument("--tenant", help=TENANT_HELP)
    set_role.add_argument("--role", required=True, choices=("admin", "user", "operator"))
    set_role.set_defaults(run=_users_update)
    for action, text in (("deactivate", "refuse sign-in and end every session"),
                         ("reactivate", "allow sign-in again")):
        cmd = users.add_parser(action, help=text)
        cmd.add_argument("--email", required=True)
        cmd.add_argument("--tenant", help=TENANT_HELP)
        cmd.set_defaults(run=_users_update, active=action == "reactivate")
    reset = users.add_parser("reset-password", help="set a new password (ends their sessions)")
    reset.add_argument("--email", required=True)
    reset.add_argument("--tenant", help=TENANT_HELP)
    reset.add_argument("--password", help="default: $INGEST_PASSWORD or a prompt")
    reset.set_defaults(run=_users_update)

    token = sub.add_parser("token", help="print a bearer token for a user (for scripts)")
    token.add_argument("--email", required=True)
    token.add_argument("--tenant", help=TENANT_HELP)
    token.add_argument("--hours", type=float, default=None, help="expiry (default JWT_EXPIRY_HOURS)")
    token.set_defaults(run=_token)
    ops.add_commands(sub)
    from cli import sources  # `ingest sources grant|revoke|grants` (docs/decisions/0065)

    sources.add_commands(sub)
    from cli import verify  # `ingest verify`: the import golden path (docs/decisions/0131)

    verify.add_command(sub)

    from cli import events  # `ingest events list|show|replay` (docs/decisions/0142)

    events.add_commands(sub)
    return parser


def _load_dev_env(command: str) -> None:
    """Outside `ingest dev`, commands run against the dev stack if no DATABASE_URL is given."""
    if command == "dev" or "DATABASE_URL" in os.environ or not DEV_ENV_FILE.exists():
        return
    for line in DEV_ENV_FILE.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            os.environ.setdefault(key.strip(), value.strip())


def _dev(args: argparse.Namespace) -> int:
    from cli import dev

    return dev.run(workers=args.workers, port=args.port)


def _gateway(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import create_app
    from gateway.edge import shares, transport
    from gateway.events import timing
    from shared.settings import GatewaySettings

    settings = GatewaySettings()
    applog.setup("gateway", settings.log_level)
    app = create_app(settings)
    if not settings.session_cookie_secure and not settings.dev_mode:
        logging.getLogger("gateway").warning(
            "SESSION_COOKIE_SECURE=false: cookies go over plain HTTP; only for development")
    # Each client's share of connections and requests (gateway/edge/shares.py, ADR 0323).
    client_shares = shares.Shares.from_settings(settings)
    served = shares.middleware(client_shares, app)
    if settings.events_server_timing:  # intake answers say where their time went (ADR 0341)
        served = timing.arrivals(served)
    config = uvicorn.Config(
        served, host=args.host or settings.host,
        port=args.port or settings.port, loop="uvloop",
        log_config=None, access_log=False, timeout_graceful_shutdown=10,
        # Slow clients, connections per process, TLS, proxies (gateway/edge/transport.py).
        **transport.server_options(settings, client_shares))

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            # Open live streams would hold the graceful shutdown for its whole timeout: end
            # them, on the loop (a signal handler may run in the middle of a callback).
            ctx = getattr(app.state, "ctx", None)
            if ctx is not None and getattr(ctx, "live", None) is not None:
                ctx.live.end_all_soon()

    # Several processes on one port (`ingest dev`, ADR 0324): each binds it with SO_REUSEPORT.
    sockets = [transport.reuse_port_socket(config.host, config.port)] \
        if settings.reuse_port else None
    Server(config).run(sockets=sockets)
    return 0


def _worker(args: argparse.Namespace) -> int:
    from shared.settings import WorkerSettings
    from worker import main as worker_main

    settings = WorkerSettings()
    applog.setup("worker", settings.log_level)
    code = worker_main.run(settings, once=args.once)
    # Jobs abandoned at shutdown may still be inside torch's native threads, which abort the
    # interpreter's finalisation; everything durable is already written, so leave directly.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _migrate(_: argparse.Namespace) -> int:
    from shared.db import migrate
    from shared.settings import CommonSettings

    settings = CommonSettings()
    applog.setup("cli", settings.log_level)
    applied = migrate.apply(settings.database_url)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    return 0


def _bootstrap(args: argparse.Namespace) -> int:
    """Idempotent set-up of a fresh environment (compose runs it once before the services)."""
    from shared import aws, objectstore, queue
    from shared.db import migrate
    from shared.settings import CommonSettings

    settings = CommonSettings()
    applog.setup("cli", settings.log_level)
    migrate.apply(settings.database_url)
    sqs = aws.client("sqs", endpoint_url=settings.aws_endpoint_url, region=settings.aws_region)
    url, dlq_url = queue.ensure_queues(sqs, args.queue_name,
                                       max_receive_count=settings.sqs_max_receive_count)
    print(f"SQS_QUEUE_URL={url}\nSQS_DLQ_URL={dlq_url}")
    if args.bucket:
        s3 = aws.client("s3", endpoint_url=settings.aws_endpoint_url, region=settings.aws_region)
        objectstore.ensure_bucket(s3, args.bucket, settings.aws_region)
    return 0


def _password(args: argparse.Namespace, prompt: str) -> str:
    """--password, else $INGEST_PASSWORD, else a prompt; with no terminal to prompt on (a
    script, a pipe) say how to pass one instead of dying in getpass with EOFError."""
    password = args.password or os.environ.get("INGEST_PASSWORD")
    if password:
        return str(password)
    if not sys.stdin.isatty():
        raise SystemExit("no password given and no terminal to ask on: "
                         "pass --password or set INGEST_PASSWORD")
    return getpass.getpass(prompt)


def _users_create(args: argparse.Namespace) -> int:
    from gateway.auth import users
    from shared import db
    from shared.settings import CommonSettings

    password = _password(args, "Password: ")
    with db.connect(CommonSettings().database_url) as conn:
        tenant_id = users.ensure_tenant(conn, args.tenant)
        user = users.create_user(conn, tenant_id=tenant_id, email=args.email,
                                 password=password, role=args.role)
    print(f"created {user['role']} {user['user_id']} in tenant {args.tenant} ({tenant_id})")
    return 0


def _users_list(args: argparse.Namespace) -> int:
    from gateway.auth import users
    from shared import db, errors
    from shared.settings import CommonSettings

    with db.connect(CommonSettings().database_url) as conn:
        try:
            rows = users.list_tenant_users(conn, args.tenant)
        except errors.NotFound as exc:
            print(exc.detail, file=sys.stderr)
            return 1
    for user in rows:
        status = "active" if user["active"] else "deactivated"
        print(f"{user['user_id']}  {user['role']:<8}  {status:<11}  {user['email']}")
    return 0


def _users_update(args: argparse.Namespace) -> int:
    """set-role, deactivate, reactivate and reset-password: each ends the user's sessions."""
    from gateway.auth import users
    from shared import db, errors
    from shared.settings import CommonSettings

    password = None
    if args.action == "reset-password":
        password = _password(args, "New password: ")
    with db.connect(CommonSettings().database_url) as conn:
        try:
            user = users.cli_update(conn, args.email, role=getattr(args, "role", None),
                                    active=getattr(args, "active", None), password=password,
                                    tenant=args.tenant)
        except (errors.NotFound, errors.InvalidRequest) as exc:
            print(exc.detail, file=sys.stderr)
            return 1
    status = "active" if user["active"] else "deactivated"
    print(f"{args.action}: {user['role']} {user['user_id']} is {status}; its sessions ended")
    return 0


def _token(args: argparse.Namespace) -> int:
    from gateway import auth
    from gateway.auth import users
    from shared import db, errors
    from shared.settings import GatewaySettings

    settings = GatewaySettings()
    with db.connect(settings.database_url) as conn:
        try:
            # The token carries the user's current version: it ends with their sessions.
            principal = users.token_principal(conn, args.email, args.tenant)
        except (errors.NotFound, errors.InvalidRequest) as exc:
            print(exc.detail, file=sys.stderr)
            return 1
    print(auth.issue_token(principal, settings.jwt_secret, args.hours or settings.jwt_expiry_hours))
    return 0


if __name__ == "__main__":
    sys.exit(main())
