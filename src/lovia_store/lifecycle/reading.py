"""A database's content as a stream of records, in pages: memory stays bounded.

Each page is one short read transaction, so a copy of a large database never
holds a long one open on a live source. A record holds each document's text: a
page's stored documents are decoded in the transaction that reads it
(``stored``). A session is read as of its row: the session row is read first,
and only the messages, segments and snapshots its counters cover are read after
it (``sequence <= last_sequence``, ``position <= run_count``, ``version <=
snapshot_version``), so what a writer appends while the session is being read is
left out; likewise a run's entries up to its head's ``entry_count``. A session
rewound or trimmed while it is being read can come out mixed: the copy's
verification, which reads both databases again, reports it.

Every read is kept to a tenant scope (``targets.Scope``): one tenant (every
statement says ``tenant = :tenant``), or every tenant (rows in tenant order, and
a parent's children matched on its tenant as well as its id, since the same id
in two tenants is two rows).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from ..db.database import Database
from ..errors import StoredValueError
from .records import KINDS, Kind, Record
from .stored import decode_rows
from .targets import Scope, tenant_filter

__all__ = ["PAGE", "count_rows", "read_records", "read_sessions"]

PAGE = 1000
"""Rows per read: big enough that round trips do not dominate, small enough that a
page of megabyte tool outputs still fits in memory."""

_BOUNDS = {
    "message": ("sequence", "last_sequence"),
    "segment": ("position", "run_count"),
    "snapshot": ("version", "snapshot_version"),
    "run_entry": ("position", "entry_count"),
}
"""A child's column and the parent's counter that bounds it."""


def _after(kind: Kind, order: Sequence[str], last: Sequence[Any]) -> ColumnElement[bool]:
    """Rows past ``last`` in ``order`` (keyset paging, no OFFSET)."""
    columns = [kind.table.c[name] for name in order]
    clauses = []
    for i, column in enumerate(columns):
        equal = [columns[j] == last[j] for j in range(i)]
        clauses.append(and_(*equal, column > last[i]))
    return or_(*clauses)


def _page(
    db: Database,
    kind: Kind,
    order: Sequence[str],
    where: Sequence[ColumnElement[bool]],
    last: Sequence[Any] | None,
    size: int,
) -> Any:
    table = kind.table
    query = select(table)
    conditions = list(where)
    if last is not None:
        conditions.append(_after(kind, order, last))
    if conditions:
        query = query.where(*conditions)
    query = query.order_by(*(table.c[name] for name in order)).limit(size)

    def work(conn: Connection) -> list[dict[str, Any]]:
        result = conn.execute(query)
        # Plain str: a Core column's name is SQLAlchemy's quoted_name, a str subclass
        # that orjson refuses as a key (encode_record).
        keys = list(map(str, result.keys()))
        rows = [dict(zip(keys, row, strict=True)) for row in result]
        for row in rows:
            _check_text(kind, row)
        decode_rows(conn, table, rows)  # the texts, read with the shared values they name
        return rows

    return db.read(work, stale=True)


def _check_text(kind: Kind, row: dict[str, Any]) -> None:
    """Refuse a row holding bytes (SQLite keeps what another program wrote, a BLOB in a
    text column): copied, it would change type; exported, it is no JSON."""
    for name, value in row.items():
        if isinstance(value, bytes | bytearray | memoryview):
            raise StoredValueError(
                f"a stored {kind.name} holds bytes, not text, in {name}",
                table=kind.table.name,
                column=name,
                row={column: row.get(column) for column in kind.key},
            )


async def _rows(
    db: Database,
    name: str,
    where: Sequence[ColumnElement[bool]],
    size: int = PAGE,
    order: Sequence[str] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    kind = KINDS[name]
    order = kind.order if order is None else order
    if "tenant" not in order:  # every key leads with the tenant: its index's order
        order = ("tenant", *order)
    last: tuple[Any, ...] | None = None
    while True:
        rows: list[dict[str, Any]] = await _page(db, kind, order, where, last, size)
        for row in rows:
            yield row
        if len(rows) < size:
            return
        last = tuple(rows[-1][column] for column in order)


async def read_sessions(
    db: Database, tenant: Scope, session_ids: Iterable[str] | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Session rows of ``tenant`` (None: every tenant) in (tenant, id) order: all, or
    those named that exist (ids name sessions of one tenant)."""
    table = KINDS["session"].table
    scope = tenant_filter(table, tenant)
    if session_ids is None:
        async for row in _rows(db, "session", scope, size=200):
            yield row
        return
    assert tenant is not None, "session ids are a tenant's"
    wanted = sorted(set(session_ids))
    for start in range(0, len(wanted), 200):
        chunk = wanted[start : start + 200]
        async for row in _rows(db, "session", [*scope, table.c.session_id.in_(chunk)], size=200):
            yield row


async def _children(db: Database, name: str, parent: dict[str, Any]) -> AsyncIterator[Record]:
    kind = KINDS[name]
    assert kind.parent_column is not None
    table = kind.table
    column, counter = _BOUNDS[name]
    where = [
        table.c.tenant == parent["tenant"],
        table.c[kind.parent_column] == parent[kind.parent_column],
        table.c[column] <= parent[counter],
    ]
    async for row in _rows(db, name, where):
        yield Record(name, row)


async def session_records(db: Database, session: dict[str, Any]) -> AsyncIterator[Record]:
    """One session: its row, then its messages, segments and snapshots."""
    yield Record("session", session)
    for name in ("message", "segment", "snapshot"):
        async for record in _children(db, name, session):
            yield record


GROUP = 200
"""Parents read together: their children come in a few queries, not a few each."""


def _of_parents(
    table: Any, column: str, parents: Sequence[dict[str, Any]]
) -> list[ColumnElement[bool]]:
    """The children of ``parents``: by id within the tenant, per tenant (one tenant
    almost always, so one index range per id, as before tenants)."""
    by_tenant: dict[str, list[Any]] = {}
    for parent in parents:
        by_tenant.setdefault(parent["tenant"], []).append(parent[column])
    clauses = [
        and_(table.c.tenant == tenant, table.c[column].in_(ids))
        for tenant, ids in by_tenant.items()
    ]
    return [clauses[0] if len(clauses) == 1 else or_(*clauses)]


_HELD = 5000
"""The most segment and snapshot rows of one group held in memory; a session with more
is read on its own, every kind of child streamed."""


def _in_bounds(name: str, row: dict[str, Any], parent: dict[str, Any]) -> bool:
    column, counter = _BOUNDS[name]
    return bool(row[column] <= parent[counter])


async def _group_records(
    db: Database,
    parent_kind: str,
    parents: list[dict[str, Any]],
    streamed: str,
    held: Sequence[str],
) -> AsyncIterator[Record]:
    """Each parent's record, its ``streamed`` children (paged across the whole group),
    then its ``held`` children (read for the group at once), in the parents' order.
    A group holds the parents of one tenant or (reading every tenant) of several: a
    child belongs to the parent of its tenant and id."""
    kind = KINDS[streamed]
    column = kind.parent_column
    assert column is not None

    def of(row: dict[str, Any]) -> tuple[str, Any]:
        return row["tenant"], row[column]

    kept: dict[str, dict[Any, list[dict[str, Any]]]] = {}
    for name in held:
        table = KINDS[name].table
        rows = kept[name] = {}
        order = ("tenant", column, *KINDS[name].order)
        async for row in _rows(db, name, _of_parents(table, column, parents), order=order):
            rows.setdefault(of(row), []).append(row)

    def rest(parent: dict[str, Any]) -> list[Record]:
        return [
            Record(name, row)
            for name in held
            for row in kept[name].get(of(parent), ())
            if _in_bounds(name, row, parent)
        ]

    remaining = iter(parents)
    current: dict[str, Any] | None = None
    where = _of_parents(kind.table, column, parents)
    async for row in _rows(db, streamed, where, order=("tenant", column, *kind.order)):
        if current is None or of(row) != of(current):
            if current is not None:
                for record in rest(current):
                    yield record
            for parent in remaining:
                yield Record(parent_kind, parent)
                if of(parent) == of(row):
                    current = parent
                    break
                for record in rest(parent):
                    yield record
            else:  # the database ordered the children unlike their parents
                raise RuntimeError(f"{streamed} rows out of their parents' order")
        assert current is not None
        if _in_bounds(streamed, row, current):
            yield Record(streamed, row)
    if current is not None:
        for record in rest(current):
            yield record
    for parent in remaining:
        yield Record(parent_kind, parent)
        for record in rest(parent):
            yield record


async def _sessions_with_children(
    db: Database, sessions: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[Record]:
    group: list[dict[str, Any]] = []
    weight = 0
    held = ("segment", "snapshot")
    async for session in sessions:
        mine = int(session["run_count"]) + int(session["snapshot_version"])
        if group and (weight + mine > _HELD or len(group) >= GROUP):
            async for record in _group_records(db, "session", group, "message", held):
                yield record
            group, weight = [], 0
        if mine > _HELD:  # too many to hold: on its own, everything streamed
            async for record in session_records(db, session):
                yield record
            continue
        group.append(session)
        weight += mine
    if group:
        async for record in _group_records(db, "session", group, "message", held):
            yield record


async def _runs_with_entries(
    db: Database, heads: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[Record]:
    group: list[dict[str, Any]] = []
    async for head in heads:
        group.append(head)
        if len(group) >= GROUP:
            async for record in _group_records(db, "run", group, "run_entry", ()):
                yield record
            group = []
    if group:
        async for record in _group_records(db, "run", group, "run_entry", ()):
            yield record


async def checkpoint_records(
    db: Database, tenant: Scope, session_ids: Sequence[str] | None = None
) -> AsyncIterator[Record]:
    """The checkpoint side of ``tenant`` (None: every tenant): run heads each with its
    entries, then tool effects and leases. With ``session_ids`` (of one tenant), only
    the runs whose head names one of those sessions (``lovia_run_heads.session_id``),
    each with its tool effects and lease."""
    if session_ids is None:
        heads = _rows(db, "run", tenant_filter(KINDS["run"].table, tenant), size=GROUP)
        async for record in _runs_with_entries(db, heads):
            yield record
        for name in ("tool_effect", "run_lease"):
            async for row in _rows(db, name, tenant_filter(KINDS[name].table, tenant)):
                yield Record(name, row)
        return
    assert tenant is not None, "session ids are a tenant's"
    heads_table = KINDS["run"].table
    for start in range(0, len(session_ids), 200):
        chunk = list(session_ids[start : start + 200])
        where = [heads_table.c.tenant == tenant, heads_table.c.session_id.in_(chunk)]
        async for head in _rows(db, "run", where, size=200):
            yield Record("run", head)
            async for record in _children(db, "run_entry", head):
                yield record
            for name in ("tool_effect", "run_lease"):
                table = KINDS[name].table
                mine = [table.c.tenant == tenant, table.c.run_id == head["run_id"]]
                async for row in _rows(db, name, mine):
                    yield Record(name, row)


async def read_records(
    db: Database, tenant: Scope, *, session_ids: Iterable[str] | None = None
) -> AsyncIterator[Record]:
    """Every record of ``tenant`` (None: of every tenant), in the file's order; with
    ``session_ids`` (of one tenant), those sessions and the runs that append to them."""
    chosen = None if session_ids is None else sorted(set(session_ids))
    async for record in _sessions_with_children(db, read_sessions(db, tenant, chosen)):
        yield record
    async for record in checkpoint_records(db, tenant, chosen):
        yield record


async def count_rows(db: Database, names: Iterable[str], tenant: Scope) -> dict[str, int]:
    """How many rows of ``tenant`` (None: every tenant) each record type has (for
    progress totals)."""
    chosen = list(names)

    def count(name: str) -> Any:
        table = KINDS[name].table
        return select(func.count()).select_from(table).where(*tenant_filter(table, tenant))

    def work(conn: Connection) -> dict[str, int]:
        return {name: int(conn.execute(count(name)).scalar_one()) for name in chosen}

    return await db.read(work, stale=True)
