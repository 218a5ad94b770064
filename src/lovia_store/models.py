"""The schema as ORM models: the one description of our tables, and the read side a host may query.

A host that already uses SQLAlchemy's ORM can ``select()`` these rows as
objects, join them to its own models in one ``AsyncSession`` and put an admin
view on them. They are read-only by contract: every write goes through the
stores, which keep invariants no ORM flush knows (sequences reserved on the
session row, run ids idempotent, leases fencing stale workers). The stores and
migrations use the same tables (``lovia_store.db.tables``) through Core.

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

A host column that holds one of our ids (a foreign key to a session, say)
should be of type ``Id`` too: on MySQL and MariaDB a join between columns of
different collations is refused.

Stored JSON columns (``*_json``) hold the exact text the stores wrote; decode
them with ``lovia_store.entry_from_dict`` (entries) or ``json.loads``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from .db.types import Id, JsonText, UTCDateTime

__all__ = [
    "Id",
    "MessageRow",
    "RunEntryRow",
    "RunHeadRow",
    "RunLeaseRow",
    "SchemaVersionRow",
    "SessionRow",
    "SessionRunRow",
    "SnapshotRow",
    "StoreBase",
    "ToolEffectRow",
    "metadata",
]

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


class StoreBase(DeclarativeBase):
    """lovia-store's own declarative base; a host's models keep theirs."""

    metadata = metadata


_SESSION_FK = "lovia_sessions.session_id"


class SchemaVersionRow(StoreBase):
    """The ``lovia_schema`` gate: one row per store family that owns the file."""

    __tablename__ = "lovia_schema"

    store: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class SessionRow(StoreBase):
    """A session's identity plus the counters that make appends O(1).

    The next sequence and the latest snapshot version live here, bumped in
    the same statement that takes the row lock, so no writer ever reads MAX()
    over the history (``lovia_store.sessions.log``).
    """

    __tablename__ = "lovia_sessions"
    __table_args__ = (
        Index(None, "updated_at", "session_id"),
        Index(None, "parent_session_id"),
    )

    session_id: Mapped[str] = mapped_column(Id, primary_key=True)
    parent_session_id: Mapped[str | None] = mapped_column(Id)
    session_type: Mapped[int] = mapped_column(Integer, server_default="0")
    title: Mapped[str | None] = mapped_column(String(200))
    agent_name: Mapped[str | None] = mapped_column(String(64))
    last_sequence: Mapped[int] = mapped_column(BigInteger, server_default="0")
    message_count: Mapped[int] = mapped_column(BigInteger, server_default="0")
    run_count: Mapped[int] = mapped_column(BigInteger, server_default="0")
    snapshot_version: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    forked_from_session_id: Mapped[str | None] = mapped_column(Id)
    """The session this one was forked from (``fork``); NULL otherwise."""
    forked_at_entry: Mapped[int | None] = mapped_column(BigInteger)
    """How many of the origin's entries the fork took."""

    messages: Mapped[list[MessageRow]] = relationship(
        viewonly=True, order_by="MessageRow.sequence", lazy="raise"
    )
    runs: Mapped[list[SessionRunRow]] = relationship(
        viewonly=True, order_by="SessionRunRow.position", lazy="raise"
    )
    snapshots: Mapped[list[SnapshotRow]] = relationship(
        viewonly=True, order_by="SnapshotRow.version", lazy="raise"
    )


class MessageRow(StoreBase):
    """The immutable Raw Log: one row per message, read by both public APIs.

    A row is one transcript entry (``entry_type`` its type), or, for a
    zett-agent message holding several, their JSON array (``entry_type``
    ``"multiple"``).
    """

    __tablename__ = "lovia_messages"
    # A keyed Raw Log append is stored once per session (re-issuing it returns the row).
    __table_args__ = (Index(None, "session_id", "idempotency_key", unique=True),)

    session_id: Mapped[str] = mapped_column(Id, ForeignKey(_SESSION_FK), primary_key=True)
    sequence: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    request_id: Mapped[str] = mapped_column(Id)
    run_id: Mapped[str | None] = mapped_column(Id)
    entry_type: Mapped[str] = mapped_column(String(32))
    call_id: Mapped[str | None] = mapped_column(Id)
    entry_json: Mapped[str] = mapped_column(JsonText)
    envelope_json: Mapped[str | None] = mapped_column(JsonText)
    metadata_json: Mapped[str | None] = mapped_column(JsonText)
    tags_json: Mapped[str | None] = mapped_column(JsonText)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    duration_ns: Mapped[int | None] = mapped_column(BigInteger)
    reasoning_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reasoning_completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reasoning_duration_ns: Mapped[int | None] = mapped_column(BigInteger)
    content_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    content_completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    content_duration_ns: Mapped[int | None] = mapped_column(BigInteger)
    input_tokens: Mapped[int | None] = mapped_column(BigInteger)
    output_tokens: Mapped[int | None] = mapped_column(BigInteger)
    cache_read_tokens: Mapped[int | None] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int | None] = mapped_column(BigInteger)
    reasoning_tokens: Mapped[int | None] = mapped_column(BigInteger)
    message_id: Mapped[str | None] = mapped_column(String(64))
    # The caller's key for a Raw Log append (NULL without one): unique per session.
    idempotency_key: Mapped[str | None] = mapped_column(Id)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # NULL until the row is changed (trim_tool_results); readers show created_at.
    updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class SessionRunRow(StoreBase):
    """One finished run (segment) of a session: what makes lovia's append idempotent."""

    __tablename__ = "lovia_session_runs"
    __table_args__ = (Index(None, "session_id", "position"),)

    session_id: Mapped[str] = mapped_column(Id, ForeignKey(_SESSION_FK), primary_key=True)
    run_id: Mapped[str] = mapped_column(Id, primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger)
    first_sequence: Mapped[int] = mapped_column(BigInteger)
    entry_count: Mapped[int] = mapped_column(BigInteger)
    meta_json: Mapped[str | None] = mapped_column(JsonText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SnapshotRow(StoreBase):
    """A compaction snapshot: immutable, versioned per session (optimistic versions)."""

    __tablename__ = "lovia_snapshots"

    session_id: Mapped[str] = mapped_column(Id, ForeignKey(_SESSION_FK), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    snapshot_id: Mapped[str] = mapped_column(String(64))
    compacted_through_sequence: Mapped[int] = mapped_column(BigInteger)
    summary_json: Mapped[str] = mapped_column(JsonText)
    envelope_json: Mapped[str | None] = mapped_column(JsonText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class RunHeadRow(StoreBase):
    """A run in flight: its small mutable head (status, the head's JSON)."""

    __tablename__ = "lovia_run_heads"
    __table_args__ = (Index(None, "status", "updated_at"), Index(None, "session_id"))

    run_id: Mapped[str] = mapped_column(Id, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    head_json: Mapped[str] = mapped_column(JsonText)
    entry_count: Mapped[int] = mapped_column(BigInteger, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    session_id: Mapped[str | None] = mapped_column(Id)
    """The session the run appends to when it finishes, when its writer said
    (retention keeps it while the run can resume); NULL otherwise."""

    entries: Mapped[list[RunEntryRow]] = relationship(
        viewonly=True, order_by="RunEntryRow.position", lazy="raise"
    )


class RunEntryRow(StoreBase):
    """A run's append-only entry log, beside its head."""

    __tablename__ = "lovia_run_entries"

    run_id: Mapped[str] = mapped_column(
        Id, ForeignKey("lovia_run_heads.run_id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    entry_json: Mapped[str] = mapped_column(JsonText)


class ToolEffectRow(StoreBase):
    """What a run's side-effecting tool call did.

    An intent row before a call runs (for tools that are not simply
    at-least-once), and the outcome when the tool committed its effect
    through the same transaction.
    """

    __tablename__ = "lovia_tool_effects"

    run_id: Mapped[str] = mapped_column(Id, primary_key=True)
    call_id: Mapped[str] = mapped_column(Id, primary_key=True)
    tool_name: Mapped[str] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    result_json: Mapped[str | None] = mapped_column(JsonText)


class RunLeaseRow(StoreBase):
    """Who executes a run right now.

    ``token`` grows on every takeover and every checkpoint write names the
    token it was issued under, so a worker that stalled past its lease is
    fenced off. ``lease_id`` is unique per acquisition; ``expires_ms`` is the
    database clock's epoch milliseconds, so hosts' clocks never have to agree.
    The row outlives a released lease: the token must never repeat while the
    run exists.
    """

    __tablename__ = "lovia_run_leases"

    run_id: Mapped[str] = mapped_column(Id, primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)
    lease_id: Mapped[str] = mapped_column(String(32))
    holder: Mapped[str] = mapped_column(String(255))
    expires_ms: Mapped[int] = mapped_column(BigInteger)
