"""Writing records into a database: idempotently, in batches, refusing conflicts.

Records are written in units of a bounded size, each in one transaction: a
row whose key is absent is inserted; a row already there is left alone if it
equals the record and refused (``DestinationConflictError``, nothing of the
unit written) if it does not. So loading the same records twice changes
nothing, and a load killed mid-way is finished by running it again. Records hold
documents' texts: a row is stored as the destination Database stores documents
(compressed, encrypted, its long values shared: ``stored``), and a stored row is
decoded before it is compared.

A session (or a run head) and its rows are always in one transaction: units end
between them, and one larger than a unit is staged in a temporary file and
written in a transaction of its own. A session row's counters say how many rows
it has (``message_count``, ``last_sequence``, ...), so a load stopped between
the row and its rows would leave counters that disagree with them (issue 34).

The children of a session (or run) this load inserted itself cannot exist
yet, so they are inserted without a look-up: a fresh destination costs one
look-up per unit of sessions, not per row.
"""

from __future__ import annotations

import pickle
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, and_, or_, select
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.util import await_only

from ..db.database import Database
from ..errors import ConflictError
from .records import KINDS, DestinationConflictError, Kind, Record
from .stored import decode_rows, encode_rows

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
    """The rows of ``kind`` the database holds under ``keys``, by key (each key leads
    with its tenant: a row of another tenant is never found), their documents decoded."""
    table = kind.table
    columns = [table.c[name] for name in kind.key]
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), _LOOKUP):
        chunk = unique[start : start + _LOOKUP]
        condition: ColumnElement[bool]
        if len(columns) == 1:
            condition = columns[0].in_([k[0] for k in chunk])
        else:  # group by all but the last column (tenant, parent): an index range each
            groups: dict[tuple[Any, ...], list[Any]] = {}
            for k in chunk:
                groups.setdefault(k[:-1], []).append(k[-1])
            condition = or_(
                *(
                    and_(
                        *(c == v for c, v in zip(columns[:-1], lead, strict=True)),
                        columns[-1].in_(rest),
                    )
                    for lead, rest in groups.items()
                )
            )
        rows = [
            {str(name): value for name, value in row._mapping.items()}
            for row in conn.execute(select(table).where(condition))
        ]
        decode_rows(conn, table, rows)  # compared with a record's texts
        for mapping in rows:
            found[key_of(kind, mapping)] = mapping
    return found


def differing_columns(record: dict[str, Any], existing: dict[str, Any]) -> list[str]:
    """The record's columns whose value the stored row does not have."""
    return [name for name, value in record.items() if existing.get(name) != value]


@dataclass
class LoadCounts:
    """What a load did: rows inserted and rows found already there, per record type."""

    inserted: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)


class Loader:
    """Feeds records into ``db``; ``dry_run`` checks every record against the database
    (conflicts included) in read transactions and writes nothing.

    A group (a session or a run head, with the records that follow it: its messages,
    segments and snapshots, or its entries) is always written in one transaction, so
    no one ever sees a session row without all of its rows, whose counters would then
    disagree with them. Units end between groups; a group larger than a unit is
    staged in a temporary file as it comes and then written in one transaction of
    its own, a unit's worth of rows at a time (``_Staged``).
    """

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
        self._open = 0
        """Where the last group in ``_pending`` starts: the one more records may join."""
        self._staged: _Staged | None = None
        """The open group, once it outgrew a unit."""

    async def add(self, record: Record) -> None:
        if KINDS[record.kind].parent is None:  # a new group: the open one is whole
            if self._staged is not None:
                await self._write_staged()
            self._open = len(self._pending)
        if self._staged is not None:
            self._staged.add(record)
            return
        self._pending.append(record)
        self._chars += _chars(record)
        while len(self._pending) >= self.unit_rows or self._chars >= UNIT_CHARS:
            if self._open == 0:  # one group fills the unit: it is staged until whole
                self._staged = _Staged(self._pending)
                self._pending, self._chars = [], 0
                return
            whole, self._pending = self._pending[: self._open], self._pending[self._open :]
            self._open, self._chars = 0, sum(_chars(r) for r in self._pending)
            await self._write(whole)

    async def flush(self) -> None:
        """Write what is pending: the end of the records (every group is whole)."""
        if self._staged is not None:
            await self._write_staged()
        if self._pending:
            records, self._pending, self._chars, self._open = self._pending, [], 0, 0
            await self._write(records)

    async def _write(self, records: list[Record]) -> None:
        def work(conn: Connection) -> LoadCounts:
            return self._apply(conn, records, _no_parents())[0]

        self._add_counts(await self._run(work))

    async def _write_staged(self) -> None:
        """The staged group in one transaction, read back a unit at a time: the group's
        parent is in the first unit, and its children, which cannot exist unless this
        load inserted it, are inserted without a look-up."""
        staged, self._staged = self._staged, None
        assert staged is not None

        def work(conn: Connection) -> LoadCounts:
            counts, parents = LoadCounts(), _no_parents()
            for records in staged.units(self.unit_rows):  # read anew if retried
                unit, inserted = self._apply(conn, records, parents)
                counts.inserted.update(unit.inserted)
                counts.unchanged.update(unit.unchanged)
                for name, keys in inserted.items():
                    parents[name] |= keys
            return counts

        try:
            self._add_counts(await self._run(work))
        finally:
            staged.close()

    async def _run(self, work: Callable[[Connection], LoadCounts]) -> LoadCounts:
        run = self.db.read if self.dry_run else self.db.write
        return await run(work)

    def _add_counts(self, counts: LoadCounts) -> None:
        self.counts.inserted.update(counts.inserted)
        self.counts.unchanged.update(counts.unchanged)

    def _apply(
        self,
        conn: Connection,
        records: list[Record],
        previous: dict[str, set[tuple[Any, ...]]],
    ) -> tuple[LoadCounts, dict[str, set[tuple[Any, ...]]]]:
        """One unit, in the caller's transaction (retried whole: it changes no state of
        ours). ``previous``: the parents inserted (or that would be) by earlier units of
        the same transaction. Returns the counts and the parents this unit inserted."""
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
                parent = (record.row["tenant"], record.row[kind.parent_column])
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


def _chars(record: Record) -> int:
    return sum(len(v) for v in record.row.values() if isinstance(v, str))


def _no_parents() -> dict[str, set[tuple[Any, ...]]]:
    return {"session": set(), "run": set()}


class _Staged:
    """A group's records in an anonymous temporary file (owner-only, gone when closed),
    so a session of any size is held in memory a unit at a time."""

    BATCH = 500

    def __init__(self, records: list[Record]) -> None:
        # Closed by close(), after the group's transaction (or by the collector).
        self._file = tempfile.TemporaryFile(prefix="lovia-store-load-")  # noqa: SIM115
        self._batch: list[tuple[str, dict[str, Any], int | None, int]] = []
        for record in records:
            self.add(record)

    def add(self, record: Record) -> None:
        self._batch.append((record.kind, record.row, record.line, _chars(record)))
        if len(self._batch) >= self.BATCH:
            self._spill()

    def _spill(self) -> None:
        if self._batch:
            pickle.dump(self._batch, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self._batch = []

    def units(self, rows: int) -> Iterator[list[Record]]:
        """The records in their order, in units of at most ``rows`` rows and about
        ``UNIT_CHARS`` characters."""
        self._spill()
        self._file.seek(0)
        unit: list[Record] = []
        chars = 0
        while True:
            try:
                batch = pickle.load(self._file)  # our own file, written above
            except EOFError:
                break
            for kind, row, line, size in batch:
                unit.append(Record(kind, row, line))
                chars += size
                if len(unit) >= rows or chars >= UNIT_CHARS:
                    yield unit
                    unit, chars = [], 0
        if unit:
            yield unit

    def close(self) -> None:
        self._file.close()


def _insert(conn: Connection, kind: Kind, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` in as few statements as their column sets allow: on PostgreSQL
    through asyncpg, with ``COPY`` (what a bulk load costs at its cheapest). Their
    documents are stored as the destination's codec says, references counted."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in encode_rows(conn, kind.table, rows):
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
