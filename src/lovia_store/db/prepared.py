"""Hot statements compiled once per dialect and run with the driver's own parameters.

An append runs the same three statements thousands of times. For them,
SQLAlchemy's per-execution work (building the parameter dictionaries, one type
processor call per value and row, result metadata) costs more than SQLite
itself takes to run them. ``Prepared`` compiles its statement once per dialect,
converts values with the statement's own bind processors, and runs the SQL
through ``Connection.exec_driver_sql``, which keeps SQLAlchemy's error
translation, invalidation and events. Values every row of a multi-row insert
shares (the session, the run, the timestamp) are converted once.

Which statements are prepared: the fixed ones (one SQL text per dialect, no
result processing) on an append, a rewind, a trim or a checkpoint append;
every other statement is Core, run by ``Connection.execute``. A statement only one
dialect runs is built when a ``Database`` first opens on it (``Prepared.only_on``).

Results carry no column types, and the SQL is compiled once: so a statement
whose selected or returned columns need result processing on a supported
driver (a timestamp: ``str`` on SQLite, ``datetime`` on PostgreSQL) or whose
SQL depends on its values (an expanding ``IN``) is refused with
``NotPreparableError``: when it is built (for a module constant, at import) for
SQLite's driver and the dialects a ``Database`` opened on so far, and for any
other dialect when a ``Database`` first opens on it (``prepare_dialect``), before
anything runs there; a server's dialect module is imported only then, so a SQLite
process never loads PostgreSQL's or MySQL's. Compiling for a connection checks its
own driver too. Statements
that run rarely (a rewind's) are prepared too: in a fresh process SQLAlchemy's
first-use work per statement costs more than SQLite's own. A statement that
differs by dialect is built by a cached builder registered with ``per_dialect``,
which a ``Database`` calls for its dialect when it opens. Every ``Prepared``
built is listed by ``built()`` (the golden SQL marks them).

On a connection whose engine sets the ``DRIVER_CURSOR`` execution option
(the SQLite and asyncpg engines lovia-store creates itself, unless ``echo=True``) the
statement runs on the driver's cursor directly, as long as nothing listens
to the engine's ``before_cursor_execute``, ``after_cursor_execute`` or
``handle_error`` events: for an append, SQLAlchemy's execution context costs
as much as SQLite's own work. Driver errors are still wrapped as SQLAlchemy's
``DBAPIError`` subclasses (``hide_parameters`` honoured) and a lost connection
is invalidated, with the pool's older ones, as SQLAlchemy's own path does; what
these statements skip is SQL logging and those events.
The choice is made per
statement: once a listener is attached (OpenTelemetry's SQLAlchemy
instrumentation, a host's own ``event.listen``), every statement runs through
``exec_driver_sql`` and the listener sees it; removed, the fast path returns.
To log every statement, create the ``Database`` with ``echo=True``.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache
from typing import Any, NamedTuple, Protocol, TypeVar
from weakref import WeakKeyDictionary, WeakSet

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound
from sqlalchemy.sql import Executable, visitors
from sqlalchemy.sql.elements import BindParameter

from ..errors import LoviaStoreError

__all__ = [
    "DRIVER_CURSOR",
    "NotPreparableError",
    "Prepared",
    "Rows",
    "built",
    "per_dialect",
    "prepare_dialect",
    "traced",
    "untraced",
]

T = TypeVar("T")

DRIVER_CURSOR = "lovia_store_driver_cursor"
"""Execution option: run prepared statements on the driver's cursor."""


class Rows(Protocol):
    """What callers read from a prepared statement's result."""

    @property
    def rowcount(self) -> int: ...

    def first(self) -> Any: ...

    def one(self) -> Any: ...

    def scalar_one(self) -> Any: ...

    def all(self) -> Sequence[Any]: ...

    def fetchmany(self, size: int) -> Sequence[Any]: ...


class _DriverRows:
    """The result of a statement run on the driver's cursor."""

    __slots__ = ("_cursor", "rowcount")

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self.rowcount: int = cursor.rowcount

    def first(self) -> Any:
        row = self._cursor.fetchone()
        self._cursor.close()
        return row

    def one(self) -> Any:
        row = self._cursor.fetchone()
        if row is None:
            raise NoResultFound("No row was found when one was required")
        if self._cursor.fetchone() is not None:
            raise MultipleResultsFound("Multiple rows were found when exactly one was required")
        return row

    def scalar_one(self) -> Any:
        return self.one()[0]

    def all(self) -> Sequence[Any]:
        return self._cursor.fetchall()  # type: ignore[no-any-return]

    def fetchmany(self, size: int) -> Sequence[Any]:
        return self._cursor.fetchmany(size)  # type: ignore[no-any-return]


class _Plan(NamedTuple):
    sql: str
    processors: dict[str, Callable[[Any], Any]]
    fixed: dict[str, Any]  # values the statement itself gives (``limit(1)``), converted
    arrange: Callable[[Mapping[str, Any]], Any]  # values by name -> the driver's parameters


def _in_order(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], Any]:
    return lambda values: tuple([values[name] for name in names])


def _by_name(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], Any]:
    return lambda values: {name: values[name] for name in names}


class NotPreparableError(LoviaStoreError, TypeError):
    """A statement ``Prepared`` cannot run as compiled once: it is refused when built."""


_DRIVERS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "sqlite": (("sqlalchemy.dialects.sqlite.pysqlite", {}),),
    "postgresql": (
        ("sqlalchemy.dialects.postgresql.asyncpg", {}),
        ("sqlalchemy.dialects.postgresql.psycopg", {}),
    ),
    "mysql": (("sqlalchemy.dialects.mysql.asyncmy", {}),),
    "mariadb": (("sqlalchemy.dialects.mysql.asyncmy", {"is_mariadb": True}),),
}
"""Per dialect name, the drivers lovia-store runs it on: (module, the dialect's arguments)."""


@cache
def _drivers(name: str) -> tuple[Dialect, ...]:
    """The drivers of dialect ``name`` (no connection: only their types are read),
    their modules imported on first use."""
    found = []
    for module, arguments in _DRIVERS.get(name, ()):
        dialect_class: type[Dialect] = importlib.import_module(module).dialect
        found.append(dialect_class(**arguments))
    return tuple(found)


def _refusal(statement: Executable, dialects: Iterable[Dialect]) -> str | None:
    """Why ``statement`` cannot be prepared for ``dialects``, or None."""
    for element in visitors.iterate(statement):  # type: ignore[arg-type]
        if isinstance(element, BindParameter) and (element.expanding or element.literal_execute):
            return "its SQL depends on its values (an IN over a list, an expanding bind)"
    return _typed_result(statement, dialects)


def _typed_result(statement: Executable, dialects: Iterable[Dialect]) -> str | None:
    """Why ``statement``'s result needs typing on one of ``dialects``, or None."""
    for dialect in dialects:
        for column in getattr(statement, "exported_columns", ()):
            if column.type.dialect_impl(dialect).result_processor(dialect, None) is not None:
                return (
                    f"its column {str(column)!r} ({column.type!r}) needs result "
                    f"processing on {dialect.name}+{dialect.driver} (select it as "
                    "an integer or a string, or run the statement as Core)"
                )
    return None


_BUILT: WeakSet[Prepared] = WeakSet()
_PER_DIALECT: list[Callable[[str], object]] = []
_PREPARED_DIALECTS: set[str] = set()
# Every Prepared is checked, when built, against these dialects' drivers: SQLite's, and
# those of every dialect a Database opened on (``prepare_dialect`` adds it).
_CHECKED_DIALECTS: list[str] = ["sqlite"]


def _checked_drivers() -> Iterator[Dialect]:
    for name in _CHECKED_DIALECTS:
        yield from _drivers(name)


def _check_built(name: str) -> None:
    """Check every ``Prepared`` built so far against dialect ``name``'s drivers (and
    every one built from now on): a refusal fails this Database's open, every time."""
    if name in _CHECKED_DIALECTS:
        return
    for prepared in list(_BUILT):
        refusal = _typed_result(prepared.statement, _drivers(name))
        if refusal is not None:
            raise NotPreparableError(
                f"this statement ({prepared.origin}) cannot be prepared: "
                f"{refusal}: {prepared.statement}"
            )
    _CHECKED_DIALECTS.append(name)


def per_dialect(build: Callable[[str], T]) -> Callable[[str], T]:
    """Register a (cached) builder of a statement that differs by dialect name: a
    ``Database`` calls it for its dialect when it opens (``prepare_dialect``).

    So a process's first write builds nothing (building and checking a statement
    costs 0.1-0.8 ms the first time, against an append's 1 ms), and a statement
    ``Prepared`` refuses fails at open, as a module constant's fails at import.
    """
    _PER_DIALECT.append(build)
    for name in list(_PREPARED_DIALECTS):  # registered after a Database opened
        build(name)
    return build


def prepare_dialect(name: str) -> None:
    """Check every statement built so far for the dialect called ``name``, and build
    every ``per_dialect`` statement for it, once."""
    if name not in _PREPARED_DIALECTS:
        _check_built(name)
        for build in list(_PER_DIALECT):
            build(name)
        _PREPARED_DIALECTS.add(name)


def built() -> list[Prepared]:
    """Every ``Prepared`` built and still in use, with ``origin`` naming its module."""
    return sorted(_BUILT, key=lambda prepared: prepared.origin)


class Prepared:
    """A statement with named bound parameters, compiled once per dialect.

    A connection's ``schema_translate_map`` (how an engine places our tables in
    a named schema) is compiled into the SQL, one plan per map.
    """

    __slots__ = ("__weakref__", "_build", "_plans", "_statement", "origin")

    def __init__(self, statement: Executable) -> None:
        self.origin: str = sys._getframe(1).f_globals.get("__name__", "?")
        """The module that built it."""
        self._plans: WeakKeyDictionary[Dialect, dict[Any, _Plan]] = WeakKeyDictionary()
        self._build: Callable[[], Executable] | None = None
        self._statement: Executable | None = self._checked(statement)

    @classmethod
    def only_on(cls, dialect: str, build: Callable[[], Executable]) -> Prepared:
        """A statement only the dialect called ``dialect`` runs (PostgreSQL's
        one-statement writes), built by ``build`` when a ``Database`` first opens on
        that dialect (``per_dialect``), or at its first use: a process on another
        dialect never builds it, nor imports that dialect's module. It is checked,
        and refused, when it is built."""
        prepared = cls.__new__(cls)
        prepared.origin = sys._getframe(1).f_globals.get("__name__", "?")
        prepared._plans = WeakKeyDictionary()
        prepared._build = build
        prepared._statement = None
        per_dialect(lambda name: prepared.statement if name == dialect else None)
        return prepared

    @property
    def statement(self) -> Executable:
        """The Core statement it runs."""
        if self._statement is None:
            assert self._build is not None
            self._statement = self._checked(self._build())
        return self._statement

    def _checked(self, statement: Executable) -> Executable:
        """``statement``, unless it cannot be prepared; then listed by ``built()``."""
        refusal = _refusal(statement, _checked_drivers())
        if refusal is not None:
            raise NotPreparableError(f"this statement cannot be prepared: {refusal}: {statement}")
        _BUILT.add(self)
        return statement

    def _plan(self, dialect: Dialect, options: Mapping[str, Any]) -> _Plan:
        translate = options.get("schema_translate_map")
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
        if compiled.post_compile_params or compiled.escaped_bind_names:
            # Fixed SQL only: an expanding IN is rendered anew for each set of values.
            raise NotPreparableError(
                f"{dialect.name}: this statement cannot be prepared: {compiled}"
            )
        # The connection's own driver, whichever it is (a caller's engine may use another).
        refusal = _typed_result(self.statement, (dialect,))
        if refusal is not None:
            raise NotPreparableError(f"this statement cannot be prepared: {refusal}: {compiled}")
        if dialect.positional:  # asyncpg, asyncmy, sqlite3: each placeholder's bind, in order
            names = tuple(compiled.positiontup)
            arrange = _in_order(names)
        else:  # psycopg: named placeholders
            names = tuple(dict.fromkeys(compiled.bind_names.values()))
            arrange = _by_name(names)
        processors = {}
        fixed = {}
        for name in names:
            bind = compiled.binds[name]
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                processors[name] = processor
            if not bind.required:
                fixed[name] = bind.effective_value
                if processor is not None:
                    fixed[name] = processor(fixed[name])
        return _Plan(compiled.string, processors, fixed, arrange)

    def execute(
        self,
        conn: Connection,
        params: Mapping[str, Any],
        rows: Sequence[Mapping[str, Any]] | None = None,
    ) -> Rows:
        """Run once with ``params``; or, given ``rows``, once per row (executemany)
        with ``params`` holding the values every row shares."""
        options = conn.get_execution_options()
        plan = self._plan(conn.dialect, options)
        processors = plan.processors
        shared = {
            name: processors[name](value) if name in processors else value
            for name, value in params.items()
        }
        if plan.fixed:
            shared.update(plan.fixed)
        arguments: Any
        if rows is None:
            arguments = plan.arrange(shared)
        else:
            converted = [name for name in rows[0] if name in processors] if rows else []
            arguments = []
            for row in rows:
                values = {**shared, **row}
                for name in converted:
                    values[name] = processors[name](values[name])
                arguments.append(plan.arrange(values))
        if options.get(DRIVER_CURSOR) and not traced(conn):
            return _on_driver_cursor(conn, plan.sql, arguments, many=rows is not None)
        return conn.exec_driver_sql(plan.sql, arguments)


def untraced(conn: Connection) -> bool:
    """Whether a prepared statement on ``conn`` runs on the driver's cursor now (the
    engine allows it and nothing listens): then no listener can see a statement."""
    return bool(conn.get_execution_options().get(DRIVER_CURSOR)) and not traced(conn)


def traced(conn: Connection) -> bool:
    """Whether anything listens to ``conn``'s cursor executions or their errors (on
    its engine, an engine it was derived from, or the ``Engine`` class): then a
    statement must go through SQLAlchemy's execution path for the listener to see it.

    Read per statement, so a listener attached to a running store's engine sees the
    next statement. SQLAlchemy's own flags come first: with no engine event at all
    (the untraced case) the check is a few attribute reads.
    """
    if conn._has_events or conn.engine._has_events:
        dispatch = conn.dispatch
        if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
            return True
    # A dialect event (listened to on the engine), which sets no engine flag.
    return bool(conn.dialect.dispatch.handle_error)


def _on_driver_cursor(conn: Connection, sql: str, arguments: Any, *, many: bool) -> Rows:
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        if many:
            cursor.executemany(sql, arguments)
        else:
            cursor.execute(sql, arguments)
    except BaseException as exc:
        with contextlib.suppress(Exception):  # a broken connection's cursor may refuse
            cursor.close()
        _on_failure(conn, sql, arguments, exc, cursor, many=many)
        raise
    return _DriverRows(cursor)


def _on_failure(
    conn: Connection, sql: str, arguments: Any, exc: BaseException, cursor: Any, *, many: bool
) -> None:
    """What SQLAlchemy's execution path does when the driver raises: a lost connection
    is invalidated, with the pool's older connections (they are likely lost too), and
    said so on the error (``connection_invalidated``, which the retry rules read); a
    call interrupted mid-statement (cancelled) leaves its connection invalidated, its
    state unknown; a driver error is raised as SQLAlchemy's ``DBAPIError`` subclass."""
    error_class = conn.dialect.loaded_dbapi.Error
    driver_error: Any = exc if isinstance(exc, error_class) else None
    interrupted = not isinstance(exc, Exception)
    lost = interrupted or (
        driver_error is not None
        and not conn.closed
        and conn.dialect.is_disconnect(driver_error, conn.connection.dbapi_connection, cursor)
    )
    if lost and not conn.invalidated:
        if not interrupted:
            conn.engine.pool._invalidate(conn.connection, exc)  # as SQLAlchemy does
        conn.invalidate(exc)
    if driver_error is not None:
        raise DBAPIError.instance(
            sql,
            arguments,
            exc,
            error_class,
            hide_parameters=conn.engine.hide_parameters,
            dialect=conn.dialect,
            ismulti=many,
            connection_invalidated=lost,
        ) from exc
