"""Initial schema; adopts a lovia 0.9 file (its sessions and checkpoints) in place.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

lovia 0.9 keeps sessions in ``session_runs`` (one row per run, entries as one
JSON list) and checkpoints in ``snapshot_heads``/``snapshot_turns``, with an
empty ``lovia_schema`` table (version 0). When those tables are present their
rows are copied into ours, entry by entry, and the old tables are dropped in
the same transaction, so the file is either fully migrated or untouched.
Tables are lovia's only beside its ``lovia_schema`` and with its columns
(``lovia_store.migrations.recognition``): a host's table that shares a generic name is left alone.

On MySQL/MariaDB every DDL statement commits by itself, so a first migration
that failed half-way (a crash, a refused statement) leaves some of our tables
and no version row; running it again creates only what is missing, so the next
open finishes it. (Elsewhere DDL is transactional and nothing is left.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from lovia_store.migrations.column_types import UTCDateTime
from lovia_store.migrations.recognition import adoptable

revision: str = "0001"
down_revision: str | None = None
# A host that runs our revisions in its own lineage targets them as lovia_store@head.
branch_labels: str | Sequence[str] | None = ("lovia_store",)
depends_on: str | Sequence[str] | None = None

STORE_VERSIONS = {"session": 1, "checkpoint": 1, "raw_log": 1}

ID = sa.String(255)
# Ids compare byte for byte, as on SQLite and PostgreSQL (MySQL's default
# collations would make "A" and "a" one session); emoji need utf8mb4.
MYSQL_TABLE: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
JSON_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


class _Missing:
    """Creates only the tables and indexes that do not exist yet (see the docstring)."""

    def __init__(self, bind: sa.Connection, existing: set[str]) -> None:
        self.bind = bind
        self.existing = existing

    def create_table(self, name: str, *columns: Any, **options: Any) -> None:
        if name not in self.existing:
            op.create_table(name, *columns, **options)

    def create_index(self, name: str, table: str, columns: list[str]) -> None:
        # A table of ours that a failed run left may have its indexes too.
        if table in self.existing and name in self._indexes(table):
            return
        op.create_index(name, table, columns)

    def _indexes(self, table: str) -> set[str]:
        return {str(ix["name"]) for ix in sa.inspect(self.bind).get_indexes(table)}


def _create_tables(ddl: _Missing) -> None:
    ddl.create_table(
        "lovia_schema",
        sa.Column("store", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("store", name="pk_lovia_schema"),
        **MYSQL_TABLE,
    )
    ddl.create_table(
        "lovia_sessions",
        sa.Column("session_id", ID, nullable=False),
        sa.Column("parent_session_id", ID, nullable=True),
        sa.Column("session_type", sa.Integer(), server_default="0", nullable=False),
        sa.Column("title", sa.String(200), nullable=True),
        sa.Column("agent_name", sa.String(64), nullable=True),
        sa.Column("last_sequence", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("message_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("run_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("snapshot_version", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_lovia_sessions"),
        **MYSQL_TABLE,
    )
    ddl.create_index(
        "ix_lovia_sessions_updated_at_session_id", "lovia_sessions", ["updated_at", "session_id"]
    )
    ddl.create_index("ix_lovia_sessions_parent_session_id", "lovia_sessions", ["parent_session_id"])
    ddl.create_table(
        "lovia_messages",
        sa.Column("session_id", ID, nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("request_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=True),
        sa.Column("entry_type", sa.String(32), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=True),
        sa.Column("entry_json", JSON_TEXT, nullable=False),
        sa.Column("envelope_json", JSON_TEXT, nullable=True),
        sa.Column("metadata_json", JSON_TEXT, nullable=True),
        sa.Column("tags_json", JSON_TEXT, nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("completed_at", UTCDateTime(), nullable=True),
        sa.Column("duration_ns", sa.BigInteger(), nullable=True),
        sa.Column("reasoning_started_at", UTCDateTime(), nullable=True),
        sa.Column("reasoning_completed_at", UTCDateTime(), nullable=True),
        sa.Column("reasoning_duration_ns", sa.BigInteger(), nullable=True),
        sa.Column("content_started_at", UTCDateTime(), nullable=True),
        sa.Column("content_completed_at", UTCDateTime(), nullable=True),
        sa.Column("content_duration_ns", sa.BigInteger(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=True),
        sa.Column("output_tokens", sa.BigInteger(), nullable=True),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=True),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=True),
        sa.Column("reasoning_tokens", sa.BigInteger(), nullable=True),
        sa.Column("message_id", sa.String(64), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["lovia_sessions.session_id"],
            name="fk_lovia_messages_session_id_lovia_sessions",
        ),
        sa.PrimaryKeyConstraint("session_id", "sequence", name="pk_lovia_messages"),
        **MYSQL_TABLE,
    )
    ddl.create_table(
        "lovia_session_runs",
        sa.Column("session_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("first_sequence", sa.BigInteger(), nullable=False),
        sa.Column("entry_count", sa.BigInteger(), nullable=False),
        sa.Column("meta_json", JSON_TEXT, nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["lovia_sessions.session_id"],
            name="fk_lovia_session_runs_session_id_lovia_sessions",
        ),
        sa.PrimaryKeyConstraint("session_id", "run_id", name="pk_lovia_session_runs"),
        **MYSQL_TABLE,
    )
    ddl.create_index(
        "ix_lovia_session_runs_session_id_position",
        "lovia_session_runs",
        ["session_id", "position"],
    )
    ddl.create_table(
        "lovia_snapshots",
        sa.Column("session_id", ID, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("snapshot_id", sa.String(64), nullable=False),
        sa.Column("compacted_through_sequence", sa.BigInteger(), nullable=False),
        sa.Column("summary_json", JSON_TEXT, nullable=False),
        sa.Column("envelope_json", JSON_TEXT, nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["lovia_sessions.session_id"],
            name="fk_lovia_snapshots_session_id_lovia_sessions",
        ),
        sa.PrimaryKeyConstraint("session_id", "version", name="pk_lovia_snapshots"),
        **MYSQL_TABLE,
    )
    ddl.create_table(
        "lovia_run_heads",
        sa.Column("run_id", ID, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("head_json", JSON_TEXT, nullable=False),
        sa.Column("entry_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_lovia_run_heads"),
        **MYSQL_TABLE,
    )
    ddl.create_index(
        "ix_lovia_run_heads_status_updated_at", "lovia_run_heads", ["status", "updated_at"]
    )
    ddl.create_table(
        "lovia_run_entries",
        sa.Column("run_id", ID, nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("entry_json", JSON_TEXT, nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["lovia_run_heads.run_id"],
            name="fk_lovia_run_entries_run_id_lovia_run_heads",
        ),
        sa.PrimaryKeyConstraint("run_id", "position", name="pk_lovia_run_entries"),
        **MYSQL_TABLE,
    )


# Lightweight table handles for the data copy (frozen here, as migrations must be).
_sessions = sa.table(
    "lovia_sessions",
    sa.column("session_id"),
    sa.column("last_sequence"),
    sa.column("message_count"),
    sa.column("run_count"),
    sa.column("created_at", UTCDateTime()),
    sa.column("updated_at", UTCDateTime()),
)
_messages = sa.table(
    "lovia_messages",
    sa.column("session_id"),
    sa.column("sequence"),
    sa.column("request_id"),
    sa.column("run_id"),
    sa.column("entry_type"),
    sa.column("call_id"),
    sa.column("entry_json"),
    sa.column("created_at", UTCDateTime()),
)
_runs = sa.table(
    "lovia_session_runs",
    sa.column("session_id"),
    sa.column("run_id"),
    sa.column("position"),
    sa.column("first_sequence"),
    sa.column("entry_count"),
    sa.column("meta_json"),
    sa.column("created_at", UTCDateTime()),
)
_heads = sa.table(
    "lovia_run_heads",
    sa.column("run_id"),
    sa.column("status"),
    sa.column("head_json"),
    sa.column("entry_count"),
    sa.column("created_at", UTCDateTime()),
    sa.column("updated_at", UTCDateTime()),
)
_run_entries = sa.table(
    "lovia_run_entries", sa.column("run_id"), sa.column("position"), sa.column("entry_json")
)


def _epoch(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _entry_row(entry: dict[str, Any]) -> dict[str, Any]:
    # Entries are copied as JSON documents, not re-validated: a type this
    # version does not know must still survive the migration intact.
    return {
        "entry_type": str(entry.get("type")),
        "call_id": entry.get("call_id"),
        "entry_json": json.dumps(entry, ensure_ascii=False, separators=(",", ":")),
    }


def _report(task: str, done: int, total: int | None) -> None:
    """Progress for whoever asked (``lovia_store.db.progress``); nobody by default."""
    config = op.get_context().config
    reporter = None if config is None else config.attributes.get("lovia_store.progress")
    if reporter is not None:
        reporter(task, done, total)


def _adopt_lovia_sessions(bind: sa.Connection) -> None:
    rows = bind.execute(
        sa.text(
            "SELECT session_id, run_id, entries_json, meta_json, created_at "
            "FROM session_runs ORDER BY session_id, id"
        )
    ).all()
    per_session: dict[str, list[Any]] = {}
    for row in rows:
        per_session.setdefault(row.session_id, []).append(row)
    for done, (session_id, runs) in enumerate(per_session.items()):
        _report("lovia 0.9 sessions", done, len(per_session))
        messages: list[dict[str, Any]] = []
        run_rows: list[dict[str, Any]] = []
        for position, run in enumerate(runs, start=1):
            entries = json.loads(run.entries_json)
            created = _epoch(run.created_at)
            run_rows.append(
                {
                    "session_id": session_id,
                    "run_id": run.run_id,
                    "position": position,
                    "first_sequence": len(messages) + 1,
                    "entry_count": len(entries),
                    "meta_json": run.meta_json,
                    "created_at": created,
                }
            )
            for entry in entries:
                messages.append(
                    {
                        "session_id": session_id,
                        "sequence": len(messages) + 1,
                        "request_id": run.run_id,
                        "run_id": run.run_id,
                        "created_at": created,
                        **_entry_row(entry),
                    }
                )
        bind.execute(
            _sessions.insert(),
            {
                "session_id": session_id,
                "last_sequence": len(messages),
                "message_count": len(messages),
                "run_count": len(runs),
                "created_at": _epoch(runs[0].created_at),
                "updated_at": _epoch(runs[-1].created_at),
            },
        )
        bind.execute(_runs.insert(), run_rows)
        if messages:
            bind.execute(_messages.insert(), messages)
    _report("lovia 0.9 sessions", len(per_session), len(per_session))
    op.drop_table("session_runs")


def _adopt_lovia_checkpoints(bind: sa.Connection, has_turns: bool) -> None:
    turns: dict[str, list[Any]] = {}
    if has_turns:
        for row in bind.execute(
            sa.text("SELECT run_id, seq, entries_json FROM snapshot_turns ORDER BY run_id, seq")
        ):
            turns.setdefault(row.run_id, []).extend(json.loads(row.entries_json))
    heads = bind.execute(sa.text("SELECT run_id, head_json, updated_at FROM snapshot_heads")).all()
    for done, row in enumerate(heads):
        _report("lovia 0.9 checkpoints", done, len(heads))
        head = json.loads(row.head_json)
        entries = turns.get(row.run_id, [])
        stamp = _epoch(row.updated_at)
        bind.execute(
            _heads.insert(),
            {
                "run_id": row.run_id,
                "status": str(head.get("status", "running")),
                "head_json": row.head_json,
                "entry_count": len(entries),
                "created_at": _epoch(head.get("started_at") or row.updated_at),
                "updated_at": stamp,
            },
        )
        if entries:
            bind.execute(
                _run_entries.insert(),
                [
                    {"run_id": row.run_id, "position": i, "entry_json": _entry_row(e)["entry_json"]}
                    for i, e in enumerate(entries, start=1)
                ],
            )
    _report("lovia 0.9 checkpoints", len(heads), len(heads))
    op.drop_table("snapshot_heads")
    if has_turns:
        op.drop_table("snapshot_turns")


def upgrade() -> None:
    bind = op.get_bind()
    names = set(sa.inspect(bind).get_table_names())
    lovia = adoptable(bind).get("lovia 0.9", [])
    _create_tables(_Missing(bind, names))
    if "session_runs" in lovia:
        _adopt_lovia_sessions(bind)
    if "snapshot_heads" in lovia:
        _adopt_lovia_checkpoints(bind, has_turns="snapshot_turns" in lovia)
    schema = sa.table("lovia_schema", sa.column("store"), sa.column("version"))
    op.execute(schema.delete().where(schema.c.store.in_(list(STORE_VERSIONS))))
    op.bulk_insert(
        sa.Table("lovia_schema", sa.MetaData(), sa.Column("store"), sa.Column("version")),
        [{"store": store, "version": version} for store, version in STORE_VERSIONS.items()],
    )


def downgrade() -> None:
    for name in (
        "lovia_run_entries",
        "lovia_run_heads",
        "lovia_snapshots",
        "lovia_session_runs",
        "lovia_messages",
        "lovia_sessions",
        "lovia_schema",
    ):
        op.drop_table(name)
