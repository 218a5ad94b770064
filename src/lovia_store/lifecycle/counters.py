"""``counter_mismatches``: the session and run rows whose counters disagree with their rows.

A session row carries the counters that make appends O(1) (``lovia_store.db.tables``):
``message_count`` is the number of its Raw Log rows, ``last_sequence`` the highest
sequence ever reserved (a rewind leaves it, so it may be above the highest stored),
``run_count`` the highest segment position ever given (likewise), and
``snapshot_version`` the newest snapshot's version. A run head's ``entry_count`` is
the number of its entries, numbered 1..n. Every store keeps them so in the
transaction that writes the rows; a row written by other means (rows deleted by
hand, or a load by an older lovia-store that was stopped between a session and its
children) can break them, and then reads go wrong: a transcript cut short, an
append refused on a sequence already stored.

One statement per table of children finds them, whatever the size: the parents
joined to that table and grouped, so each is one pass over the table, never a
statement per session. Each statement reads one consistent state while writers go
on (a counter and the rows it counts are written in one transaction), and returns
only the parents that disagree.

The values stored once (``lovia_contents``) count the references documents make
to them: ``references`` checks those counts in the same snapshot.

Every join matches the tenant as well as the id and every group is a (tenant, id):
the same id in two tenants is two sessions. The check covers one tenant or every
tenant, and each mismatch names its tenant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import BindParameter, Connection, and_, bindparam, func, or_, select

from ..db.tables import messages, run_entries, run_heads, session_runs, sessions, snapshots
from ..errors import UserError
from ..validation import DEFAULT_TENANT, check_count
from .references import reference_mismatches
from .targets import Scope, Target, opened, scope_of, tenant_label

if TYPE_CHECKING:
    from .counter_mismatch import CounterMismatch

__all__ = ["CounterMismatch", "counter_mismatches"]

_MAX_LIMIT = 100_000


def __getattr__(name: str) -> Any:
    """``CounterMismatch`` on first use (see ``_mismatch``)."""
    if name == "CounterMismatch":
        from .counter_mismatch import CounterMismatch

        return CounterMismatch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _mismatch(
    table: str, id: str, counter: str, says: int, holds: int, detail: str, tenant: str
) -> CounterMismatch:
    # Here, not at the top: pydantic is loaded only when a counter disagrees.
    from .counter_mismatch import CounterMismatch

    return CounterMismatch(
        tenant=tenant, table=table, id=id, counter=counter, says=says, holds=holds, detail=detail
    )


def _named(what: str, id: str, tenant: str) -> str:
    """A session or run as a mismatch names it: with its tenant, but the default one's
    as before tenants."""
    return (
        f"{what} {id!r}" if tenant == DEFAULT_TENANT else f"{what} {id!r} of {tenant_label(tenant)}"
    )


m, r, p, s = messages.c, session_runs.c, snapshots.c, sessions.c
h, e = run_heads.c, run_entries.c

# Each statement joins the parent rows to one table of children by the children's key
# prefix and groups by the parent's key: one pass over that table, whatever the
# number of parents, and a plan every backend runs as an index walk (the parent's
# own columns are aggregated too, which every backend groups without a sort).
# The messages are joined to their segment by its key, so at most one matches and
# the count is unchanged: a row naming a run (a finished run's entry) whose segment
# is missing is counted in ``unsegmented``.
_TENANT: BindParameter[str] = bindparam("tenant")


def _scoped(query: Any, column: Any, tenant: Scope) -> Any:
    """``query`` kept to one tenant (bound as ``tenant``), or every tenant's."""
    return query if tenant is None else query.where(column == _TENANT)


def _messages(tenant: Scope) -> Any:
    # The messages are joined to their segment by its key, so at most one matches and
    # the count is unchanged: a row naming a run (a finished run's entry) whose
    # segment is missing is counted in ``unsegmented``.
    query = select(
        s.tenant,
        s.session_id,
        func.max(s.message_count),
        func.max(s.last_sequence),
        func.count(m.sequence),
        func.max(m.sequence),
        func.count(m.run_id) - func.count(r.run_id),
    ).select_from(
        sessions.outerjoin(
            messages, and_(m.tenant == s.tenant, m.session_id == s.session_id)
        ).outerjoin(
            session_runs,
            and_(r.tenant == m.tenant, r.session_id == m.session_id, r.run_id == m.run_id),
        )
    )
    return (
        _scoped(query, s.tenant, tenant)
        .group_by(s.tenant, s.session_id)
        .having(
            or_(
                func.max(s.message_count) != func.count(m.sequence),
                func.max(m.sequence) > func.max(s.last_sequence),
                func.count(m.run_id) > func.count(r.run_id),
            )
        )
        .order_by(s.tenant, s.session_id)
    )


def _segments_query(tenant: Scope) -> Any:
    query = select(
        s.tenant, s.session_id, func.max(s.run_count), func.count(r.position), func.max(r.position)
    ).select_from(
        sessions.outerjoin(session_runs, and_(r.tenant == s.tenant, r.session_id == s.session_id))
    )
    return (
        _scoped(query, s.tenant, tenant)
        .group_by(s.tenant, s.session_id)
        .having(
            or_(
                func.count(r.position) > func.max(s.run_count),
                func.max(r.position) > func.max(s.run_count),
            )
        )
        .order_by(s.tenant, s.session_id)
    )


def _snapshots(tenant: Scope) -> Any:
    query = select(
        s.tenant, s.session_id, func.max(s.snapshot_version), func.coalesce(func.max(p.version), 0)
    ).select_from(
        sessions.outerjoin(snapshots, and_(p.tenant == s.tenant, p.session_id == s.session_id))
    )
    return (
        _scoped(query, s.tenant, tenant)
        .group_by(s.tenant, s.session_id)
        .having(func.max(s.snapshot_version) != func.coalesce(func.max(p.version), 0))
        .order_by(s.tenant, s.session_id)
    )


def _entries(tenant: Scope) -> Any:
    query = select(
        h.tenant,
        h.run_id,
        func.max(h.entry_count),
        func.count(e.position),
        func.coalesce(func.max(e.position), 0),
    ).select_from(
        run_heads.outerjoin(run_entries, and_(e.tenant == h.tenant, e.run_id == h.run_id))
    )
    return (
        _scoped(query, h.tenant, tenant)
        .group_by(h.tenant, h.run_id)
        .having(
            or_(
                func.max(h.entry_count) != func.count(e.position),
                func.max(h.entry_count) != func.coalesce(func.max(e.position), 0),
            )
        )
        .order_by(h.tenant, h.run_id)
    )


_IDS: BindParameter[list[str]] = bindparam("ids", expanding=True)
_RUN_COUNTS = select(
    s.session_id,
    s.run_count,
    select(func.count())
    .where(r.tenant == s.tenant, r.session_id == s.session_id)
    .scalar_subquery(),
).where(s.tenant == _TENANT, s.session_id.in_(_IDS))
"""The run counts and segment rows of a few sessions of a tenant (those with rows
naming a missing run), for the report."""
_ORDER = ("message_count", "last_sequence", "run_count", "snapshot_version")


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _session(
    sid: str, counter: str, says: int, holds: int, what: str, tenant: str
) -> CounterMismatch:
    return _mismatch(
        table="lovia_sessions",
        id=sid,
        counter=counter,
        says=int(says),
        holds=int(holds),
        detail=f"{_named('session', sid, tenant)}: {counter} says {says}, {what}",
        tenant=tenant,
    )


# -- the rules: one function per counter, used by ``check`` (over the tables) and by an
# import (over a file's records, ``where`` naming it), so both accept the same rows.


def message_counters(
    sid: str,
    message_count: int,
    last_sequence: int,
    rows: int,
    top: int | None,
    *,
    where: str = "lovia_messages",
    tenant: str = DEFAULT_TENANT,
) -> list[CounterMismatch]:
    """``message_count`` is the number of the session's Raw Log rows; ``last_sequence``
    at least the highest sequence among them (``top``, None for none)."""
    found = []
    if message_count != rows:
        found.append(
            _session(
                sid, "message_count", message_count, rows, f"{where} holds {_rows(rows)}", tenant
            )
        )
    if top is not None and top > last_sequence:
        what = f"{where} holds sequence {top}"
        found.append(_session(sid, "last_sequence", last_sequence, top, what, tenant))
    return found


def run_counter(
    sid: str,
    run_count: int,
    rows: int,
    top: int | None,
    lacking: int,
    *,
    where: str = "lovia_session_runs",
    tenant: str = DEFAULT_TENANT,
) -> CounterMismatch | None:
    """``run_count`` is at least the number of the session's segments and their highest
    position (``top``); ``lacking``: its message rows naming a run it has no segment of,
    which no store writes."""
    if top is not None and top > run_count:
        what = f"{where} holds position {top}"
        return _session(sid, "run_count", run_count, top, what, tenant)
    if rows > run_count or lacking:
        what = _segments(rows, lacking, where)
        return _session(sid, "run_count", run_count, rows, what, tenant)
    return None


def snapshot_counter(
    sid: str,
    version: int,
    top: int,
    *,
    where: str = "lovia_snapshots",
    tenant: str = DEFAULT_TENANT,
) -> CounterMismatch | None:
    """``snapshot_version`` is the newest snapshot's version (``top``, 0 for none)."""
    if version == top:
        return None
    held = f"version {top}" if top else "no version"
    return _session(sid, "snapshot_version", version, top, f"{where} holds {held}", tenant)


def entry_counter(
    rid: str,
    entry_count: int,
    rows: int,
    top: int,
    *,
    where: str = "lovia_run_entries",
    tenant: str = DEFAULT_TENANT,
) -> CounterMismatch | None:
    """A run head's ``entry_count`` is the number of its entries, numbered 1..n (``top``
    the highest position, 0 for none)."""
    if rows != entry_count:
        holds, what = rows, f"{where} holds {_rows(rows)}"
    elif top != entry_count:  # as many rows, numbered otherwise than 1..n
        holds, what = top, f"{where} holds position {top}"
    else:
        return None
    return _mismatch(
        table="lovia_run_heads",
        id=rid,
        counter="entry_count",
        says=int(entry_count),
        holds=int(holds),
        detail=f"{_named('run', rid, tenant)}: entry_count says {entry_count}, {what}",
        tenant=tenant,
    )


def _read(conn: Connection, limit: int, tenant: Scope) -> list[CounterMismatch]:
    found: list[CounterMismatch] = []
    unsegmented: dict[tuple[str, str], int] = {}  # (tenant, session): rows naming a missing run
    bound = {"tenant": tenant}
    for t, sid, message_count, last_sequence, rows, top, lacking in conn.execute(
        _messages(tenant).limit(limit), bound
    ):
        found.extend(message_counters(sid, message_count, last_sequence, rows, top, tenant=t))
        if lacking:
            unsegmented[(t, sid)] = int(lacking)
    for t, sid, run_count, rows, top in conn.execute(_segments_query(tenant).limit(limit), bound):
        lacking = unsegmented.pop((t, sid), 0)
        mismatch = run_counter(sid, run_count, rows, top, lacking, tenant=t)
        if mismatch is not None:
            found.append(mismatch)
    for t in sorted({t for t, _ in unsegmented}):
        ids = sorted(sid for owner, sid in unsegmented if owner == t)
        for sid, run_count, rows in conn.execute(_RUN_COUNTS, {"tenant": t, "ids": ids}):
            mismatch = run_counter(sid, run_count, rows, None, unsegmented[(t, sid)], tenant=t)
            if mismatch is not None:
                found.append(mismatch)
    for t, sid, version, top in conn.execute(_snapshots(tenant).limit(limit), bound):
        mismatch = snapshot_counter(sid, version, top, tenant=t)
        if mismatch is not None:
            found.append(mismatch)
    found.sort(key=lambda f: (f.tenant, f.id, _ORDER.index(f.counter)))
    for t, rid, entry_count, rows, top in conn.execute(_entries(tenant).limit(limit), bound):
        mismatch = entry_counter(rid, entry_count, rows, top, tenant=t)
        if mismatch is not None:
            found.append(mismatch)
    found.extend(reference_mismatches(conn, tenant, limit))  # in the same snapshot
    return found


def _segments(rows: int, lacking: int, where: str) -> str:
    what = f"{where} holds {_rows(rows)}"
    if lacking:
        named = "a message row names" if lacking == 1 else f"{lacking} message rows name"
        what += f" ({named} a run it lacks)"
    return what


async def counter_mismatches(
    target: Target, *, limit: int = 1000, tenant: str | None = None, all_tenants: bool = False
) -> list[CounterMismatch]:
    """The counters of ``target`` that disagree with their rows, sessions first (by
    tenant and id), then runs, then shared values (``lovia_contents.refs``, by tenant
    and digest: ``references``); empty when every counter is true.

    Of one tenant: ``tenant``, else the Database's (the default tenant ``""`` unless
    it was opened with one); ``all_tenants=True`` checks every tenant (what
    ``lovia-store check`` does). Each mismatch names its tenant.

    Four statements, one per table of children (messages, segments, snapshots, run
    entries), each a single pass over that table grouped by its parent: the cost grows
    with the rows, never a statement per session. Each reads at most ``limit`` parents
    that disagree. Then the references the shareable documents make are counted (the
    rows that make any, in pages) against each shared value's ``refs``, at most
    ``limit`` mismatches; a reference to a value that is not stored is one. All in
    one read transaction. Only reads; the schema must be current
    (``SchemaNotCurrentError`` otherwise, as for every read).
    """
    if check_count(limit, "limit", minimum=1) > _MAX_LIMIT:
        raise UserError(f"limit is at most {_MAX_LIMIT:,}, got {limit}")
    async with opened(target, verify_only=True) as db:
        scope = scope_of(tenant, all_tenants, db.tenant)
        return await db.read(lambda conn: _read(conn, limit, scope))
