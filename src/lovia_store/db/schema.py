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

Reading and judging a database's state is ``schema_state``; what converting
another program's file takes (its tables, the copy kept first) is
``migrations/conversion``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, inspect, text

from ..errors import (
    ConversionWarning,
    JoinedLineageError,
    LegacyBackupError,
    LoviaStoreError,
    SchemaConflictError,
    SchemaNotCurrentError,
    SchemaVersionError,
    StoreBusyError,
    UserError,
)
from ..migrations.conversion import keep_legacy_copy, to_convert
from ..migrations.recognition import ADOPTED_BY, LOVIA_MARK_DDL
from . import progress
from .schema_state import (
    HEAD_REVISION,
    HOST_VERSION_TABLE,
    KNOWN_VERSIONS,
    LEGACY_VERSION,
    SchemaState,
    alembic_config,
    head_revision,
    known_revisions,
    placed_schema,
    read_state,
    record_revision,
    refuse_joined,
    refuse_newer,
    scripts,
    version_table,
)
from .tables import VERSION_TABLE, metadata, schema_versions

if TYPE_CHECKING:
    from .database import Database, Work

__all__ = [
    "HOST_VERSION_TABLE",
    "KNOWN_VERSIONS",
    "LEGACY_VERSION",
    "SchemaState",
    "UpgradeReport",
    "alembic_config",
    "configure_context",
    "ensure_current",
    "head_revision",
    "migrate",
    "placed_schema",
    "read_state",
    "refuse_joined",
    "refuse_newer",
    "run_command_line",
]

_known_revisions = known_revisions  # its name before schema_state.py held it

# Any constant works; it only has to be the same in every process.
_PG_LOCK_KEY = 0x6C6F76696173
_MYSQL_LOCK = "lovia_store_migrate"
# How long a migration waits for another process's (MySQL's GET_LOCK below; on
# SQLite, instead of busy_timeout: another process converting a file may take longer).
_MIGRATION_LOCK_WAIT = 600.0

logger = logging.getLogger(__name__)

_STEPS = "lovia_store.revisions"  # Alembic attribute: how many revisions an upgrade applies

_FINAL = (
    SchemaVersionError,
    SchemaConflictError,
    SchemaNotCurrentError,
    JoinedLineageError,
    LegacyBackupError,
    UserError,
)
"""Refusals a migration run again cannot change (LegacyTableError is a SchemaNotCurrentError)."""


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
    from alembic import command

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
    lower = current if current in known_revisions() else "base"
    return {s.revision for s in scripts().iterate_revisions(target, lower)}


def _create_current(conn: Connection) -> None:
    """The current schema in one step, as the revisions leave it (tests/test_schema_drift.py
    compares the two): what a new SQLite file gets instead of every revision run in turn
    (``_is_new``). The tables come from ``sqlite_schema.sql``, their CREATE statements
    compiled ahead: compiling them cost a first write about 4 ms."""
    for statement in sqlite_statements():
        conn.exec_driver_sql(statement)
    rows = [{"store": store, "version": version} for store, version in KNOWN_VERSIONS.items()]
    conn.execute(insert(schema_versions), rows)
    stamp = version_table()
    stamp.create(conn)
    conn.execute(insert(stamp).values(version_num=HEAD_REVISION))


SQLITE_SCHEMA = Path(__file__).with_name("sqlite_schema.sql")
"""``tables.metadata``'s CREATE statements compiled for SQLite, each ended by ``;`` and a
blank line (written by ``python tests/test_schema_drift.py --update``, which checks it)."""


def sqlite_statements() -> list[str]:
    lines = SQLITE_SCHEMA.read_text(encoding="utf-8").splitlines()
    body = "\n".join(line for line in lines if not line.startswith("--"))
    return [s.strip().removesuffix(";") for s in body.split(";\n\n") if s.strip()]


def _is_new(conn: Connection, state: SchemaState, target: str) -> bool:
    """A SQLite database with nothing of ours nor another program's to convert."""
    if conn.dialect.name != "sqlite" or state.revision is not None or target != "head":
        return False
    names = set(inspect(conn).get_table_names())
    return not names & {*metadata.tables, VERSION_TABLE} and not to_convert(
        conn, set(ADOPTED_BY.values())
    )


def _upgrade_on(conn: Connection, db: Database, target: str, state: SchemaState) -> UpgradeReport:
    """The upgrade itself, on a connection that holds the migration lock."""
    if _is_new(conn, state, target):
        _create_current(conn)
        logger.info("upgraded %s from revision %s to %s", db.url, None, HEAD_REVISION)
        return UpgradeReport(db.url, None, HEAD_REVISION)
    converted = to_convert(conn, _pending(state.revision, target))
    backup = keep_legacy_copy(db, converted)
    _upgrade(conn, target, len(_pending(state.revision, target)))
    after = read_state(conn).revision
    if converted:
        logger.info("converted %s in %s", ", ".join(converted), db.url)
        kept = f"; the original is kept at {backup}" if backup is not None else ""
        owners = " and ".join(converted)
        warnings.warn(
            f"{db.url}: converted {owners}'s tables to lovia-store's schema, one-way "
            f"({owners} can no longer open it){kept}",
            ConversionWarning,
            stacklevel=2,
        )
    logger.info("upgraded %s from revision %s to %s", db.url, state.revision, after)
    return UpgradeReport(db.url, state.revision, after, converted, backup)


async def migrate(
    db: Database, target: str = "head", *, adopt_lovia: bool = False
) -> UpgradeReport:
    """Bring ``db`` to ``target`` in one transaction, under the migration lock.

    The state is read again once the lock is held: another process may have
    migrated while this one waited, and then there is nothing left to do.
    ``adopt_lovia`` takes tables the gate could not prove to be lovia's for
    lovia's, adding the mark lovia itself would have (see ``LegacyTableError``).
    """

    def work(conn: Connection) -> UpgradeReport:
        _lock(conn)
        try:
            _enter_schema(conn)
            state = read_state(conn)
            if adopt_lovia and state.unproven:
                conn.exec_driver_sql(LOVIA_MARK_DDL)
                state = read_state(conn)
            refuse_newer(state, db.url)
            refuse_joined(state, db.url, target)
            record_revision(conn, state)
            if state.revision == head_revision() and target == "head":
                return UpgradeReport(db.url, state.revision, state.revision)
            return _upgrade_on(conn, db, target, state)
        finally:
            _unlock(conn)

    if db.dialect not in ("mysql", "mariadb"):
        return await db.write_unchecked(work, lock_wait=_MIGRATION_LOCK_WAIT)
    return await _raced(db, work)


_RACED_ATTEMPTS = 8


async def _raced(db: Database, work: Work[UpgradeReport]) -> UpgradeReport:
    """A MySQL/MariaDB migration, run again while another server's raced it.

    ``GET_LOCK`` holds on one server only: on a Galera cluster, two nodes opening a
    new database at once both migrate, and every DDL statement commits by itself
    and replicates. The loser meets the winner's work half-way (a table or index
    that exists, a version row that moved on). The revisions create only what is
    missing, so running again, after re-reading the state, finishes the schema or
    finds it current. A refusal (a newer schema, a table that is not ours) is final.
    """
    from alembic.util.exc import CommandError

    delay = 0.05
    for attempt in range(1, _RACED_ATTEMPTS + 1):
        try:
            return await db.write_unchecked(work, lock_wait=_MIGRATION_LOCK_WAIT)
        except _FINAL:
            raise
        except (LoviaStoreError, CommandError) as exc:
            if attempt == _RACED_ATTEMPTS:
                if isinstance(exc, LoviaStoreError):
                    raise
                raise StoreBusyError(
                    f"{db.url}: another server migrated this database at the same time, "
                    f"and it is still not current: {exc}",
                    retry_safe=True,
                ) from exc
            logger.info("migration raced another server's (%s); running it again", exc)
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


async def ensure_current(db: Database, *, verify_only: bool) -> None:
    """The first-use check: cheap when current, and only then lock-free.

    ``verify_only`` never migrates and never creates a missing SQLite file.
    """
    if verify_only and db.missing_file():
        raise SchemaNotCurrentError(
            database=db.url, found=None, expected=head_revision(), missing=True
        )
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
            record_revision(conn, state)
            keep_legacy_copy(db, to_convert(conn, _pending(state.revision, "heads")))
            configure_context(context, conn)
            with context.begin_transaction():
                context.run_migrations()
        finally:
            _unlock(conn)

    try:
        await db.write_unchecked(work, lock_wait=_MIGRATION_LOCK_WAIT)
    finally:
        await db.close()
