"""The schema gate: refuse what a newer version wrote, migrate what an older one did.

Alembic owns every table; its version table is ``lovia_alembic_version``.
``lovia_schema(store, version)`` carries lovia's per-store versions: a lovia
0.9 file has the table with no rows (version 0, its own layout), and each of
our revisions records the versions it brings. A row beyond what this code
knows means a newer version wrote the database, and it is refused before
anything is written to it.

``Database(schema=...)`` places all of it in a PostgreSQL schema: the
connection's ``schema_translate_map`` renders every one of our (schema-less)
tables there, the gate reads that schema, and a migration creates the schema
if needed and sets ``search_path`` to it for its transaction, so a revision's
unqualified DDL and introspection (Alembic renders ``ALTER TABLE`` without the
map) land there too.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, select, text

from ..errors import (
    JoinedLineageError,
    LegacyBackupError,
    SchemaConflictError,
    SchemaNotCurrentError,
    SchemaVersionError,
)
from ..migrations.recognition import adoptable
from . import progress
from .legacy_copy import ADOPTED_BY, keep_copy
from .tables import VERSION_TABLE, metadata, schema_versions, sessions

if TYPE_CHECKING:
    from .database import Database

__all__ = [
    "KNOWN_VERSIONS",
    "SchemaState",
    "UpgradeReport",
    "alembic_config",
    "configure_context",
    "ensure_current",
    "head_revision",
    "migrate",
    "placed_schema",
    "read_state",
    "run_command_line",
]

KNOWN_VERSIONS: dict[str, int] = {"session": 1, "checkpoint": 3, "raw_log": 1}
"""The newest ``lovia_schema`` version of each store that this code can read."""

HOST_VERSION_TABLE = "alembic_version"
"""Where a joined lineage records our revisions: the host's (Alembic's default) table."""

LEGACY_VERSION = 0
"""lovia 0.9's own layout; without our version table, anything newer is refused."""

# Any constant works; it only has to be the same in every process.
_PG_LOCK_KEY = 0x6C6F76696173
_MYSQL_LOCK = "lovia_store_migrate"
# How long a migration waits for another process's (MySQL's GET_LOCK below; on
# SQLite, instead of busy_timeout: another process converting a file may take longer).
_MIGRATION_LOCK_WAIT = 600.0

logger = logging.getLogger(__name__)

_STEPS = "lovia_store.revisions"  # Alembic attribute: how many revisions an upgrade applies


def alembic_config() -> Config:
    """An Alembic config for the packaged scripts; no ini file needed."""
    cfg = Config()
    cfg.set_main_option("script_location", str(files("lovia_store") / "migrations"))
    cfg.set_main_option("path_separator", "os")
    return cfg


@cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None
    return head


@cache
def _known_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in _scripts().walk_revisions())


def placed_schema(conn: Connection) -> str | None:
    """The schema our tables live in on this connection (``Database(schema=...)``)."""
    translate = conn.get_execution_options().get("schema_translate_map") or {}
    schema: str | None = translate.get(None)
    return schema


def _enter_schema(conn: Connection) -> None:
    """Create our schema if missing and make it the migration's ``search_path``.

    Creating only when missing lets a DBA create the schema beforehand for a
    role that may not create schemas. ``SET LOCAL`` ends with the transaction.
    """
    schema = placed_schema(conn)
    if schema is None:
        return
    quoted = conn.dialect.identifier_preparer.quote_schema(schema)
    if not inspect(conn).has_schema(schema):
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
    conn.exec_driver_sql(f"SET LOCAL search_path TO {quoted}")


def configure_context(context: Any, connection: Connection) -> None:
    """The one place Alembic's context is configured, for both ways in."""
    reporting: dict[str, Any] = {}
    reporter = context.config.attributes.get(progress.ALEMBIC_ATTRIBUTE)
    if reporter is not None:  # each revision applied is a step (see _upgrade)
        total = context.config.attributes.get(_STEPS)
        applied = itertools.count(1)
        reporter("schema revisions", 0, total)
        reporting["on_version_apply"] = lambda **_: reporter(
            "schema revisions", next(applied), total
        )
    context.configure(
        **reporting,
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        version_table_schema=placed_schema(connection),
        render_as_batch=True,
        compare_type=True,
        # A host's tables share the database: ours are the only ones we manage.
        include_name=lambda name, type_, _parents: type_ != "table" or name in metadata.tables,
    )


@dataclass(frozen=True)
class SchemaState:
    revision: str | None
    versions: dict[str, int] = field(default_factory=dict)
    joined: bool = False
    """Our tables without our version table: a host's Alembic ran our revisions."""
    foreign: tuple[str, ...] = ()
    """Tables with our names that are not ours (only looked for with no revision)."""


_FIRST_TABLES = frozenset(
    {
        "lovia_schema",
        "lovia_sessions",
        "lovia_messages",
        "lovia_session_runs",
        "lovia_snapshots",
        "lovia_run_heads",
        "lovia_run_entries",
    }
)
"""What revision 0001 creates, and so what a first migration that failed half-way on
MySQL/MariaDB (where each DDL statement commits) may have left with no revision."""
_LATER_COLUMNS = {"lovia_messages": frozenset({"updated_at"})}
"""Columns of 0001's tables that later revisions add."""


def _foreign_tables(
    conn: Connection, schema: str | None, names: set[str], joined: bool
) -> tuple[str, ...]:
    """Tables named as ours, in a database with no revision of ours, that are not ours.

    Ours there can only be what 0001 left (a MySQL/MariaDB first migration that
    failed half-way): 0001's tables with 0001's columns, or in a joined lineage
    any of ours with our columns. lovia 0.9's ``lovia_schema`` has ours too.
    Anything else is a host's table, and taking it for ours would fail half-way.
    """
    inspector = inspect(conn)
    foreign = []
    for name in sorted(names & set(metadata.tables)):
        if not joined and name not in _FIRST_TABLES:
            foreign.append(name)
            continue
        head = {column.name for column in metadata.tables[name].columns}
        first = head - _LATER_COLUMNS.get(name, frozenset())
        columns = {c["name"] for c in inspector.get_columns(name, schema=schema)}
        if not first <= columns <= head:
            foreign.append(name)
    return tuple(foreign)


def _joined_revision(conn: Connection, schema: str | None, names: set[str]) -> str | None:
    """Our revision as recorded in the host's ``alembic_version`` (a joined lineage).

    Only rows that are revisions of ours count; the host's own sit beside them.
    Two of ours at once (``"0001+0003"``, never current) means a host revision
    id collides with one of ours.
    """
    if HOST_VERSION_TABLE not in names:
        return None
    opts = {"version_table": HOST_VERSION_TABLE, "version_table_schema": schema}
    heads = MigrationContext.configure(conn, opts=opts).get_current_heads()
    ours = sorted(set(heads) & _known_revisions())
    return "+".join(ours) or None


def read_state(conn: Connection) -> SchemaState:
    schema = placed_schema(conn)
    names = set(inspect(conn).get_table_names(schema=schema))
    revision = None
    # Our tables are present but our version table is not: our revisions ran in a
    # host's lineage. (Cheap: decided from the names already read; only then one
    # more query.)
    joined = VERSION_TABLE not in names and sessions.name in names
    if VERSION_TABLE in names:
        opts = {"version_table": VERSION_TABLE, "version_table_schema": schema}
        revision = MigrationContext.configure(conn, opts=opts).get_current_revision()
    elif joined:
        revision = _joined_revision(conn, schema, names)
    foreign = _foreign_tables(conn, schema, names, joined) if revision is None else ()
    versions: dict[str, int] = {}
    if schema_versions.name in names and schema_versions.name not in foreign:
        rows = conn.execute(select(schema_versions.c.store, schema_versions.c.version))
        versions = {store: int(version) for store, version in rows}
    return SchemaState(revision, versions, joined, foreign)


def refuse_newer(state: SchemaState, database: str) -> None:
    """Raise ``SchemaVersionError`` if a newer version wrote this database, and
    ``SchemaConflictError`` if a table that is not ours has one of our names."""
    if state.foreign:
        raise SchemaConflictError(database=database, table=state.foreign[0])
    for store, version in sorted(state.versions.items()):
        if store not in KNOWN_VERSIONS:
            # Another lovia store's row (its web UI keeps "chat" here): not ours
            # to judge, and left as it is.
            continue
        ours = state.revision is not None or state.joined
        known = KNOWN_VERSIONS.get(store, 0) if ours else LEGACY_VERSION
        if version > known:
            raise SchemaVersionError(store=store, found=version, known=known, database=database)
    if state.joined:
        return  # only ours are read from the host's table; refuse_joined judges them
    if state.revision is not None and state.revision not in _known_revisions():
        raise SchemaVersionError(
            store="lovia-store schema",
            found=state.revision,
            known=head_revision(),
            database=database,
        )


def refuse_joined(state: SchemaState, database: str, target: str = "head") -> None:
    """A joined lineage is the host's to migrate: refuse unless it is already current."""
    if state.joined and (state.revision != head_revision() or target != "head"):
        raise JoinedLineageError(
            database=database,
            found=state.revision,
            expected=head_revision(),
            version_table=HOST_VERSION_TABLE,
        )


def _lock(conn: Connection) -> None:
    """Serialize migrations across processes; held until the transaction ends.

    SQLite needs nothing more: the write transaction began IMMEDIATE, which
    already holds the file's write lock.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    elif conn.dialect.name in ("mysql", "mariadb"):
        conn.execute(
            text("SELECT GET_LOCK(:name, :wait)"),
            {"name": _MYSQL_LOCK, "wait": int(_MIGRATION_LOCK_WAIT)},
        )


def _unlock(conn: Connection) -> None:
    if conn.dialect.name in ("mysql", "mariadb"):
        conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": _MYSQL_LOCK})


def _upgrade(conn: Connection, target: str, steps: int | None = None) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    reporter = progress.current()
    if reporter is not None:  # for configure_context and the revisions' conversions
        cfg.attributes[progress.ALEMBIC_ATTRIBUTE] = reporter
        cfg.attributes[_STEPS] = steps
    command.upgrade(cfg, target)


@dataclass(frozen=True)
class UpgradeReport:
    """What an upgrade did: the revisions it went between, what it converted, the copy kept."""

    database: str
    from_revision: str | None
    to_revision: str | None
    converted: dict[str, list[str]] = field(default_factory=dict)
    """Another program's tables converted and dropped, by program (lovia 0.9, zett-agent)."""
    backup: Path | None = None
    """The copy of the file kept before converting it."""

    @property
    def changed(self) -> bool:
        return self.from_revision != self.to_revision


def _pending(current: str | None, target: str) -> set[str]:
    """The revisions an upgrade from ``current`` to ``target`` runs."""
    lower = current if current in _known_revisions() else "base"
    return {s.revision for s in _scripts().iterate_revisions(target, lower)}


def _to_convert(conn: Connection, current: str | None, target: str) -> dict[str, list[str]]:
    """Other programs' tables that the pending revisions will convert and drop."""
    pending = _pending(current, target)
    found = adoptable(conn, placed_schema(conn))
    return {owner: tables for owner, tables in found.items() if ADOPTED_BY[owner] in pending}


def _keep_legacy_copy(db: Database, converted: dict[str, list[str]]) -> Path | None:
    """Copy a file before a conversion drops another program's tables (see ``legacy_copy``).

    Runs inside the migration's write transaction, so no writer can change the
    file between the copy and the conversion. A server database cannot be
    copied from here: converting one needs ``legacy_backup=False``, the
    caller's word that a dump exists.
    """
    if not converted or db.legacy_backup is False:
        return None
    owners = " and ".join(converted)
    path = db.sqlite_path
    if path is None:
        if db.is_sqlite:
            return None  # an in-memory database: nothing outlives the process anyway
        tables = ", ".join(t for found in converted.values() for t in found)
        raise LegacyBackupError(
            f"{db.url} holds {owners} tables ({tables}), "
            "which converting to lovia-store's schema drops, and lovia-store cannot copy a "
            "server database aside: dump it first (pg_dump, mariadb-dump), then convert "
            "with legacy_backup=False (lovia-store upgrade --no-backup)"
        )
    folder = None if db.legacy_backup is True else Path(db.legacy_backup).expanduser().resolve()
    copy = keep_copy(path, folder)
    logger.warning(
        "converting %s from %s to lovia-store's schema; the original is kept at %s",
        path,
        owners,
        copy,
    )
    return copy


def _upgrade_on(conn: Connection, db: Database, target: str, state: SchemaState) -> UpgradeReport:
    """The upgrade itself, on a connection that holds the migration lock."""
    converted = _to_convert(conn, state.revision, target)
    backup = _keep_legacy_copy(db, converted)
    _upgrade(conn, target, len(_pending(state.revision, target)))
    after = read_state(conn).revision
    if converted:
        logger.info("converted %s in %s", ", ".join(converted), db.url)
    logger.info("upgraded %s from revision %s to %s", db.url, state.revision, after)
    return UpgradeReport(db.url, state.revision, after, converted, backup)


async def migrate(db: Database, target: str = "head") -> UpgradeReport:
    """Bring ``db`` to ``target`` in one transaction, under the migration lock.

    The state is read again once the lock is held: another process may have
    migrated while this one waited, and then there is nothing left to do.
    """

    def work(conn: Connection) -> UpgradeReport:
        _lock(conn)
        try:
            _enter_schema(conn)
            state = read_state(conn)
            refuse_newer(state, db.url)
            refuse_joined(state, db.url, target)
            if state.revision == head_revision() and target == "head":
                return UpgradeReport(db.url, state.revision, state.revision)
            return _upgrade_on(conn, db, target, state)
        finally:
            _unlock(conn)

    return await db.write_unchecked(work, lock_wait=_MIGRATION_LOCK_WAIT)


async def ensure_current(db: Database, *, verify_only: bool) -> None:
    """The first-use check: cheap when current, and only then lock-free.

    ``verify_only`` never migrates and never creates a missing SQLite file.
    """
    if verify_only and db.missing_file():
        raise SchemaNotCurrentError(database=db.url, found=None, expected=head_revision())
    state = await db.read_unchecked(read_state)
    refuse_newer(state, db.url)
    refuse_joined(state, db.url)
    if state.revision == head_revision():
        return
    if verify_only:
        raise SchemaNotCurrentError(database=db.url, found=state.revision, expected=head_revision())
    await migrate(db)


async def run_command_line(context: Any, url: str, schema: str | None = None) -> None:
    """The ``alembic`` command line's path: same lock and same refusal as first use."""
    from .database import Database

    db = Database(url, schema=schema)

    def work(conn: Connection) -> None:
        _lock(conn)
        try:
            _enter_schema(conn)
            state = read_state(conn)
            refuse_newer(state, db.url)
            if state.joined:  # our ini cannot see the host's revisions in its table
                refuse_joined(state, db.url, target="")
            _keep_legacy_copy(db, _to_convert(conn, state.revision, "heads"))
            configure_context(context, conn)
            with context.begin_transaction():
                context.run_migrations()
        finally:
            _unlock(conn)

    try:
        await db.write_unchecked(work, lock_wait=_MIGRATION_LOCK_WAIT)
    finally:
        await db.close()
