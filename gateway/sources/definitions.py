"""Admin S3 sources: what a source is, how its fields are checked, and create/read/update/delete.

A source names a bucket and prefix, optionally an endpoint and region, and include/exclude
globs. It never holds credentials: the gateway reads them from its environment or role. A
source is deleted softly (docs/decisions/0020-s3-source-deletion.md): no row is removed, its
documents stop being served. Who may read which bucket, and where requests may go, is
gateway/sources/access.py: create and update ask it before they write.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse
from uuid import UUID

import msgspec
from msgspec import Meta

from gateway.edge import strict_body
from gateway.sources import access as source_access
from gateway.sources import deactivation
from shared import db, errors
from shared.addresses import IPV6_LITERAL

Q = db.load_queries(Path(__file__).with_name("sources.sql"))

FIELDS = ("name", "bucket", "prefix", "endpoint_url", "region", "include_patterns",
          "exclude_patterns", "enabled", "sync_every_minutes")
# A schedule's bounds (docs/decisions/0118), as the column's CHECK has them.
MIN_EVERY_MINUTES, MAX_EVERY_MINUTES = 5, 7 * 24 * 60
# S3 bucket naming rules (general purpose buckets): 3-63 of a-z 0-9 . -, a letter or digit at
# each end, no '..', '.-' or '-.', not an IP address, no reserved prefix or suffix.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_BUCKET_IP = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_REGION = re.compile(r"^[a-z0-9-]{1,40}$")
# Field names that look like someone trying to store credentials with the source.
_CREDENTIAL_LIKE = re.compile(r"(?i)secret|access.?key|password|token|credential|session")
MAX_PATTERNS = 100
MAX_PATTERN_CHARS = 512
MAX_NAME_CHARS = 200
# Characters, as /schema can say it; 256 of them stay within an S3 key's 1,024 UTF-8 bytes.
MAX_PREFIX_CHARS = 256
DELETED_REASON = "Cancelled: the source was deleted before this run started."


@dataclass(frozen=True)
class Source:
    source_id: UUID
    tenant_id: UUID
    name: str
    bucket: str
    prefix: str
    endpoint_url: str | None
    region: str | None
    include_patterns: tuple[str, ...]
    exclude_patterns: tuple[str, ...]
    enabled: bool

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Source:
        return cls(row["source_id"], row["tenant_id"], row["name"], row["bucket"], row["prefix"],
                   row["endpoint_url"], row["region"], tuple(row["include_patterns"]),
                   tuple(row["exclude_patterns"]), row["enabled"])

    def uri(self, key: str) -> str:
        """Document identity of an object: path-based, so new bytes are a new version (§14)."""
        return f"s3://{self.bucket}/{key}"

    def matches(self, key: str) -> bool:
        """Include/exclude globs, matched against the key below the prefix.

        fnmatch semantics: ``*`` also crosses ``/``, so ``*.md`` matches ``a/b/c.md``. No
        include pattern means everything; an exclude wins over an include.
        """
        rel = key[len(self.prefix):] if key.startswith(self.prefix) else key
        if self.include_patterns and not any(fnmatch.fnmatchcase(rel, p)
                                             for p in self.include_patterns):
            return False
        return not any(fnmatch.fnmatchcase(rel, p) for p in self.exclude_patterns)


def lock_key(source_id: UUID) -> int:
    """The advisory lock key of a source's sync: hashed with a namespace, so it cannot collide
    with the worker's keys, which are raw run and document id bytes."""
    digest = hashlib.sha256(b"source-sync:" + source_id.bytes).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def view(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in ("source_id", "name", "bucket", "prefix", "endpoint_url", "region",
                               "include_patterns", "exclude_patterns", "enabled",
                               "sync_every_minutes", "created_by", "created_at", "updated_at")}
    out["last_sync"] = None if row["last_sync_id"] is None else {
        "sync_id": row["last_sync_id"], "status": row["last_sync_status"],
        "started_at": row["last_sync_started_at"], "finished_at": row["last_sync_finished_at"]}
    return out


# ── validation ──────────────────────────────────────────────────────────────────────────────
# The body as /schema declares it (ADR 0200): each field's rule, as a pattern where the checks
# below have one, and the sentence a refusal says. parse() validates with these types first,
# so the document and the checks cannot drift; the checks then clean the values.
_NO_NUL = r"^[^\x00]*$"
BUCKET_PATTERN = (r"^(?!xn--|sthree-|amzn-s3-demo-)(?!\d+\.\d+\.\d+\.\d+$)(?!.*\.\.)(?!.*\.-)"
                  r"(?!.*-\.)(?!.*(-s3alias|--ol-s3|\.mrap|--x-s3|--table-s3)$)"
                  r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# Leading '/' dropped; no '.', '..' or empty folder; the last piece may be partial or empty.
PREFIX_PATTERN = (r"^/*(?:(?!\.\.?/)[^/\x00-\x1f\x7f\\]+/)*(?!\.\.?$)"
                  r"[^/\x00-\x1f\x7f\\]*$")
# A port urllib reads (1 to 5 digits, at most 65535), as the patterns below declare it.
PORT_PATTERN = r"(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
# http(s), a host (a name, IPv4 or a bracketed IPv6 literal, judged by the address rules: a
# policy refusal is 403, ADR 0200), a port, a path: no credentials, query or fragment.
ENDPOINT_PATTERN = (r"^https?://([A-Za-z0-9._~-]+|" + IPV6_LITERAL + ")" + PORT_PATTERN
                    + r"(/[^\s?#\x00-\x1f\x7f]*)?$")
_BUCKET_RULE = ("bucket must be an S3 bucket name: 3 to 63 lowercase letters, digits, dots or "
                "hyphens, starting and ending with a letter or digit, not shaped like an IP "
                "address.")
Name = Annotated[str, Meta(max_length=MAX_NAME_CHARS, pattern=r"^[^\x00]*[^\s\x00][^\x00]*$",
                           description=f"name must be 1 to {MAX_NAME_CHARS} characters of "
                                       "text.")]
Bucket = Annotated[str, Meta(pattern=BUCKET_PATTERN, description=_BUCKET_RULE)]
Prefix = Annotated[str, Meta(max_length=MAX_PREFIX_CHARS, pattern=PREFIX_PATTERN, description=(
    f"prefix must be at most {MAX_PREFIX_CHARS} characters without control characters, and "
    "must not contain '.', '..' or empty folders, nor a backslash; write the folder as it is, "
    "e.g. 'docs/2024/'."))]
Endpoint = Annotated[str, Meta(max_length=2048, pattern=ENDPOINT_PATTERN, description=(
    "endpoint_url must be an http(s) URL such as 'https://s3.eu-west-1.amazonaws.com', "
    "with a port up to 65535 if any, without credentials, a query or a fragment."))]
Region = Annotated[str, Meta(pattern=r"^[a-z0-9-]{1,40}$",
                             description="region must look like 'eu-west-1'.")]
Patterns = Annotated[list[Annotated[str, Meta(min_length=1, max_length=MAX_PATTERN_CHARS,
                                              pattern=_NO_NUL)]],
                     Meta(max_length=MAX_PATTERNS, description=(
                         f"Patterns must be a list of at most {MAX_PATTERNS} globs such as "
                         "'docs/*' or '*.md'."))]
Every = Annotated[int, Meta(ge=5, le=7 * 24 * 60, description=(
    "sync_every_minutes must be a whole number of minutes from 5 to 10080 (a week), or null "
    "for no schedule."))]
Enabled = Annotated[bool, Meta(description="enabled must be true or false.")]


class SourceChange(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A PATCH: any field but the bucket."""

    name: Name | msgspec.UnsetType = msgspec.UNSET
    prefix: Prefix | msgspec.UnsetType = msgspec.UNSET
    endpoint_url: Endpoint | None | msgspec.UnsetType = msgspec.UNSET
    region: Region | None | msgspec.UnsetType = msgspec.UNSET
    include_patterns: Patterns | msgspec.UnsetType = msgspec.UNSET
    exclude_patterns: Patterns | msgspec.UnsetType = msgspec.UNSET
    enabled: Enabled | msgspec.UnsetType = msgspec.UNSET
    sync_every_minutes: Every | None | msgspec.UnsetType = msgspec.UNSET


class SourceFields(SourceChange, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """A new source (and a connection test): the bucket, and any other field."""

    bucket: Bucket


def parse(data: Any, *, partial: bool) -> dict[str, Any]:
    """Check a create (all required fields) or PATCH (only those given) body; return clean values.

    Only the shape: whether this tenant may read the bucket, and whether the endpoint may be
    called, is for create/update (gateway/sources/access.py).
    """
    if not isinstance(data, dict):
        raise errors.InvalidRequest("Send the source as a JSON object.")
    _refuse_unknown(data)
    if not partial and "bucket" not in data:
        raise errors.InvalidRequest("bucket is required.")
    if partial and "bucket" in data:
        raise errors.InvalidRequest("A source's bucket cannot change: its documents are named "
                                    "after it; create a new source instead.")
    _declared(data, SourceChange if partial else SourceFields)
    data = strict_body.integral(data)
    checks = {"name": _name, "bucket": bucket_name, "prefix": clean_prefix, "region": _region,
              "include_patterns": _patterns, "exclude_patterns": _patterns, "enabled": _enabled,
              "endpoint_url": _endpoint, "sync_every_minutes": _schedule}
    clean = {field: checks[field](data[field]) for field in FIELDS if field in data}
    if not partial:
        clean.setdefault("prefix", "")
        clean.setdefault("name", f"{clean['bucket']}/{clean['prefix']}".rstrip("/"))
        clean.setdefault("endpoint_url", None)
        clean.setdefault("region", None)
        clean.setdefault("include_patterns", [])
        clean.setdefault("exclude_patterns", [])
        clean.setdefault("enabled", True)
        clean.setdefault("sync_every_minutes", None)
    return clean


def _declared(data: dict[str, Any], body: type[msgspec.Struct]) -> None:
    """The body as /schema declares it, or the refused field's rule in words."""
    try:
        msgspec.convert(strict_body.integral(data), body, strict=True)
    except msgspec.ValidationError as exc:
        raise errors.InvalidRequest(_rule(body, str(exc))) from None


def _rule(body: type[msgspec.Struct], message: str) -> str:
    field = re.search(r"\$\.(\w+)", message)
    info = msgspec.inspect.type_info(body)
    for f in getattr(info, "fields", ()):
        if field and f.name == field.group(1):
            described = _described(f.type)
            if described:
                return described
    return message[:300]


def _described(info: Any) -> str | None:
    if isinstance(info, msgspec.inspect.UnionType):
        return next(filter(None, (_described(t) for t in info.types)), None)
    if isinstance(info, msgspec.inspect.Metadata):
        return (info.extra_json_schema or {}).get("description") or _described(info.type)
    if isinstance(info, msgspec.inspect.ListType):
        return _described(info.item_type)
    return None


def _refuse_unknown(data: dict[str, Any]) -> None:
    for field in data:
        if _CREDENTIAL_LIKE.search(field):
            raise errors.InvalidRequest(
                "Sources never store credentials: the gateway reads S3 credentials from its own "
                "environment or role; remove the field and grant the gateway access instead.")
        if field not in FIELDS:
            raise errors.InvalidRequest(
                f"Unknown field {field!r}; a source has: {', '.join(FIELDS)}.")


def _text(value: Any, field: str, max_chars: int) -> str:
    if not isinstance(value, str) or len(value) > max_chars or "\x00" in value:
        raise errors.InvalidRequest(f"{field} must be text of at most {max_chars} characters.")
    return value


def _name(value: Any) -> str:
    name = _text(value, "name", MAX_NAME_CHARS).strip()
    if not name:
        raise errors.InvalidRequest("name must not be empty.")
    return name


def bucket_name(value: Any) -> str:
    if (not isinstance(value, str) or not _BUCKET.match(value) or ".." in value
            or ".-" in value or "-." in value or _BUCKET_IP.match(value)
            or value.startswith(_BUCKET_RESERVED_PREFIXES)
            or value.endswith(_BUCKET_RESERVED_SUFFIXES)):
        raise errors.InvalidRequest("bucket must be an S3 bucket name: 3 to 63 lowercase "
                                    "letters, digits, dots or hyphens, starting and ending with "
                                    "a letter or digit, not shaped like an IP address.")
    return value


def clean_prefix(value: Any) -> str:
    """A key prefix: at most 1,024 UTF-8 bytes, no control characters, no '.', '..' or empty
    folder and no backslash. S3 keys are literal, but some S3-compatible servers and proxies
    normalise paths, and a prefix is confined to a granted folder by plain string comparison."""
    if not isinstance(value, str) or len(value) > MAX_PREFIX_CHARS or any(
            ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise errors.InvalidRequest(f"prefix must be text of at most {MAX_PREFIX_CHARS} "
                                    "characters, without control characters.")
    # S3 keys rarely start with '/', and a prefix that does would match nothing.
    prefix = value.lstrip("/")
    # The last piece may be a partial name ('docs/rep' lists 'docs/report.md') or '' after '/'.
    *folders, last = prefix.split("/")
    if "\\" in prefix or any(f in ("", ".", "..") for f in folders) or last in (".", ".."):
        raise errors.InvalidRequest("prefix must not contain '.', '..' or empty folders, nor a "
                                    "backslash; write the folder as it is, e.g. 'docs/2024/'.")
    return prefix


def _region(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _REGION.match(value):
        raise errors.InvalidRequest("region must look like 'eu-west-1'.")
    return value


def _enabled(value: Any) -> bool:
    if not isinstance(value, bool):
        raise errors.InvalidRequest("enabled must be true or false.")
    return value


def _schedule(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) \
            or not MIN_EVERY_MINUTES <= value <= MAX_EVERY_MINUTES:
        raise errors.InvalidRequest(
            f"sync_every_minutes must be a whole number of minutes from {MIN_EVERY_MINUTES} to "
            f"{MAX_EVERY_MINUTES} (a week), or null for no schedule.")
    return value


def _patterns(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_PATTERNS or not all(
            isinstance(p, str) and 0 < len(p) <= MAX_PATTERN_CHARS for p in value):
        raise errors.InvalidRequest(f"Patterns must be a list of at most {MAX_PATTERNS} globs "
                                    "such as 'docs/*' or '*.md'.")
    return value


def _endpoint(value: Any) -> str | None:
    if value is None:
        return None
    url = _text(value, "endpoint_url", 2048).rstrip("/")
    parsed = urlparse(url)
    try:
        parsed.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise errors.InvalidRequest("endpoint_url has an invalid port.") from exc
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise errors.InvalidRequest("endpoint_url must be an http(s) URL such as "
                                    "'https://s3.eu-west-1.amazonaws.com'.")
    if parsed.username or parsed.password or parsed.query or parsed.fragment:
        # A URL with user:password@ would store a credential; query strings have no use here.
        raise errors.InvalidRequest("endpoint_url must not contain credentials, a query or a "
                                    "fragment; the gateway signs requests with its own role.")
    return url


# ── create / read / update ──────────────────────────────────────────────────────────────────
async def create(pool: db.AsyncPool, rules: source_access.Rules, *, tenant_id: UUID,
                 created_by: UUID, by_operator: bool, fields: dict[str, Any]) -> dict[str, Any]:
    """Register a source the caller may read (``by_operator``: the caller is platform staff)."""
    await source_access.check_endpoint(rules, fields["endpoint_url"])
    try:
        with db.translate():
            async with pool.connection() as conn:
                await source_access.authorize(conn, rules, tenant_id=tenant_id,
                                              bucket=fields["bucket"], prefix=fields["prefix"],
                                              by_operator=by_operator)
                row = await (await conn.execute(Q["insert_source"], {
                    **fields, "tenant_id": tenant_id, "created_by": created_by})).fetchone()
    except errors.Conflict as exc:
        raise errors.Conflict(f"A source named {fields['name']!r} already exists; choose "
                              "another name.") from exc
    assert row is not None
    return await get(pool, tenant_id=tenant_id, source_id=row["source_id"])


async def get(pool: db.AsyncPool, *, tenant_id: UUID, source_id: UUID) -> dict[str, Any]:
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["get_source"], {
            "tenant_id": tenant_id, "source_id": source_id})).fetchone()
    if row is None:
        raise errors.NotFound("No source with that id exists in your tenant.")
    return row


async def list_page(pool: db.AsyncPool, *, tenant_id: UUID, limit: int,
                    offset: int) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        return await (await conn.execute(Q["list_sources"], {
            "tenant_id": tenant_id, "limit": limit, "offset": offset})).fetchall()


async def update(pool: db.AsyncPool, rules: source_access.Rules, *, tenant_id: UUID,
                 source_id: UUID, by_operator: bool, changes: dict[str, Any]) -> dict[str, Any]:
    """Change a source; a new prefix must be readable by the caller or the source's creator, a
    new endpoint must pass the endpoint rules."""
    if "endpoint_url" in changes:
        await source_access.check_endpoint(rules, changes["endpoint_url"])
    keys = {"tenant_id": tenant_id, "source_id": source_id}
    try:
        with db.translate():
            async with pool.connection() as conn, conn.transaction():
                current = await (await conn.execute(Q["lock_source"], keys)).fetchone()
                if current is None:
                    raise errors.NotFound("No source with that id exists in your tenant.")
                if "prefix" in changes:
                    # An operator vouched for the whole bucket of a source it registered.
                    vouched = by_operator or await source_access.creator_is_operator(
                        conn, tenant_id=tenant_id, source_id=source_id)
                    await source_access.authorize(conn, rules, tenant_id=tenant_id,
                                                  bucket=current["bucket"],
                                                  prefix=changes["prefix"], by_operator=vouched)
                await conn.execute(Q["update_source"], {**current, **changes, **keys})
    except errors.Conflict as exc:
        raise errors.Conflict(f"A source named {changes.get('name')!r} already exists; choose "
                              "another name.") from exc
    return await get(pool, tenant_id=tenant_id, source_id=source_id)


# ── delete ──────────────────────────────────────────────────────────────────────────────────
async def delete(pool: db.AsyncPool, *, tenant_id: UUID, source_id: UUID) -> dict[str, Any]:
    """Soft-delete a source and stop serving its documents, in one transaction.

    Refused while the source syncs (the same advisory lock). Queued runs of its documents are
    cancelled; runs already running are the worker's and may still activate a version. The
    response counts them, and DELETE is idempotent: repeated once they finished, it deactivates
    what they activated.
    """
    keys = {"tenant_id": tenant_id, "source_id": source_id}
    with db.translate():
        async with pool.connection() as conn, conn.transaction():
            found = await (await conn.execute(Q["find_source_any"], keys)).fetchone()
            if found is None:
                raise errors.NotFound("No source with that id exists in your tenant.")
            locked = await (await conn.execute(Q["try_lock_source_xact"],
                                               {"key": lock_key(source_id)})).fetchone()
            if not locked or not locked["locked"]:
                running = await (await conn.execute(Q["running_sync"], keys)).fetchone()
                raise errors.SyncInProgress(
                    running and running["sync_id"],
                    "A sync of this source is running; wait for it to finish, then delete.")
            served = await (await conn.execute(Q["source_served_objects"], keys)).fetchall()
            done = await deactivation.deactivate(conn, tenant_id=tenant_id, source_id=source_id,
                                                 rows=served, run_error=DELETED_REASON)
            await conn.execute(Q["soft_delete_source"], keys)
            running_runs = await (await conn.execute(Q["count_running_source_runs"],
                                                     keys)).fetchone()
    assert running_runs is not None
    return {"source_id": source_id, "deleted": True,
            "already_deleted": found["deleted_at"] is not None,
            "documents_deactivated": done.documents, "runs_cancelled": done.runs_cancelled,
            "runs_still_running": running_runs["n"]}


# ── test connection (form-level) ────────────────────────────────────────────────────────────
def parse_probe(data: Any) -> dict[str, Any]:
    """The fields a connection test reads from the form: where and how to list. The whole
    form is checked like a create (it is the same body in /schema); the others (name,
    patterns, schedule) are then ignored."""
    clean = parse(data, partial=False)
    return {k: clean[k] for k in ("bucket", "prefix", "endpoint_url", "region")}
