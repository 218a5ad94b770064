"""The schema as SQLAlchemy Core tables: the one description Alembic and the stores share.

Every table carries the ``lovia_`` prefix because hosts share their database
with us. The naming convention makes constraint names deterministic, which
Alembic's autogenerate and SQLite batch migrations rely on.

Ids (``Id``: sessions, runs, requests, tool calls) compare exactly on every
backend. On MySQL and MariaDB every table is ``utf8mb4`` with a NO PAD binary
collation (``utf8mb4_nopad_bin``, MySQL's ``utf8mb4_0900_bin``), as table
default and on every text column, whatever the database's default: revision
0005 sets it. ``Id`` names that collation on the id columns (autogenerate
compares it where the server reports a column's own collation; MariaDB does
not for one equal to the table's, so tests/test_exact_ids.py reads
``information_schema``).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
)

from .types import Id, JsonText, UTCDateTime

__all__ = [
    "VERSION_TABLE",
    "messages",
    "metadata",
    "run_entries",
    "run_heads",
    "run_leases",
    "schema_versions",
    "session_runs",
    "sessions",
    "snapshots",
    "tool_effects",
]

VERSION_TABLE = "lovia_alembic_version"
"""Alembic's bookkeeping under our own name, so a host's ``alembic_version`` is untouched."""

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

schema_versions = Table(
    "lovia_schema",
    metadata,
    Column("store", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
)

# Session identity plus the counters that make appends O(1): the next sequence
# and the latest snapshot version live here, bumped in the same statement that
# takes the row lock, so no writer ever reads MAX() over the history.
sessions = Table(
    "lovia_sessions",
    metadata,
    Column("session_id", Id, primary_key=True),
    Column("parent_session_id", Id, nullable=True),
    Column("session_type", Integer, nullable=False, server_default="0"),
    Column("title", String(200), nullable=True),
    Column("agent_name", String(64), nullable=True),
    Column("last_sequence", BigInteger, nullable=False, server_default="0"),
    Column("message_count", BigInteger, nullable=False, server_default="0"),
    Column("run_count", BigInteger, nullable=False, server_default="0"),
    Column("snapshot_version", Integer, nullable=False, server_default="0"),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index(None, "updated_at", "session_id"),
    Index(None, "parent_session_id"),
)

# The Raw Log: one row per transcript entry, read by both public APIs.
messages = Table(
    "lovia_messages",
    metadata,
    Column("session_id", Id, nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("request_id", Id, nullable=False),
    Column("run_id", Id, nullable=True),
    Column("entry_type", String(32), nullable=False),
    Column("call_id", Id, nullable=True),
    Column("entry_json", JsonText, nullable=False),
    Column("envelope_json", JsonText, nullable=True),
    Column("metadata_json", JsonText, nullable=True),
    Column("tags_json", JsonText, nullable=True),
    Column("started_at", UTCDateTime, nullable=True),
    Column("completed_at", UTCDateTime, nullable=True),
    Column("duration_ns", BigInteger, nullable=True),
    Column("reasoning_started_at", UTCDateTime, nullable=True),
    Column("reasoning_completed_at", UTCDateTime, nullable=True),
    Column("reasoning_duration_ns", BigInteger, nullable=True),
    Column("content_started_at", UTCDateTime, nullable=True),
    Column("content_completed_at", UTCDateTime, nullable=True),
    Column("content_duration_ns", BigInteger, nullable=True),
    Column("input_tokens", BigInteger, nullable=True),
    Column("output_tokens", BigInteger, nullable=True),
    Column("cache_read_tokens", BigInteger, nullable=True),
    Column("cache_write_tokens", BigInteger, nullable=True),
    Column("reasoning_tokens", BigInteger, nullable=True),
    Column("message_id", String(64), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    # NULL until the row is changed (trim_tool_results); readers show created_at.
    Column("updated_at", UTCDateTime, nullable=True),
    PrimaryKeyConstraint("session_id", "sequence"),
    ForeignKeyConstraint(["session_id"], ["lovia_sessions.session_id"]),
)

# One row per finished run (segment): what makes lovia's append idempotent.
session_runs = Table(
    "lovia_session_runs",
    metadata,
    Column("session_id", Id, nullable=False),
    Column("run_id", Id, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("first_sequence", BigInteger, nullable=False),
    Column("entry_count", BigInteger, nullable=False),
    Column("meta_json", JsonText, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("session_id", "run_id"),
    ForeignKeyConstraint(["session_id"], ["lovia_sessions.session_id"]),
    Index(None, "session_id", "position"),
)

# Compaction snapshots: immutable, versioned per session.
snapshots = Table(
    "lovia_snapshots",
    metadata,
    Column("session_id", Id, nullable=False),
    Column("version", Integer, nullable=False),
    Column("snapshot_id", String(64), nullable=False),
    Column("compacted_through_sequence", BigInteger, nullable=False),
    Column("summary_json", JsonText, nullable=False),
    Column("envelope_json", JsonText, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("session_id", "version"),
    ForeignKeyConstraint(["session_id"], ["lovia_sessions.session_id"]),
)

# A run in flight: a small mutable head plus an append-only entry log.
run_heads = Table(
    "lovia_run_heads",
    metadata,
    Column("run_id", Id, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("head_json", JsonText, nullable=False),
    Column("entry_count", BigInteger, nullable=False, server_default="0"),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index(None, "status", "updated_at"),
)

run_entries = Table(
    "lovia_run_entries",
    metadata,
    Column("run_id", Id, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("entry_json", JsonText, nullable=False),
    PrimaryKeyConstraint("run_id", "position"),
    ForeignKeyConstraint(["run_id"], ["lovia_run_heads.run_id"]),
)

# What a run's side-effecting tool calls did: an intent row before a call runs
# (for tools that are not simply at-least-once), and the outcome when the tool
# committed its effect through the same transaction.
tool_effects = Table(
    "lovia_tool_effects",
    metadata,
    Column("run_id", Id, nullable=False),
    Column("call_id", Id, nullable=False),
    Column("tool_name", String(255), nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("result_json", JsonText, nullable=True),
    PrimaryKeyConstraint("run_id", "call_id"),
)

# Who executes a run right now. ``token`` grows on every takeover and every
# checkpoint write names the token it was issued under, so a worker that
# stalled past its lease is fenced off. ``lease_id`` is unique per
# acquisition; ``expires_ms`` is the database clock's epoch milliseconds, so
# hosts' clocks never have to agree. The row outlives a released lease: the
# token must never repeat while the run exists.
run_leases = Table(
    "lovia_run_leases",
    metadata,
    Column("run_id", Id, primary_key=True),
    Column("token", BigInteger, nullable=False),
    Column("lease_id", String(32), nullable=False),
    Column("holder", String(255), nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
)
