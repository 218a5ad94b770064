"""Which other programs' tables the first revisions convert: frozen with them.

Revisions 0001 (lovia 0.9) and 0002 (zett-agent) convert only what these rules
recognise, so the rules belong to the revisions, not to live code that may
change: the gate (``db/schema.py``, through ``migrations/conversion.py``) imports
them from here to decide about a backup, and agrees with the revisions by
construction.
Change them only together with a new revision.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, inspect

__all__ = [
    "ADOPTED_BY",
    "LEGACY_COLUMNS",
    "LEGACY_TABLES",
    "LOVIA_MARK_DDL",
    "adoptable",
    "legacy_tables",
    "unproven_lovia_tables",
]

ADOPTED_BY = {"lovia 0.9": "0001", "zett-agent": "0002"}
"""The revision that converts each program's tables."""

LEGACY_TABLES: dict[str, tuple[str, ...]] = {
    "lovia 0.9": ("session_runs", "snapshot_heads", "snapshot_turns"),
    "zett-agent": ("agent_sessions", "raw_messages", "session_snapshots"),
}
"""The tables our first migrations convert and drop, by the program that owns them."""

LEGACY_COLUMNS: dict[str, frozenset[str]] = {
    # lovia 0.9.119's SQLite stores (lovia/stores/session.py, checkpointer.py).
    "session_runs": frozenset(
        {"id", "session_id", "run_id", "entries_json", "meta_json", "created_at"}
    ),
    "snapshot_heads": frozenset({"run_id", "head_json", "updated_at"}),
    "snapshot_turns": frozenset({"run_id", "seq", "entries_json"}),
    # zett-agent 0.2's SQLSessionStorage (every column the conversion reads).
    "agent_sessions": frozenset(
        {"id", "parent_session_id", "title", "agent_name", "created_at", "updated_at"}
    ),
    "raw_messages": frozenset(
        {
            "id",
            "session_id",
            "request_id",
            "sequence",
            "message_json",
            "metadata_json",
            "tags_json",
            "started_at",
            "completed_at",
            "reasoning_started_at",
            "reasoning_completed_at",
            "content_started_at",
            "content_completed_at",
            "duration_ns",
            "reasoning_duration_ns",
            "content_duration_ns",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "created_at",
            "updated_at",
        }
    ),
    "session_snapshots": frozenset(
        {
            "id",
            "session_id",
            "version",
            "compacted_through_sequence",
            "message_json",
            "created_at",
            "updated_at",
        }
    ),
}
"""The columns each program's table has (at least): a host's table that merely shares
one of these generic names lacks them, and is the host's, never converted."""

LOVIA_KEYS: dict[str, tuple[str, ...]] = {
    "session_runs": ("session_id", "run_id"),  # UNIQUE(session_id, run_id)
    "snapshot_heads": ("run_id",),  # PRIMARY KEY
    "snapshot_turns": ("run_id", "seq"),  # PRIMARY KEY
}
"""The key lovia 0.9.119 gives each of its tables."""

_LOVIA_MARK = "lovia_schema"
"""lovia 0.9's stores create this table beside their own; a host's tables come without it."""

LOVIA_MARK_DDL = (
    "CREATE TABLE IF NOT EXISTS lovia_schema (store TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)
"""The mark as lovia 0.9 creates it: what adopting an unmarked file adds first."""


def adoptable(conn: Connection, schema: str | None = None) -> dict[str, list[str]]:
    """The other programs' tables in the database that really are theirs, by program.

    A name alone is not enough (D7): ``session_runs`` or ``raw_messages`` may be a
    host application's own table in a shared database. lovia 0.9's tables count
    beside its ``lovia_schema`` table with the columns lovia gives them, and in a
    SQLite file without that table (lovia wrote its session files before it kept
    one) only with exactly lovia's columns and key; zett-agent's only all three
    together; and every table only with the columns its program gives it.
    Anything else is left as it is (``unproven_lovia_tables`` names what the gate
    must refuse rather than leave). ``snapshot_turns`` is converted only with
    ``snapshot_heads``.
    """
    inspector = inspect(conn)
    names = set(inspector.get_table_names(schema=schema))
    named = legacy_tables(names)
    if not named:
        return {}

    def theirs(table: str) -> bool:
        columns = {c["name"] for c in inspector.get_columns(table, schema=schema)}
        return LEGACY_COLUMNS[table] <= columns

    found: dict[str, list[str]] = {}
    lovia = named.get("lovia 0.9", [])
    marked = _LOVIA_MARK in names
    if lovia and (marked or conn.dialect.name == "sqlite"):
        is_lovias = theirs if marked else lambda table: _exactly_lovias(conn, table, schema)
        tables = [t for t in lovia if t != "snapshot_turns" and is_lovias(t)]
        if "snapshot_heads" in tables and "snapshot_turns" in lovia and is_lovias("snapshot_turns"):
            tables.append("snapshot_turns")
        if tables:
            found["lovia 0.9"] = [t for t in LEGACY_TABLES["lovia 0.9"] if t in tables]
    zett = named.get("zett-agent", [])
    if len(zett) == len(LEGACY_TABLES["zett-agent"]) and all(theirs(t) for t in zett):
        found["zett-agent"] = zett
    return found


def _exactly_lovias(conn: Connection, table: str, schema: str | None) -> bool:
    """``table`` has lovia's columns, no others, and lovia's key."""
    inspector = inspect(conn)
    if {c["name"] for c in inspector.get_columns(table, schema=schema)} != LEGACY_COLUMNS[table]:
        return False
    key = list(LOVIA_KEYS[table])
    if table == "session_runs":
        unique = inspector.get_unique_constraints(table, schema=schema)
        return any(u["column_names"] == key for u in unique)
    return inspector.get_pk_constraint(table, schema=schema)["constrained_columns"] == key


def unproven_lovia_tables(conn: Connection, schema: str | None = None) -> list[str]:
    """lovia's table names with lovia's columns in a SQLite file without ``lovia_schema``,
    not converted because their layout is not exactly lovia's.

    They may hold a conversation lovia shows; a store that opened beside them would
    show it empty, and its ``lovia_schema`` rows would lock lovia out. The gate
    refuses such a file; ``upgrade(adopt_lovia=True)`` adds lovia's mark and converts.
    """
    if conn.dialect.name != "sqlite":
        return []
    inspector = inspect(conn)
    names = set(inspector.get_table_names(schema=schema))
    if _LOVIA_MARK in names:
        return []
    adopted = set(adoptable(conn, schema).get("lovia 0.9", []))
    return [
        t
        for t in legacy_tables(names).get("lovia 0.9", [])
        if t not in adopted
        and LEGACY_COLUMNS[t] <= {c["name"] for c in inspector.get_columns(t, schema=schema)}
    ]


def legacy_tables(names: Iterable[str]) -> dict[str, list[str]]:
    """The other programs' tables among ``names``, by program."""
    present = set(names)
    found = {owner: [t for t in tables if t in present] for owner, tables in LEGACY_TABLES.items()}
    return {owner: tables for owner, tables in found.items() if tables}
