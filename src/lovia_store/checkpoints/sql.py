"""``SQLCheckpointer``: runs in flight as a mutable head row plus append-only entry rows.

An append is two statements whatever the run's length (one on PostgreSQL): an
upsert of the head that also reserves the entries' positions (the counter lives
on the head row), and one multi-row insert of the new entries (``sql_steps``).
Nothing earlier is read or rewritten, so the 2,000th step costs what the first did.

A checkpointer works for one tenant (``tenant=``, else its Database's): a run,
its entries, lease and tool effects are keyed by (tenant, run id), every
statement names the tenant, and every transaction is run for it (row-level
security on PostgreSQL), so the same run id in two tenants is two runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any
from uuid import uuid4

from sqlalchemy import BigInteger, Connection, bindparam, delete, select

from .._lovia_guard import refuse_lovias_runner
from ..db.dialect import insert_ignore, prepare_insert_ignore
from ..db.store import SQLStore, StoreTarget
from ..db.tables import run_entries, run_heads, tool_effects
from ..db.types import utcnow
from ..entries import (
    ToolResultEntry,
    TranscriptEntry,
    Where,
    check_entry_values,
    encode_entries,
    entries_from_json_rows,
    rows_of,
    stored_model,
)
from ..errors import ConflictError, UserError
from ..validation import check_effect_ids, check_id
from . import sql_leases
from .contract import (
    RunHead,
    RunSnapshot,
    RunStatus,
    RunSummary,
    ToolEffect,
    check_listing,
    encode_head,
    summary_of,
)
from .leases import DEFAULT_LEASE_TTL, RunLease, check_lease, check_ttl, lease_for
from .sql_steps import ENTRY_COUNT, append_step, settle_step

__all__ = ["SQLCheckpointer", "SQLiteCheckpointer"]

h = run_heads.c
e = run_entries.c
fx = tool_effects.c

# A run's rows, by the ``tenant`` and ``run_id`` bind parameters.
_HEAD = select(h.head_json).where(h.tenant == bindparam("tenant"), h.run_id == bindparam("run_id"))
_ENTRIES = (
    select(e.entry_json)
    .where(e.tenant == bindparam("tenant"), e.run_id == bindparam("run_id"))
    .order_by(e.position)
)
_EFFECTS = select(fx.call_id, fx.tool_name, fx.started_at, fx.result_json).where(
    fx.tenant == bindparam("tenant"), fx.run_id == bindparam("run_id")
)


def delete_runs(conn: Connection, tenant: str, run_ids: Sequence[str]) -> None:
    """Drop these runs of ``tenant`` (their checkpoints, effects, idle leases) inside the
    caller's transaction; the same ids in other tenants are left alone."""
    if run_ids:
        conn.execute(delete(run_entries).where(e.tenant == tenant, e.run_id.in_(run_ids)))
        conn.execute(delete(tool_effects).where(fx.tenant == tenant, fx.run_id.in_(run_ids)))
        conn.execute(delete(run_heads).where(h.tenant == tenant, h.run_id.in_(run_ids)))
        sql_leases.drop_idle(conn, tenant, list(run_ids))


class SQLCheckpointer(SQLStore):
    """Run checkpoints on any SQL backend; see ``Checkpointer`` for the contract."""

    links_sessions = True
    """``append`` takes ``session_id=``: lovia-store's Runner names the run's session."""

    def __init__(self, target: StoreTarget, *, tenant: str | None = None) -> None:
        super().__init__(target, tenant=tenant)

    async def append(
        self,
        run_id: str,
        entries: Sequence[TranscriptEntry],
        head: RunHead,
        *,
        lease: RunLease | None = None,
        session_id: str | None = None,
    ) -> None:
        """Store a step; under ``lease`` only while it is held (else ``RunOwnershipLost``).

        ``session_id`` is the session the run appends to when it finishes (kept
        on the head, so retention never prunes it while the run can resume)."""
        check_id(run_id, "run_id")
        if session_id is not None:
            check_id(session_id, "session_id")
        _, documents = encode_entries(entries)
        head_json = encode_head(head)
        await self.append_encoded(
            run_id,
            head.status,
            head_json,
            documents,
            lease=lease_for(lease, run_id),
            session_id=session_id,
        )

    async def append_encoded(
        self,
        run_id: str,
        status: str,
        head_json: str,
        documents: Sequence[str],
        *,
        lease: RunLease | None = None,
        first: bool = False,
        session_id: str | None = None,
    ) -> None:
        """``append`` of a step already checked and encoded (for adapters with models of
        their own): the head's status and JSON, and the new entries' documents.

        ``first`` says the caller starts the run afresh: a run stored meanwhile (by
        a worker that finished it before this one took the lease) is refused with
        ``ConflictError`` instead of being continued from the wrong start.
        """

        tenant = self.tenant

        def work(conn: Connection) -> None:
            sql_leases.fence(conn, tenant, lease)
            key = {"tenant": tenant, "run_id": run_id}
            if first and ENTRY_COUNT.execute(conn, key).first() is not None:
                raise ConflictError(
                    f"run {run_id!r} was stored by another worker after this one found "
                    "it absent; it was not started a second time"
                )
            append_step(conn, tenant, run_id, status, head_json, documents, session_id)

        def settle(conn: Connection) -> None:
            sql_leases.fence(conn, tenant, lease)
            settle_step(conn, tenant, run_id, status, head_json, documents, session_id)

        await self.database.write(work, resolve=settle, tenant=tenant)

    async def load(self, run_id: str) -> RunSnapshot | None:
        refuse_lovias_runner(self)  # lovia's Runner calls this (or delete) first
        stored = await self.load_documents(run_id)
        if stored is None:
            return None
        head_json, documents = stored
        head = stored_model(RunHead, head_json, _head_of(run_id))
        entries = entries_from_json_rows(documents, rows_of("lovia_run_entries", "run_id", run_id))
        return RunSnapshot.from_parts(run_id, entries, head)

    async def load_documents(self, run_id: str) -> tuple[str, list[str]] | None:
        """``load`` as the stored head JSON and entry documents, or None."""
        check_id(run_id, "run_id")
        key = {"tenant": self.tenant, "run_id": run_id}

        def work(conn: Connection) -> tuple[str, list[str]] | None:
            head = conn.execute(_HEAD, key).scalar()
            if head is None:
                return None
            return head, list(conn.execute(_ENTRIES, key).scalars())

        return await self.database.read(work, tenant=self.tenant)

    async def delete(self, run_id: str, *, lease: RunLease | None = None) -> None:
        refuse_lovias_runner(self)
        check_id(run_id, "run_id")
        lease = lease_for(lease, run_id)
        tenant = self.tenant

        def work(conn: Connection) -> None:
            sql_leases.fence(conn, tenant, lease)
            delete_runs(conn, tenant, [run_id])

        await self.database.write(work, resolve=work, tenant=tenant)

    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunSummary]:
        """Runs by latest update first, optionally only those with ``status``
        (``"running"`` also finds runs whose worker died)."""
        check_listing(status, limit, offset)
        query = select(h.run_id, h.head_json, h.entry_count, h.updated_at).where(
            h.tenant == bindparam("tenant", self.tenant)
        )
        if status is not None:
            query = query.where(h.status == status)
        # As BIGINT: PostgreSQL binds a plain limit as INTEGER, refusing 2**31 and up.
        query = (
            query.order_by(h.updated_at.desc(), h.run_id.desc())
            .limit(bindparam("limit", limit, type_=BigInteger))
            .offset(bindparam("offset", offset, type_=BigInteger))
        )

        def work(conn: Connection) -> list[Any]:
            return list((conn.execute(query)).all())

        return [
            summary_of(
                row.run_id,
                stored_model(RunHead, row.head_json, _head_of(row.run_id)),
                row.entry_count,
                row.updated_at,
            )
            for row in await self.database.read(work, tenant=self.tenant)
        ]

    # -- leases (see RunLeases) ----------------------------------------------------------

    async def acquire_lease(self, run_id: str, *, ttl: float = DEFAULT_LEASE_TTL) -> RunLease:
        """Become the run's one executor for ``ttl`` seconds (renewed by every write)."""
        check_id(run_id, "run_id")
        seconds = check_ttl(ttl)

        lease_id = uuid4().hex
        tenant = self.tenant

        def work(conn: Connection) -> RunLease:
            return sql_leases.acquire(conn, tenant, run_id, seconds, lease_id)

        def settle(conn: Connection) -> RunLease:
            return sql_leases.acquired(conn, tenant, run_id, seconds, lease_id) or work(conn)

        return await self.database.write(work, resolve=settle, tenant=tenant)

    async def renew_lease(self, lease: RunLease) -> RunLease:
        """Push the lease's expiry out by its ttl; ``RunOwnershipLost`` if it was taken over."""
        check_lease(lease)
        tenant = self.tenant

        def work(conn: Connection) -> RunLease:
            return sql_leases.guard(conn, tenant, lease)

        return await self.database.write(work, resolve=work, tenant=tenant)

    async def release_lease(self, lease: RunLease) -> None:
        """Let the next worker in now; a lease that was already lost is left alone."""
        check_lease(lease)
        tenant = self.tenant

        def work(conn: Connection) -> None:
            sql_leases.release(conn, tenant, lease)

        await self.database.write(work, resolve=work, tenant=tenant)

    # -- tool effects (see EffectLog) ------------------------------------------------------

    async def tool_effects(self, run_id: str) -> dict[str, ToolEffect]:
        """What is recorded of this run's tool calls, by call id."""
        check_id(run_id, "run_id")
        key = {"tenant": self.tenant, "run_id": run_id}

        def work(conn: Connection) -> list[Any]:
            return list((conn.execute(_EFFECTS, key)).all())

        effects = {}
        for row in await self.database.read(work, tenant=self.tenant):
            outcome = None
            if row.result_json is not None:
                where: Where = (
                    "lovia_tool_effects",
                    "result_json",
                    _effect_key(run_id, row.call_id),
                )
                outcome = stored_model(ToolResultEntry, row.result_json, where)
            effects[row.call_id] = ToolEffect(
                call_id=row.call_id,
                tool_name=row.tool_name,
                started_at=row.started_at,
                outcome=outcome,
            )
        return effects

    async def record_intent(
        self, run_id: str, call_id: str, tool_name: str, *, lease: RunLease | None = None
    ) -> None:
        """Commit "this call is starting" before the tool runs (a repeat keeps the first)."""
        check_effect_ids(run_id, call_id, tool_name)
        lease = lease_for(lease, run_id)
        tenant = self.tenant

        def work(conn: Connection) -> None:
            sql_leases.fence(conn, tenant, lease)
            insert_ignore(conn, tool_effects, _effect_row(tenant, run_id, call_id, tool_name))

        await self.database.write(work, resolve=work, tenant=tenant)

    async def run_effect(
        self,
        run_id: str,
        call_id: str,
        tool_name: str,
        work: Callable[[Connection], Any],
        outcome: Callable[[Any], ToolResultEntry],
        *,
        lease: RunLease | None = None,
    ) -> Any:
        """Run ``work`` and record the call's outcome in one transaction.

        Under ``lease`` the lease is checked first, so a worker that lost the
        run never commits the effect.
        """
        check_effect_ids(run_id, call_id, tool_name)
        lease = lease_for(lease, run_id)
        tenant = self.tenant

        def transaction(conn: Connection) -> Any:
            sql_leases.fence(conn, tenant, lease)
            value = _as_host(conn, work)
            document = _outcome_document(outcome(value))
            insert_ignore(conn, tool_effects, _effect_row(tenant, run_id, call_id, tool_name))
            conn.execute(
                tool_effects.update()
                .where(fx.tenant == tenant, fx.run_id == run_id, fx.call_id == call_id)
                .values(result_json=document)
            )
            return value

        return await self.database.write(transaction, tenant=tenant)


def _outcome_document(entry: Any) -> str:
    """The recorded outcome, refused (and the effect rolled back with it) unless it reads
    back exactly: pydantic would write NaN as null, and nesting past the limit could
    never be read again."""
    if not isinstance(entry, ToolResultEntry):
        raise UserError(f"outcome must return a ToolResultEntry, not {type(entry).__name__}")
    check_entry_values(entry, "run_effect's outcome")
    return entry.model_dump_json()


def _as_host(conn: Connection, work: Callable[[Connection], Any]) -> Any:
    """Run the caller's work without our schema placement: its tables are its own."""
    translate = conn.get_execution_options().get("schema_translate_map")
    if not translate:
        return work(conn)
    conn.execution_options(schema_translate_map=None)
    try:
        return work(conn)
    finally:
        conn.execution_options(schema_translate_map=translate)


_EFFECT_COLUMNS = ("tenant", "run_id", "call_id", "tool_name", "started_at", "result_json")
prepare_insert_ignore(tool_effects, _EFFECT_COLUMNS)


def _effect_row(tenant: str, run_id: str, call_id: str, tool_name: str) -> dict[str, Any]:
    values = (tenant, run_id, call_id, tool_name, utcnow(), None)
    return dict(zip(_EFFECT_COLUMNS, values, strict=True))


class SQLiteCheckpointer(SQLCheckpointer):
    """``SQLCheckpointer`` on a SQLite file; ``wal=True`` when several processes share it."""

    def __init__(
        self, path: str | os.PathLike[str], *, wal: bool = False, tenant: str | None = None
    ) -> None:
        SQLStore.__init__(self, path, wal=wal, tenant=tenant)


def _head_of(run_id: str) -> Where:
    return "lovia_run_heads", "head_json", lambda _: {"run_id": run_id}


def _effect_key(run_id: str, call_id: str) -> Callable[[int], dict[str, object]]:
    return lambda _: {"run_id": run_id, "call_id": call_id}
