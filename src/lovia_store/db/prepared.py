"""Hot statements compiled once per dialect and run with positional parameters.

An append runs the same three statements thousands of times. For them,
SQLAlchemy's per-execution work (building the parameter dictionaries, one type
processor call per value and row, result metadata) costs more than SQLite
itself takes to run them. ``Prepared`` compiles its statement once per dialect,
converts values with the statement's own bind processors, and runs the SQL
through ``Connection.exec_driver_sql``, which keeps SQLAlchemy's error
translation, invalidation and events. Values every row of a multi-row insert
shares (the session, the run, the timestamp) are converted once.

Results carry no column types: use it for statements whose returned columns
need no result processing (integers, plain strings).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, CursorResult
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Executable

__all__ = ["Prepared"]


class _Plan(NamedTuple):
    sql: str
    names: tuple[str, ...]  # the bound parameter of each placeholder, in order
    processors: dict[str, Callable[[Any], Any]]


class Prepared:
    """A statement with named bound parameters, compiled once per dialect.

    A connection's ``schema_translate_map`` (how an engine places our tables in
    a named schema) is compiled into the SQL, one plan per map.
    """

    __slots__ = ("_plans", "statement")

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._plans: WeakKeyDictionary[Dialect, dict[Any, _Plan]] = WeakKeyDictionary()

    def _plan(self, conn: Connection) -> _Plan:
        dialect = conn.dialect
        translate = conn.get_execution_options().get("schema_translate_map")
        key = tuple(sorted(translate.items(), key=repr)) if translate else None
        plans = self._plans.get(dialect)
        if plans is None:
            plans = self._plans[dialect] = {}
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = self._compile(dialect, translate)
        return plan

    def _compile(self, dialect: Dialect, translate: Mapping[str | None, str] | None) -> _Plan:
        placed = {"schema_translate_map": translate, "render_schema_translate": True}
        compiled: Any = self.statement.compile(  # type: ignore[attr-defined]
            dialect=dialect, **(placed if translate else {})
        )
        names = tuple(compiled.positiontup or ())
        if not dialect.positional or set(names) != set(compiled.binds):
            raise TypeError(f"{dialect.name}: not a positional statement: {compiled}")
        processors = {}
        for name in names:
            type_ = compiled.binds[name].type
            processor = type_.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                processors[name] = processor
        return _Plan(compiled.string, names, processors)

    def execute(
        self,
        conn: Connection,
        params: Mapping[str, Any],
        rows: Sequence[Mapping[str, Any]] | None = None,
    ) -> CursorResult[*tuple[Any, ...]]:
        """Run once with ``params``; or, given ``rows``, once per row (executemany)
        with ``params`` holding the values every row shares."""
        plan = self._plan(conn)
        processors = plan.processors
        shared = {
            name: processors[name](value) if name in processors else value
            for name, value in params.items()
        }
        if rows is None:
            return conn.exec_driver_sql(plan.sql, tuple([shared[name] for name in plan.names]))
        converted = [name for name in rows[0] if name in processors] if rows else []
        batch = []
        for row in rows:
            values = {**shared, **row}
            for name in converted:
                values[name] = processors[name](values[name])
            batch.append(tuple([values[name] for name in plan.names]))
        return conn.exec_driver_sql(plan.sql, batch)
