"""The schema's state, read and judged: which revision a database is at, and what
this version must refuse before writing anything to it.

``read_state`` reads our version table (or, in a joined lineage, our rows in a
host's ``alembic_version``), ``lovia_schema``'s per-store versions, and with no
revision of ours the tables that only share our names. ``refuse_newer`` turns
what a newer version wrote, or a host's table named as ours, into an error;
``refuse_joined`` leaves a joined lineage to the host's Alembic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    inspect,
    select,
    update,
)

from ..errors import JoinedLineageError, LegacyTableError, SchemaConflictError, SchemaVersionError
from ..migrations.recognition import unproven_lovia_tables
from .tables import VERSION_TABLE, contents, metadata, schema_versions, sessions

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = [
    "HEAD_REVISION",
    "HOST_VERSION_TABLE",
    "KNOWN_VERSIONS",
    "LEGACY_VERSION",
    "SchemaState",
    "alembic_config",
    "head_revision",
    "known_revisions",
    "placed_schema",
    "read_state",
    "record_revision",
    "refuse_joined",
    "refuse_newer",
    "scripts",
    "version_table",
]

KNOWN_VERSIONS: dict[str, int] = {"session": 1, "checkpoint": 3, "raw_log": 1}
"""The newest ``lovia_schema`` version of each store that this code can read."""

logger = logging.getLogger("lovia_store.db.schema")

HOST_VERSION_TABLE = "alembic_version"
"""Where a joined lineage records our revisions: the host's (Alembic's default) table."""

LEGACY_VERSION = 0
"""lovia 0.9's own layout; without our version table, anything newer is refused."""


HEAD_REVISION = "0010"
"""The newest revision in ``migrations/versions`` (tests/test_schema_gate.py checks it
against Alembic's scripts): a current database is recognised without loading Alembic."""


def version_table(schema: str | None = None) -> Table:
    """Alembic's version table under our name, as Alembic itself creates it."""
    return Table(
        VERSION_TABLE,
        MetaData(schema=schema),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
    )


def alembic_config() -> Config:
    """An Alembic config for the packaged scripts; no ini file needed."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(files("lovia_store") / "migrations"))
    cfg.set_main_option("path_separator", "os")
    return cfg


@cache
def scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    return HEAD_REVISION


@cache
def known_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in scripts().walk_revisions())


def placed_schema(conn: Connection) -> str | None:
    """The schema our tables live in on this connection (``Database(schema=...)``)."""
    translate = conn.get_execution_options().get("schema_translate_map") or {}
    schema: str | None = translate.get(None)
    return schema


@dataclass(frozen=True)
class SchemaState:
    revision: str | None
    versions: dict[str, int] = field(default_factory=dict)
    joined: bool = False
    """Our tables without our version table: a host's Alembic ran our revisions."""
    foreign: tuple[str, ...] = ()
    """Tables with our names that are not ours (only looked for with no revision)."""
    unproven: tuple[str, ...] = ()
    """lovia's tables in a SQLite file that may be lovia's history but are not proven
    to be (only looked for with no revision: ``recognition.unproven_lovia_tables``)."""
    recorded: str | None = None
    """What our version table says when the tables are at an earlier ``revision``
    (``_BEHIND_ITS_RECORD``); ``record_revision`` puts that right before a migration."""


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
_LATER_COLUMNS = {
    "lovia_messages": frozenset({"updated_at", "idempotency_key", "tenant"}),  # 0002, 0008, 0009
    # 0007, 0009
    "lovia_sessions": frozenset({"forked_from_session_id", "forked_at_entry", "tenant"}),
    "lovia_run_heads": frozenset({"session_id", "tenant"}),  # 0007, 0009
    "lovia_session_runs": frozenset({"tenant"}),  # 0009
    "lovia_snapshots": frozenset({"tenant"}),  # 0009
    "lovia_run_entries": frozenset({"tenant"}),  # 0009
    "lovia_tool_effects": frozenset({"tenant"}),  # 0009 (a joined lineage may hold 0003's)
    "lovia_run_leases": frozenset({"tenant"}),  # 0009 (a joined lineage may hold 0004's)
}
"""Columns of 0001's tables that later revisions add (a revision adding a column to
one of them adds it here too)."""


_BEHIND_ITS_RECORD = {"0010": (contents.name, "0009")}
"""A recorded revision whose table is missing, and the revision the tables are at.

On MySQL/MariaDB each DDL statement commits by itself: a downgrade past 0010 that
a lower revision refused (0009, while another tenant has rows) has dropped
``lovia_contents`` for good but rolled back the version change. The schema is
0009's then, and the next upgrade runs 0010 again once that is recorded."""


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
    from alembic.runtime.migration import MigrationContext

    opts = {"version_table": HOST_VERSION_TABLE, "version_table_schema": schema}
    heads = MigrationContext.configure(conn, opts=opts).get_current_heads()
    ours = sorted(set(heads) & known_revisions())
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
        stamped = conn.execute(select(version_table(schema).c.version_num)).scalars()
        revision = "+".join(sorted(stamped)) or None
    elif joined:
        revision = _joined_revision(conn, schema, names)
    recorded = None
    behind = _BEHIND_ITS_RECORD.get(revision or "")
    if behind is not None and not joined and behind[0] not in names:
        recorded, revision = revision, behind[1]
    foreign = _foreign_tables(conn, schema, names, joined) if revision is None else ()
    unproven = tuple(unproven_lovia_tables(conn, schema)) if revision is None else ()
    versions: dict[str, int] = {}
    if schema_versions.name in names and schema_versions.name not in foreign:
        rows = conn.execute(select(schema_versions.c.store, schema_versions.c.version))
        versions = {store: int(version) for store, version in rows}
    return SchemaState(revision, versions, joined, foreign, unproven, recorded)


def record_revision(conn: Connection, state: SchemaState) -> None:
    """Record the revision the tables are at, when the version table is ahead of them
    (``SchemaState.recorded``), so that Alembic runs what is missing from there."""
    if state.recorded is None or state.revision is None:
        return
    logger.warning(
        "revision %s is recorded but the tables are at %s (a downgrade MySQL/MariaDB "
        "left half done): recording %s",
        state.recorded,
        state.revision,
        state.revision,
    )
    table = version_table(placed_schema(conn))
    conn.execute(update(table).values(version_num=state.revision))


def refuse_newer(state: SchemaState, database: str) -> None:
    """Raise ``SchemaVersionError`` if a newer version wrote this database,
    ``SchemaConflictError`` if a table that is not ours has one of our names, and
    ``LegacyTableError`` if lovia's history may stand in tables not proven to be lovia's."""
    if state.foreign:
        raise SchemaConflictError(database=database, table=state.foreign[0])
    if state.unproven:
        raise LegacyTableError(
            database=database, tables=list(state.unproven), expected=head_revision()
        )
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
    if state.revision not in (None, HEAD_REVISION) and state.revision not in known_revisions():
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
