"""Run leases in SQL: work functions that run inside the checkpointer's transactions.

Expiry is judged by the database's clock. A write under a lease is fenced by
one guarded UPDATE in the write's own transaction: it takes the lease row's
lock and renews the lease, so a takeover either happened before (the UPDATE
matches nothing and the write is refused) or waits until the write commits
and then finds a freshly renewed lease.

A lease is keyed by its tenant and run id, like the run: every statement here
names the tenant, so a lease of one tenant never fences (nor is fenced by) the
run of the same id in another.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

from sqlalchemy import Connection, and_, bindparam, delete, exists, select, update

from ..db.dialect import capabilities, db_clock_ms, insert_ignore, prepare_insert_ignore
from ..db.tables import run_heads, run_leases
from ..errors import RunInProgressError, RunOwnershipLost
from .leases import RunLease, from_epoch_ms, holder_is_gone, this_holder

__all__ = ["acquire", "acquired", "drop_idle", "fence", "guard", "release"]

logger = logging.getLogger(__name__)

le = run_leases.c
_NOW = select(db_clock_ms())
_CURRENT = (
    select(le.token, le.lease_id, le.holder, le.expires_ms)
    .where(le.tenant == bindparam("tenant"), le.run_id == bindparam("run_id"))
    .with_for_update()
)
# UPDATE reserves bind names equal to column names: these are prefixed.
_HELD = and_(
    le.tenant == bindparam("held_tenant"),
    le.run_id == bindparam("held_run"),
    le.token == bindparam("held_token"),
    le.lease_id == bindparam("held_id"),
)
_RENEW = (
    update(run_leases)
    .where(_HELD)
    .values(expires_ms=db_clock_ms() + bindparam("ttl_ms"))
    .returning(le.expires_ms)
)
_RENEW_NO_RETURNING = (
    update(run_leases).where(_HELD).values(expires_ms=db_clock_ms() + bindparam("ttl_ms"))
)
_EXPIRES = select(le.expires_ms).where(
    le.tenant == bindparam("tenant"), le.run_id == bindparam("run_id")
)
_RELEASE = update(run_leases).where(_HELD).values(expires_ms=0)
_FORGET = delete(run_leases).where(
    _HELD,
    ~exists().where(run_heads.c.tenant == le.tenant, run_heads.c.run_id == le.run_id),
)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


_LEASE_COLUMNS = ("tenant", "run_id", "token", "lease_id", "holder", "expires_ms")
prepare_insert_ignore(run_leases, _LEASE_COLUMNS)


def acquire(
    conn: Connection, tenant: str, run_id: str, ttl: float, lease_id: str | None = None
) -> RunLease:
    """Take the run's lease, unless a live holder (on any host) has it."""
    now = int(conn.execute(_NOW).scalar_one())
    holder, lease_id, expires = this_holder(), lease_id or uuid4().hex, now + _ms(ttl)
    values: dict[str, Any] = dict(
        zip(_LEASE_COLUMNS, (tenant, run_id, 1, lease_id, holder, expires), strict=True)
    )
    key = {"tenant": tenant, "run_id": run_id}
    current = conn.execute(_CURRENT, key).first()
    if current is None and insert_ignore(conn, run_leases, values):
        return _lease(values, ttl)
    if current is None:  # a racer inserted it first; its row is committed and locked now
        current = conn.execute(_CURRENT, key).one()
        if current.lease_id == lease_id:  # the racer was this acquire, its COMMIT lost
            return _lease({"run_id": run_id, **current._asdict()}, ttl)
    gone = holder_is_gone(current.holder)
    if current.expires_ms > now and not gone:
        raise RunInProgressError(
            run_id=run_id, holder=current.holder, expires_at=from_epoch_ms(current.expires_ms)
        )
    if current.expires_ms:  # a lease still held (release sets 0): this is a takeover
        _log_takeover(run_id, current.holder, current.token + 1, gone, now - current.expires_ms)
    values["token"] = current.token + 1
    taken = update(run_leases).where(le.tenant == tenant, le.run_id == run_id)
    conn.execute(taken.values(values))
    return _lease(values, ttl)


def acquired(
    conn: Connection, tenant: str, run_id: str, ttl: float, lease_id: str
) -> RunLease | None:
    """The lease ``acquire(..., lease_id)`` took, if its transaction committed (the row is
    locked first: an acquire whose COMMIT is still under way is waited for)."""
    current = conn.execute(_CURRENT, {"tenant": tenant, "run_id": run_id}).first()
    if current is None or current.lease_id != lease_id:
        return None
    return _lease({"run_id": run_id, **current._asdict()}, ttl)


def _log_takeover(run_id: str, holder: str, token: int, gone: bool, overdue_ms: int) -> None:
    """A crashed worker's run resumed is recovery at work (INFO); one whose worker may
    still be alive, stalled past its lease, is news (WARNING): its writes are refused
    from now on. Runs inside the transaction: a rolled-back takeover may be logged."""
    if gone:
        logger.info(
            "run %r: lease %d taken over from %s, whose process is gone", run_id, token, holder
        )
    else:
        logger.warning(
            "run %r: lease %d taken over from %s, %.1f s past its expiry without renewal "
            "(a stalled or crashed worker; its later writes are refused)",
            run_id,
            token,
            holder,
            overdue_ms / 1000,
        )


def guard(conn: Connection, tenant: str, lease: RunLease) -> RunLease:
    """Renew ``lease`` inside the caller's transaction, or refuse the whole write.

    ``tenant`` is the store's: a lease names no tenant, so one handed to another
    tenant's store matches nothing there and is refused."""
    params = _params(tenant, lease) | {"ttl_ms": _ms(lease.ttl)}
    if capabilities(conn).returning:
        expires = conn.execute(_RENEW, params).scalar()
    elif conn.execute(_RENEW_NO_RETURNING, params).rowcount == 1:
        expires = conn.execute(_EXPIRES, {"tenant": tenant, "run_id": lease.run_id}).scalar()
    else:
        expires = None
    if expires is None:
        raise RunOwnershipLost(run_id=lease.run_id, token=lease.token)
    return lease.model_copy(update={"expires_at": from_epoch_ms(int(expires))})


def fence(conn: Connection, tenant: str, lease: RunLease | None) -> None:
    """What a write under ``lease`` does first; a write without one is not fenced."""
    if lease is not None:
        guard(conn, tenant, lease)


def release(conn: Connection, tenant: str, lease: RunLease) -> None:
    """Expire the lease now.

    The row and its token stay while the run is stored, so tokens never
    repeat for it; a run whose checkpoint is gone leaves no lease behind.
    """
    params = _params(tenant, lease)
    if not conn.execute(_FORGET, params).rowcount:
        conn.execute(_RELEASE, params)


def drop_idle(conn: Connection, tenant: str, run_ids: list[str]) -> None:
    """Forget these runs' leases unless one is live: a deleted run needs no history."""
    conn.execute(
        delete(run_leases).where(
            le.tenant == tenant, le.run_id.in_(run_ids), le.expires_ms <= db_clock_ms()
        )
    )


def _params(tenant: str, lease: RunLease) -> dict[str, Any]:
    return {
        "held_tenant": tenant,
        "held_run": lease.run_id,
        "held_token": lease.token,
        "held_id": lease.lease_id,
    }


def _lease(values: dict[str, Any], ttl: float) -> RunLease:
    return RunLease(
        run_id=values["run_id"],
        token=values["token"],
        lease_id=values["lease_id"],
        holder=values["holder"],
        ttl=ttl,
        expires_at=from_epoch_ms(values["expires_ms"]),
    )
