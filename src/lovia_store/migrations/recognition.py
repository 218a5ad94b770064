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

__all__ = ["ADOPTED_BY", "LEGACY_COLUMNS", "LEGACY_TABLES", "adoptable", "legacy_tables"]

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

_LOVIA_MARK = "lovia_schema"
"""lovia 0.9's stores create this table beside their own; a host's tables come without it."""


def adoptable(conn: Connection, schema: str | None = None) -> dict[str, list[str]]:
    """The other programs' tables in the database that really are theirs, by program.

    A name alone is not enough (D7): ``session_runs`` or ``raw_messages`` may be a
    host application's own table in a shared database. lovia 0.9's tables count
    only beside its ``lovia_schema`` table; zett-agent's only all three together;
    and every table only with the columns its program gives it. Anything else is
    left as it is. ``snapshot_turns`` is converted only with ``snapshot_heads``.
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
    if lovia and _LOVIA_MARK in names:
        tables = [t for t in lovia if t != "snapshot_turns" and theirs(t)]
        if "snapshot_heads" in tables and "snapshot_turns" in lovia and theirs("snapshot_turns"):
            tables.append("snapshot_turns")
        if tables:
            found["lovia 0.9"] = [t for t in LEGACY_TABLES["lovia 0.9"] if t in tables]
    zett = named.get("zett-agent", [])
    if len(zett) == len(LEGACY_TABLES["zett-agent"]) and all(theirs(t) for t in zett):
        found["zett-agent"] = zett
    return found


def legacy_tables(names: Iterable[str]) -> dict[str, list[str]]:
    """The other programs' tables among ``names``, by program."""
    present = set(names)
    found = {owner: [t for t in tables if t in present] for owner, tables in LEGACY_TABLES.items()}
    return {owner: tables for owner, tables in found.items() if tables}
