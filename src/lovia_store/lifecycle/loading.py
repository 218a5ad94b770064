"""Writing records into a database: idempotently, in batches, refusing conflicts.

Records are written in units of a bounded size, each in one transaction: a
row whose key is absent is inserted; a row already there is left alone if it
equals the record and refused (``DestinationConflictError``, nothing of the
unit written) if it does not. So loading the same records twice changes
nothing, and a load killed mid-way is finished by running it again.

The children of a session (or run) this load inserted itself cannot exist
yet, so they are inserted without a look-up: a fresh destination costs one
look-up per unit of sessions, not per row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, and_, or_, select, tuple_
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.util import await_only

from ..db.database import Database
from ..errors import ConflictError
from .records import KINDS, DestinationConflictError, Kind, Record

__all__ = ["LoadCounts", "Loader", "differing_columns", "find_existing", "key_of"]

UNIT_ROWS = 2000
UNIT_CHARS = 16 << 20
"""A unit holds at most this many rows, or about this many characters of text."""
_LOOKUP = 500


def key_of(kind: Kind, row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[name] for name in kind.key)


def find_existing(
    conn: Connection, kind: Kind, keys: Iterable[tuple[Any, ...]]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The rows of ``kind`` the database holds under ``keys``, by key."""
    table = kind.table
    columns = [table.c[name] for name in kind.key]
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), _LOOKUP):
        chunk = unique[start : start + _LOOKUP]
        condition: ColumnElement[bool]
        if len(columns) == 1:
            condition = columns[0].in_([k[0] for k in chunk])
        else:  # group by the leading column: an index range per parent
            groups: dict[Any, list[tuple[Any, ...]]] = {}
            for k in chunk:
                groups.setdefault(k[0], []).append(k[1:])
            condition = or_(
                *(
                    and_(columns[0] == lead, *_rest_in(columns[1:], rest))
                    for lead, rest in groups.items()
                )
            )
        for row in conn.execute(select(table).where(condition)):
            mapping = dict(row._mapping)
            found[key_of(kind, mapping)] = mapping
    return found


def _rest_in(columns: Sequence[Any], rest: list[tuple[Any, ...]]) -> list[ColumnElement[bool]]:
    if len(columns) == 1:
        return [columns[0].in_([r[0] for r in rest])]
    return [tuple_(*columns).in_(rest)]


def differing_columns(record: dict[str, Any], existing: dict[str, Any]) -> list[str]:
    """The record's columns whose value the stored row does not have."""
    return [name for name, value in record.items() if existing.get(name) != value]


@dataclass
class LoadCounts:
    """What a load did: rows inserted and rows found already there, per record type."""

    inserted: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)


class Loader:
    """Feeds records into ``db`` in units; ``dry_run`` checks every record against the
    database (conflicts included) in read transactions and writes nothing."""

    def __init__(
        self,
        db: Database,
        *,
        dry_run: bool = False,
        unit_rows: int = UNIT_ROWS,
    ) -> None:
        self.db = db
        self.dry_run = dry_run
        self.unit_rows = unit_rows
        self.counts = LoadCounts()
        self._pending: list[Record] = []
        self._chars = 0
        # Parents this load inserted (would insert) in the last unit that held any.
        self._fresh: dict[str, set[tuple[Any, ...]]] = {"session": set(), "run": set()}

    async def add(self, record: Record) -> None:
        self._pending.append(record)
        self._chars += sum(len(v) for v in record.row.values() if isinstance(v, str))
        if len(self._pending) >= self.unit_rows or self._chars >= UNIT_CHARS:
            await self.flush()

    async def flush(self) -> None:
        if not self._pending:
            return
        records, self._pending, self._chars = self._pending, [], 0
        fresh = {name: set(keys) for name, keys in self._fresh.items()}

        def work(conn: Connection) -> tuple[LoadCounts, dict[str, set[tuple[Any, ...]]]]:
            return self._apply(conn, records, fresh)

        run = self.db.read if self.dry_run else self.db.write
        counts, inserted = await run(work)
        self.counts.inserted.update(counts.inserted)
        self.counts.unchanged.update(counts.unchanged)
        for name, keys in inserted.items():
            if keys:
                self._fresh[name] = keys

    def _apply(
        self,
        conn: Connection,
        records: list[Record],
        previous: dict[str, set[tuple[Any, ...]]],
    ) -> tuple[LoadCounts, dict[str, set[tuple[Any, ...]]]]:
        """One unit, in one transaction (retried whole: it changes no state of ours)."""
        counts = LoadCounts()
        by_kind: dict[str, list[Record]] = {}
        for record in records:
            by_kind.setdefault(record.kind, []).append(record)
        inserted: dict[str, set[tuple[Any, ...]]] = {"session": set(), "run": set()}
        for name, kind in KINDS.items():  # parents before children
            batch = by_kind.get(name)
            if not batch:
                continue
            to_insert = self._unit_rows(conn, kind, batch, previous, inserted, counts)
            if to_insert and not self.dry_run:
                _insert(conn, kind, to_insert)
            counts.inserted[name] += len(to_insert)
        return counts, inserted

    def _unit_rows(
        self,
        conn: Connection,
        kind: Kind,
        batch: list[Record],
        previous: dict[str, set[tuple[Any, ...]]],
        inserted: dict[str, set[tuple[Any, ...]]],
        counts: LoadCounts,
    ) -> list[dict[str, Any]]:
        """The rows of ``batch`` to insert; equal rows counted, different ones refused."""
        blind: list[Record] = []
        checked: list[Record] = []
        if kind.parent is not None and kind.parent_column is not None:
            new_parents = previous[kind.parent] | inserted[kind.parent]
            for record in batch:
                parent = (record.row[kind.parent_column],)
                (blind if parent in new_parents else checked).append(record)
        else:
            checked = batch
        existing = find_existing(conn, kind, (key_of(kind, r.row) for r in checked))
        rows = [r.row for r in blind]
        seen: set[tuple[Any, ...]] = set()
        for record in checked:
            key = key_of(kind, record.row)
            stored = existing.get(key)
            if stored is None and key in seen:  # twice in one unit: must be equal
                stored = next(r.row for r in checked if key_of(kind, r.row) == key)
            if stored is None:
                seen.add(key)
                rows.append(record.row)
                if kind.name in inserted:
                    inserted[kind.name].add(key)
                continue
            differ = differing_columns(record.row, stored)
            if differ:
                raise DestinationConflictError(
                    kind=kind.name,
                    key=dict(zip(kind.key, key, strict=True)),
                    line=record.line,
                    detail=f"{', '.join(differ)} differ",
                )
            counts.unchanged[kind.name] += 1
        if kind.name in inserted:
            inserted[kind.name].update(key_of(kind, r.row) for r in blind)
        return rows


def _insert(conn: Connection, kind: Kind, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` in as few statements as their column sets allow: on PostgreSQL
    through asyncpg, with ``COPY`` (what a bulk load costs at its cheapest)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    for columns, group in groups.items():
        if conn.dialect.driver == "asyncpg":
            _copy(conn, kind, columns, group)
        else:
            conn.execute(kind.table.insert(), group)


def _copy(
    conn: Connection, kind: Kind, columns: tuple[str, ...], rows: list[dict[str, Any]]
) -> None:
    """``COPY`` the rows in, inside the unit's transaction (begun first if nothing ran
    yet: SQLAlchemy begins lazily). The values are the ones the records hold, checked:
    aware UTC datetimes, ints in range, text."""
    raw = conn.connection.driver_connection
    assert raw is not None
    if not raw.is_in_transaction():
        conn.exec_driver_sql("SELECT 1")
    schema = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    records = [tuple(row[name] for name in columns) for row in rows]
    try:
        await_only(
            raw.copy_records_to_table(
                kind.table.name, records=records, columns=list(columns), schema_name=schema
            )
        )
    except Exception as exc:
        if not str(getattr(exc, "sqlstate", "")).startswith("23"):
            raise
        # An integrity violation: a writer inserted one of these keys since the look-up.
        raise ConflictError(f"{kind.table.name}: a row was written meanwhile ({exc})") from None
