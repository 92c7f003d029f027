"""The sign-in throttle: attempts per account and per client address, counted in Postgres.

Every replica shares the counts (migrations/0005_auth.sql, ``login_attempt``). An attempt is
counted before its password is checked, so parallel guesses cannot slip through while bcrypt
runs; the one past the limit is refused with 429 and locks the key for a window that doubles
with each lock-out. Keys are the same for known and unknown e-mails, so neither the refusal nor
its timing tells whether an account exists. See docs/decisions/0056-login-throttle.md.

An account is a tenant and an e-mail (docs/decisions/0202). A client holding the account's
device cookie (gateway/auth/devices.py) is counted on its own key instead, with the account's
limit: a stranger's failures lock the account and their address, not the user's own device
(docs/decisions/0204). Admins see an account's lock on the Users page.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import db, errors
from shared.settings import GatewaySettings

Q = db.load_queries(Path(__file__).with_name("login_throttle.sql"))


@dataclass(frozen=True)
class Limits:
    per_account: int
    per_address: int
    window_s: float
    lockout_s: float
    lockout_max_s: float

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> Limits:
        return cls(settings.login_max_attempts_per_account, settings.login_max_attempts_per_address,
                   settings.login_attempt_window_s, settings.login_lockout_s,
                   settings.login_lockout_max_s)


def account_key(tenant: str, email: str) -> str:
    # Hashed: the table keeps no address an attacker typed. The tenant's name in any case, as
    # sign-in matches it.
    account = f"{tenant.strip().lower()}\n{email.strip().lower()}"
    return "account:" + hashlib.sha256(account.encode()).hexdigest()


def address_key(address: str | None) -> str:
    return f"address:{address or 'unknown'}"


async def attempt(pool: db.AsyncPool, limits: Limits, *, account: str, address: str | None,
                  device: str | None = None) -> None:
    """Count one sign-in attempt; raise TooManyAttempts while it is locked: the account and the
    address, or for a known device (its throttle key) that device alone."""
    params = {"account": account, "address": address_key(address), "device": device,
              "per_account": limits.per_account, "per_address": limits.per_address,
              "window_s": limits.window_s, "lockout_s": limits.lockout_s,
              "lockout_max_s": limits.lockout_max_s}
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["attempt_device" if device else "attempt"],
                                        params)).fetchone()
    assert row is not None
    if row["wait_s"] > 0:
        raise errors.TooManyAttempts(row["wait_s"], _detail(row["wait_s"]))


async def succeeded(pool: db.AsyncPool, *, account: str, address: str | None,
                    device: str | None = None) -> None:
    """A right password: the account starts afresh, and the address gets its attempt back (a
    shared office address is not locked by its own colleagues signing in). From a known device
    only that device starts afresh: the account's lock, someone else's doing, stays."""
    async with pool.connection() as conn:
        if device:
            await conn.execute(Q["forget_account"], {"account": device})
        else:
            await conn.execute(Q["succeeded"], {"account": account,
                                                "address": address_key(address)})


def forget_account(conn: db.Conn, account: str) -> None:
    """A password was reset by an admin or operator: the account's lock-out ends with it."""
    conn.execute(Q["forget_account"], {"account": account})


async def forget(pool: db.AsyncPool, account: str) -> None:
    async with pool.connection() as conn:
        await conn.execute(Q["forget_account"], {"account": account})


async def locks(pool: db.AsyncPool, accounts: list[str]) -> dict[str, dict[str, Any]]:
    """The accounts among these that are locked now: {key: {locked_until, lockouts}}."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(Q["locks"], {"keys": accounts})).fetchall()
    return {r["key"]: {"locked_until": r["locked_until"], "lockouts": r["lockouts"]}
            for r in rows}


def _detail(wait_s: float) -> str:
    seconds = max(1, int(wait_s + 0.999))
    wait = f"{seconds} seconds" if seconds < 120 else f"{(seconds + 59) // 60} minutes"
    return f"Too many sign-in attempts; wait {wait}, then try again."
