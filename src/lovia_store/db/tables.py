"""The schema: our tables, declared in Core, as the stores and migrations use them.

The one description of the schema. ``lovia_store.models`` maps its read-only
ORM classes onto these very tables (``__table__``), so a host's ORM queries and
our stores see the same columns, and a store never loads ``sqlalchemy.orm``.

Every table carries the ``lovia_`` prefix because hosts share their database
with us. The naming convention makes constraint names deterministic, which
Alembic's autogenerate and SQLite batch migrations rely on.

Ids (``Id``: sessions, runs, requests, tool calls) compare exactly on every
backend; see ``lovia_store.models`` for what that means on MySQL and MariaDB.
Stored JSON columns (``*_json``) hold the exact text the stores wrote.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
)

from .types import Bytes, Id, JsonText, Tenant, UTCDateTime

__all__ = [
    "VERSION_TABLE",
    "contents",
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
"""Our tables only. Never add it to a host's Alembic ``target_metadata``:
our migrations own these tables (docs/embedding.md)."""


def _tenant() -> Column[str]:
    """Leads every key: the same id in two tenants is two rows (docs/tenants.md)."""
    return Column("tenant", Tenant, primary_key=True, server_default="")


def _of_session() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["tenant", "session_id"], ["lovia_sessions.tenant", "lovia_sessions.session_id"]
    )


schema_versions = Table(
    "lovia_schema",
    metadata,
    Column("store", String(64), primary_key=True),
    Column("version", Integer(), nullable=False),
)
"""The ``lovia_schema`` gate: one row per store family that owns the file."""

sessions = Table(
    "lovia_sessions",
    metadata,
    _tenant(),
    Column("session_id", Id, primary_key=True),
    Column("parent_session_id", Id),
    Column("session_type", Integer(), server_default="0", nullable=False),
    Column("title", String(200)),
    Column("agent_name", String(64)),
    Column("last_sequence", BigInteger(), server_default="0", nullable=False),
    Column("message_count", BigInteger(), server_default="0", nullable=False),
    Column("run_count", BigInteger(), server_default="0", nullable=False),
    Column("snapshot_version", Integer(), server_default="0", nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column(
        "forked_from_session_id",
        Id,
        doc="The session this one was forked from (``fork``); NULL otherwise.",
    ),
    Column("forked_at_entry", BigInteger(), doc="How many of the origin's entries the fork took."),
    Index(None, "tenant", "updated_at", "session_id"),
    Index(None, "tenant", "parent_session_id"),
)
"""A session's identity plus the counters that make appends O(1).

The next sequence and the latest snapshot version live here, bumped in
the same statement that takes the row lock, so no writer ever reads MAX()
over the history (``lovia_store.sessions.log``)."""

messages = Table(
    "lovia_messages",
    metadata,
    _tenant(),
    Column("session_id", Id, primary_key=True),
    Column("sequence", BigInteger(), primary_key=True),
    Column("request_id", Id, nullable=False),
    Column("run_id", Id),
    Column("entry_type", String(32), nullable=False),
    Column("call_id", Id),
    Column("entry_json", JsonText, nullable=False),
    Column("envelope_json", JsonText),
    Column("metadata_json", JsonText),
    Column("tags_json", JsonText),
    Column("started_at", UTCDateTime()),
    Column("completed_at", UTCDateTime()),
    Column("duration_ns", BigInteger()),
    Column("reasoning_started_at", UTCDateTime()),
    Column("reasoning_completed_at", UTCDateTime()),
    Column("reasoning_duration_ns", BigInteger()),
    Column("content_started_at", UTCDateTime()),
    Column("content_completed_at", UTCDateTime()),
    Column("content_duration_ns", BigInteger()),
    Column("input_tokens", BigInteger()),
    Column("output_tokens", BigInteger()),
    Column("cache_read_tokens", BigInteger()),
    Column("cache_write_tokens", BigInteger()),
    Column("reasoning_tokens", BigInteger()),
    Column("message_id", String(64)),
    # The caller's key for a Raw Log append (NULL without one): unique per session.
    Column("idempotency_key", Id),
    Column("created_at", UTCDateTime(), nullable=False),
    # NULL until the row is changed (trim_tool_results); readers show created_at.
    Column("updated_at", UTCDateTime()),
    # A keyed Raw Log append is stored once per session (re-issuing it returns the row).
    Index(None, "tenant", "session_id", "idempotency_key", unique=True),
    _of_session(),
)
"""The immutable Raw Log: one row per message, read by both public APIs.

A row is one transcript entry (``entry_type`` its type), or, for a
zett-agent message holding several, their JSON array (``entry_type``
``"multiple"``)."""

session_runs = Table(
    "lovia_session_runs",
    metadata,
    _tenant(),
    Column("session_id", Id, primary_key=True),
    Column("run_id", Id, primary_key=True),
    Column("position", BigInteger(), nullable=False),
    Column("first_sequence", BigInteger(), nullable=False),
    Column("entry_count", BigInteger(), nullable=False),
    Column("meta_json", JsonText),
    Column("created_at", UTCDateTime(), nullable=False),
    Index(None, "tenant", "session_id", "position"),
    _of_session(),
)
"""One finished run (segment) of a session: what makes lovia's append idempotent."""

snapshots = Table(
    "lovia_snapshots",
    metadata,
    _tenant(),
    Column("session_id", Id, primary_key=True),
    Column("version", Integer(), primary_key=True),
    Column("snapshot_id", String(64), nullable=False),
    Column("compacted_through_sequence", BigInteger(), nullable=False),
    Column("summary_json", JsonText, nullable=False),
    Column("envelope_json", JsonText),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    _of_session(),
)
"""A compaction snapshot: immutable, versioned per session (optimistic versions)."""

run_heads = Table(
    "lovia_run_heads",
    metadata,
    _tenant(),
    Column("run_id", Id, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("head_json", JsonText, nullable=False),
    Column("entry_count", BigInteger(), server_default="0", nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column(
        "session_id",
        Id,
        doc="The session the run appends to when it finishes, when its writer said "
        "(retention keeps it while the run can resume); NULL otherwise.",
    ),
    Index(None, "tenant", "status", "updated_at"),
    Index(None, "tenant", "session_id"),
)
"""A run in flight: its small mutable head (status, the head's JSON)."""

run_entries = Table(
    "lovia_run_entries",
    metadata,
    _tenant(),
    Column("run_id", Id, primary_key=True),
    Column("position", BigInteger(), primary_key=True),
    Column("entry_json", JsonText, nullable=False),
    ForeignKeyConstraint(
        ["tenant", "run_id"], ["lovia_run_heads.tenant", "lovia_run_heads.run_id"]
    ),
)
"""A run's append-only entry log, beside its head."""

tool_effects = Table(
    "lovia_tool_effects",
    metadata,
    _tenant(),
    Column("run_id", Id, primary_key=True),
    Column("call_id", Id, primary_key=True),
    Column("tool_name", String(255), nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("result_json", JsonText),
)
"""What a run's side-effecting tool call did.

An intent row before a call runs (for tools that are not simply
at-least-once), and the outcome when the tool committed its effect
through the same transaction."""

run_leases = Table(
    "lovia_run_leases",
    metadata,
    _tenant(),
    Column("run_id", Id, primary_key=True),
    Column("token", BigInteger(), nullable=False),
    Column("lease_id", String(32), nullable=False),
    Column("holder", String(255), nullable=False),
    Column("expires_ms", BigInteger(), nullable=False),
)
"""Who executes a run right now.

``token`` grows on every takeover and every checkpoint write names the
token it was issued under, so a worker that stalled past its lease is
fenced off. ``lease_id`` is unique per acquisition; ``expires_ms`` is the
database clock's epoch milliseconds, so hosts' clocks never have to agree.
The row outlives a released lease: the token must never repeat while the
run exists."""

contents = Table(
    "lovia_contents",
    metadata,
    _tenant(),
    Column("digest", String(64), primary_key=True),
    Column("refs", BigInteger(), nullable=False),
    Column("size", BigInteger(), nullable=False),
    Column("data", Bytes, nullable=False),
)
"""Large values stored once per tenant (``lovia_store.db.contents``).

A document's long strings (a tool output read ten times) are kept here under
their digest, compressed (and encrypted), and the document names them.
``refs`` counts the documents' references: the change that drops the last one
deletes the row in its own transaction. ``size`` is the value's length as
text, before compression."""
