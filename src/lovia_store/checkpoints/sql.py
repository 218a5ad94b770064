"""``SQLCheckpointer``: runs in flight as a mutable head row plus append-only entry rows.

An append is two statements whatever the run's length (one on PostgreSQL): an
upsert of the head that also reserves the entries' positions (the counter lives
on the head row), and one multi-row insert of the new entries (``sql_steps``).
Nothing earlier is read or rewritten, so the 2,000th step costs what the first did.

A checkpointer works for one tenant (``tenant=``, else its Database's): a run,
its entries, lease and tool effects are keyed by (tenant, run id), every
statement names the tenant, and every transaction is run for it (row-level
security on PostgreSQL), so the same run id in two tenants is two runs.

Heads, entries and tool outcomes are stored through the Database's codec
(``lovia_store.db.contents``): compressed, sealed, and for entries and outcomes
(which hold tool outputs) their long values stored once. Every read decodes in
its own transaction; every change that drops entries or outcomes releases their
shared values in the same transaction.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any
from uuid import uuid4

from sqlalchemy import BigInteger, Connection, bindparam, delete, or_, select, union_all
from sqlalchemy.sql.elements import BindParameter

from .._lovia_guard import refuse_lovias_runner
from ..db.contents import (
    codec_of,
    encode_documents,
    has_references,
    read_documents,
    release_documents,
    retain_shared,
)
from ..db.dialect import capabilities, insert_ignore, prepare_insert_ignore
from ..db.prepared import Prepared
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


_TENANT: BindParameter[str] = bindparam("tenant")
_RUN_IDS: BindParameter[list[str]] = bindparam("run_ids", expanding=True)
_HEADS: BindParameter[list[str]] = bindparam("heads", expanding=True)
"""The runs whose heads the delete locked: only their entries and heads go."""


def _deleted_documents_in_one_statement() -> Any:
    """PostgreSQL: the runs' entries and effects deleted by one statement, which
    returns the documents among them that name shared values: exactly the rows it
    deleted (an outcome recorded meanwhile, which takes no head, is deleted and
    returned, or left whole)."""
    gone = [
        delete(table)
        .where(table.c.tenant == _TENANT, table.c.run_id.in_(runs))
        .returning(column.label("document"))
        .cte(f"gone_{name}")
        for table, column, name, runs in (
            (run_entries, e.entry_json, "entries", _HEADS),
            (tool_effects, fx.result_json, "effects", _RUN_IDS),
        )
    ]
    return union_all(*(select(g.c.document).where(has_references(g.c.document)) for g in gone))


# First, the heads (in one order): an append takes its run's head first, so one under
# way is waited for (its entries then seen and deleted) and a later one waits for the
# delete. A head made meanwhile (PostgreSQL locks no gaps) is a run begun after the
# delete: it and its entries are left whole.
_LOCK_HEADS = (
    select(h.run_id)
    .where(h.tenant == _TENANT, h.run_id.in_(_RUN_IDS))
    .order_by(h.run_id)
    .with_for_update()
)
_DELETE_DOCUMENTS_IN_ONE_STATEMENT = _deleted_documents_in_one_statement()
# Elsewhere: the documents that name shared values, locked (on MariaDB the locking
# read also keeps an outcome from being added to these runs meanwhile; SQLite's
# writer is alone), then the rows.
_REFERENCING_ENTRIES = (
    select(e.entry_json)
    .where(e.tenant == _TENANT, e.run_id.in_(_HEADS), has_references(e.entry_json))
    .with_for_update()
)
_REFERENCING_EFFECTS = (
    select(fx.result_json)
    .where(fx.tenant == _TENANT, fx.run_id.in_(_RUN_IDS), has_references(fx.result_json))
    .with_for_update()
)
_DELETE_ENTRIES = delete(run_entries).where(e.tenant == _TENANT, e.run_id.in_(_HEADS))
_DELETE_EFFECTS = delete(tool_effects).where(fx.tenant == _TENANT, fx.run_id.in_(_RUN_IDS))
_DELETE_HEADS = delete(run_heads).where(h.tenant == _TENANT, h.run_id.in_(_HEADS))


def delete_runs(conn: Connection, tenant: str, run_ids: Sequence[str]) -> None:
    """Drop these runs of ``tenant`` (their checkpoints, effects, idle leases) inside the
    caller's transaction, releasing the shared values their entries and outcomes
    named (last: contents are the last rows a transaction locks); the same ids in
    other tenants are left alone."""
    if not run_ids:
        return
    key = {"tenant": tenant, "run_ids": list(run_ids)}
    key["heads"] = list(conn.execute(_LOCK_HEADS, key).scalars())
    if capabilities(conn).one_statement_writes:
        released = list(conn.execute(_DELETE_DOCUMENTS_IN_ONE_STATEMENT, key).scalars())
    else:
        released = list(conn.execute(_REFERENCING_EFFECTS, key).scalars())
        if key["heads"]:
            released += conn.execute(_REFERENCING_ENTRIES, key).scalars()
            conn.execute(_DELETE_ENTRIES, key)
        conn.execute(_DELETE_EFFECTS, key)
    if key["heads"]:
        conn.execute(_DELETE_HEADS, key)
    sql_leases.drop_idle(conn, tenant, list(run_ids))
    release_documents(conn, tenant, released)


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
        """``load`` as the head JSON and entry documents that were written, or None.

        Decoded in the read's transaction: the shared values they name are read
        in the same snapshot as the rows (a release may delete them after)."""
        check_id(run_id, "run_id")
        tenant = self.tenant
        key = {"tenant": tenant, "run_id": run_id}

        def work(conn: Connection) -> tuple[str, list[str]] | None:
            head = conn.execute(_HEAD, key).scalar()
            if head is None:
                return None
            documents = list(conn.execute(_ENTRIES, key).scalars())
            [head] = read_documents(conn, tenant, [head], _head_of(run_id))
            where = rows_of("lovia_run_entries", "run_id", run_id)
            return head, read_documents(conn, tenant, documents, where)

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

        tenant = self.tenant

        def work(conn: Connection) -> list[tuple[Any, Any]]:
            rows = list((conn.execute(query)).all())
            where: Where = ("lovia_run_heads", "head_json", lambda i: {"run_id": rows[i].run_id})
            heads = read_documents(conn, tenant, [row.head_json for row in rows], where)
            return list(zip(rows, heads, strict=True))

        return [
            summary_of(
                row.run_id,
                stored_model(RunHead, head_json, _head_of(row.run_id)),
                row.entry_count,
                row.updated_at,
            )
            for row, head_json in await self.database.read(work, tenant=tenant)
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
        tenant = self.tenant
        key = {"tenant": tenant, "run_id": run_id}

        def work(conn: Connection) -> list[tuple[Any, Any]]:
            rows = list((conn.execute(_EFFECTS, key)).all())
            where = _effects_of(run_id, [row.call_id for row in rows])
            results = read_documents(conn, tenant, [row.result_json for row in rows], where)
            return list(zip(rows, results, strict=True))

        effects = {}
        for row, result_json in await self.database.read(work, tenant=tenant):
            outcome = None
            if result_json is not None:
                where = _effects_of(run_id, [row.call_id])
                outcome = stored_model(ToolResultEntry, result_json, where)
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
            _record_outcome(conn, tenant, run_id, call_id, document)
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


# UPDATE reserves bind names equal to column names: these are prefixed.
_EFFECT = (
    fx.tenant == bindparam("effect_tenant"),
    fx.run_id == bindparam("effect_run"),
    fx.call_id == bindparam("effect_call"),
)
_RECORD_OUTCOME = Prepared(
    tool_effects.update()
    .where(*_EFFECT, or_(fx.result_json.is_(None), ~has_references(fx.result_json)))
    .values(result_json=bindparam("result"))
)
_REPLACED_OUTCOME = select(fx.result_json).where(*_EFFECT).with_for_update()
_REPLACE_OUTCOME = Prepared(
    tool_effects.update().where(*_EFFECT).values(result_json=bindparam("result"))
)


def _record_outcome(conn: Connection, tenant: str, run_id: str, call_id: str, text: str) -> None:
    """Store the call's outcome (its row exists). One statement, unless an outcome
    recorded before names shared values: those are released once the new one's
    are counted (a value both name is kept, not deleted and stored again)."""
    encoding = encode_documents(codec_of(conn), tenant, [text], shareable=True)
    key = {"effect_tenant": tenant, "effect_run": run_id, "effect_call": call_id}
    values = key | {"result": encoding.stored[0]}
    if _RECORD_OUTCOME.execute(conn, values).rowcount:
        retain_shared(conn, tenant, encoding)
        return
    replaced = conn.execute(_REPLACED_OUTCOME, key).scalar()
    _REPLACE_OUTCOME.execute(conn, values)
    retain_shared(conn, tenant, encoding)
    release_documents(conn, tenant, [replaced])


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


def _effects_of(run_id: str, call_ids: Sequence[str]) -> Where:
    return (
        "lovia_tool_effects",
        "result_json",
        lambda i: {"run_id": run_id, "call_id": call_ids[i]},
    )
