"""Raw Log storage: a message update time; adopts a zett-agent 0.2 database in place.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

zett-agent's ``SQLSessionStorage`` keeps ``agent_sessions``, ``raw_messages``
and ``session_snapshots`` (SQLite, PostgreSQL or MySQL). When all three are
present their rows are copied into ``lovia_sessions``/``lovia_messages``/
``lovia_snapshots`` and the old tables are dropped, in the same transaction,
so the database is either fully adopted or untouched. Nothing is dropped on
the way: ids, sequences, request ids, metadata and tags (their JSON text
verbatim), timing, usage and timestamps get columns of their own, and each
message keeps its zett envelope verbatim in ``envelope_json`` beside the
transcript entry it is shown as (the projection below, frozen here as it was
when this revision was written; 0006 recomputes it for assistant messages).

It also gives a lovia 0.9 file's ``lovia_schema`` table, which 0001 keeps,
the column definition our tables declare (``store VARCHAR(64) NOT NULL``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from lovia_store.migrations.column_types import UTCDateTime
from lovia_store.migrations.recognition import adoptable

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ZETT_TABLES = ("agent_sessions", "raw_messages", "session_snapshots")
_CHUNK = 500

_TIMING = (
    "started_at",
    "completed_at",
    "reasoning_started_at",
    "reasoning_completed_at",
    "content_started_at",
    "content_completed_at",
)
_NUMBERS = (
    "duration_ns",
    "reasoning_duration_ns",
    "content_duration_ns",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)

# zett's tables, read with a plain DateTime: its values are naive UTC.
_z_sessions_columns = ("id", "parent_session_id", "title", "agent_name")
_z_messages = sa.table(
    "raw_messages",
    *(sa.column(name) for name in ("id", "session_id", "request_id", "sequence")),
    sa.column("message_json"),
    sa.column("metadata_json"),
    sa.column("tags_json"),
    *(sa.column(name, sa.DateTime()) for name in _TIMING),
    *(sa.column(name) for name in _NUMBERS),
    sa.column("created_at", sa.DateTime()),
    sa.column("updated_at", sa.DateTime()),
)
_z_snapshots = sa.table(
    "session_snapshots",
    *(sa.column(name) for name in ("id", "session_id", "version")),
    sa.column("compacted_through_sequence"),
    sa.column("message_json"),
    sa.column("created_at", sa.DateTime()),
    sa.column("updated_at", sa.DateTime()),
)

# Ours, frozen here as migrations must be.
_sessions = sa.table(
    "lovia_sessions",
    *(sa.column(name) for name in ("session_id", "parent_session_id", "session_type", "title")),
    *(sa.column(name) for name in ("agent_name", "last_sequence", "message_count")),
    sa.column("run_count"),
    sa.column("snapshot_version"),
    sa.column("created_at", UTCDateTime()),
    sa.column("updated_at", UTCDateTime()),
)
_messages = sa.table(
    "lovia_messages",
    *(sa.column(name) for name in ("session_id", "sequence", "request_id", "run_id")),
    *(sa.column(name) for name in ("entry_type", "call_id", "entry_json", "envelope_json")),
    sa.column("metadata_json"),
    sa.column("tags_json"),
    *(sa.column(name, UTCDateTime()) for name in _TIMING),
    *(sa.column(name) for name in _NUMBERS),
    sa.column("message_id"),
    sa.column("created_at", UTCDateTime()),
    sa.column("updated_at", UTCDateTime()),
)
_snapshots = sa.table(
    "lovia_snapshots",
    *(sa.column(name) for name in ("session_id", "version", "snapshot_id")),
    sa.column("compacted_through_sequence"),
    sa.column("summary_json"),
    sa.column("envelope_json"),
    sa.column("created_at", UTCDateTime()),
    sa.column("updated_at", UTCDateTime()),
)


# -- zett's envelopes as transcript entries, frozen (pure data, stdlib only) -----------
# {"kind": K, "data": asdict(message)}; kinds 1 system, 2 user, 3 assistant, 4 tool,
# 5 checkpoint, 6 agent; bytes as {"__kcs_bytes__": base64}. One entry per message.

_SYSTEM, _ASSISTANT, _TOOL = 1, 3, 4
_BYTES = "__kcs_bytes__"


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _str(value: Any, default: str = "") -> str:
    if value is None:
        return default
    return value if isinstance(value, str) else _json_text(value)


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and "text" in part and "source" not in part


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_str(part["text"]) for part in content if _is_text_part(part))
    return _str(content)


def _part(part: Any) -> dict[str, Any]:
    if _is_text_part(part):
        return {"text": _str(part["text"]), "type": "text"}
    source = part.get("source") if isinstance(part, dict) else None
    if isinstance(source, dict):
        data = source.get("data")
        if isinstance(data, dict):
            data = data.get(_BYTES)
        return {
            "url": _optional_str(source.get("url")),
            "data": _optional_str(data),
            "mime_type": _optional_str(source.get("media_type")),
            "detail": _optional_str(part.get("detail")),
            "type": "image",
        }
    return {"text": _json_text(part), "type": "text"}


def _input(role: str, content: Any) -> dict[str, Any]:
    shown = [_part(p) for p in content] if isinstance(content, list) else _str(content)
    return {"role": role, "content": shown, "type": "input"}


def _assistant(data: dict[str, Any]) -> dict[str, Any]:
    text = _str(data.get("content"))
    calls = [c for c in data.get("tool_calls") or () if isinstance(c, dict)]
    reasoning = data.get("reasoning")
    if text or not (calls or reasoning):
        return {"content": text, "id": None, "type": "assistant_text"}
    if calls:
        first = calls[0]
        return {
            "call_id": _str(first.get("id")),
            "name": _str(first.get("name")),
            "arguments": _json_text(first.get("arguments") or {}),
            "type": "tool_call",
        }
    return {
        "content": _str(reasoning),
        "id": None,
        "provider": _optional_str(data.get("provider")),
        "metadata": {},
        "type": "reasoning",
    }


def _tool(data: dict[str, Any]) -> dict[str, Any]:
    content = data.get("content")
    entry: dict[str, Any] = {
        "call_id": _str(data.get("tool_call_id")),
        "output": _text_of(content),
        "raw": None,
        "is_error": data.get("success", True) is False,
        "type": "tool_result",
    }
    if isinstance(content, list):
        entry["parts"] = [_part(part) for part in content]
    return entry


def entry_from_envelope(envelope: dict[str, Any]) -> dict[str, Any]:
    """The one entry that stands for a zett message; never fails."""
    kind, data = envelope.get("kind"), envelope.get("data")
    if not isinstance(data, dict):
        return _input("user", data)
    if kind == _SYSTEM:
        return _input("system", _text_of(data.get("content")))
    if kind == _ASSISTANT:
        return _assistant(data)
    if kind == _TOOL:
        return _tool(data)
    return _input("user", data.get("content"))


def summary_from_envelope(envelope: dict[str, Any]) -> str:
    data = envelope.get("data")
    return _text_of(data.get("content")) if isinstance(data, dict) else _str(data)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _envelope(text: str, where: str) -> tuple[dict[str, Any], str]:
    """The one ``{"kind", "data"}`` in a zett ``message_json`` list, and its text verbatim."""
    items = json.loads(text)
    if not (isinstance(items, list) and len(items) == 1 and isinstance(items[0], dict)):
        raise RuntimeError(f"cannot adopt {where}: message_json is not a one-message list")
    inner = text.strip()[1:-1].strip()
    # The element's own text, byte for byte, so an export can give the row back.
    return items[0], inner if json.loads(inner) == items[0] else json.dumps(items[0])


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _message_row(row: Any) -> dict[str, Any]:
    envelope, verbatim = _envelope(row.message_json, f"raw message {row.id}")
    entry = entry_from_envelope(envelope)
    return {
        "session_id": row.session_id,
        "sequence": row.sequence,
        "request_id": row.request_id,
        "run_id": None,
        "entry_type": entry["type"],
        "call_id": entry.get("call_id"),
        "entry_json": _compact(entry),
        "envelope_json": verbatim,
        "metadata_json": row.metadata_json or "{}",
        "tags_json": row.tags_json or "{}",
        **{name: _utc(getattr(row, name)) for name in _TIMING},
        **{name: getattr(row, name) for name in _NUMBERS},
        "message_id": row.id,
        "created_at": _utc(row.created_at),
        "updated_at": _utc(row.updated_at),
    }


def _stats(bind: sa.Connection) -> dict[str, dict[str, Any]]:
    """Per session: message count, last sequence, first/last message time, latest version."""
    m, s = _z_messages.c, _z_snapshots.c
    stats: dict[str, dict[str, Any]] = {}
    for sid, count, last, first_at, last_at in bind.execute(
        sa.select(
            m.session_id,
            sa.func.count(),
            sa.func.max(m.sequence),
            sa.func.min(m.created_at),
            sa.func.max(m.created_at),
        ).group_by(m.session_id)
    ):
        stats[sid] = {"count": count, "last": last, "first_at": first_at, "last_at": last_at}
    for sid, version, first_at, last_at in bind.execute(
        sa.select(
            s.session_id,
            sa.func.max(s.version),
            sa.func.min(s.created_at),
            sa.func.max(s.created_at),
        ).group_by(s.session_id)
    ):
        entry = stats.setdefault(
            sid, {"count": 0, "last": 0, "first_at": first_at, "last_at": last_at}
        )
        entry["version"] = version
    return stats


def _adopt_sessions(bind: sa.Connection, stats: dict[str, dict[str, Any]]) -> list[str]:
    columns = {c["name"] for c in sa.inspect(bind).get_columns("agent_sessions")}
    z = sa.table(
        "agent_sessions",
        *(sa.column(name) for name in _z_sessions_columns),
        *([sa.column("session_type")] if "session_type" in columns else []),  # older zett
        sa.column("created_at", sa.DateTime()),
        sa.column("updated_at", sa.DateTime()),
    )
    rows: dict[str, dict[str, Any]] = {}
    for row in bind.execute(sa.select(z)):
        rows[row.id] = {
            "session_id": row.id,
            "parent_session_id": row.parent_session_id,
            "session_type": getattr(row, "session_type", 0) or 0,
            "title": row.title,
            "agent_name": row.agent_name,
            "created_at": _utc(row.created_at),
            "updated_at": _utc(row.updated_at),
        }
    # zett keeps no foreign keys: messages whose session row is gone still
    # get one (ours has a foreign key), dated by their own first and last.
    for sid in stats.keys() - rows.keys():
        first_at, last_at = stats[sid]["first_at"], stats[sid]["last_at"]
        rows[sid] = {
            "session_id": sid,
            "parent_session_id": None,
            "session_type": 0,
            "title": None,
            "agent_name": None,
            "created_at": _utc(first_at),
            "updated_at": _utc(last_at),
        }
    ids = sorted(rows)
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        taken = (
            bind.execute(sa.select(_sessions.c.session_id).where(_sessions.c.session_id.in_(chunk)))
            .scalars()
            .first()
        )
        if taken is not None:
            raise RuntimeError(
                f"cannot adopt zett-agent's tables: session {taken!r} exists in both stores"
            )
        values = []
        for sid in chunk:
            counts = stats.get(sid, {})
            values.append(
                {
                    **rows[sid],
                    "last_sequence": counts.get("last") or 0,
                    "message_count": counts.get("count", 0),
                    "run_count": 0,
                    "snapshot_version": counts.get("version") or 0,
                }
            )
        bind.execute(_sessions.insert(), values)
    return ids


def _report(task: str, done: int, total: int | None) -> None:
    """Progress for whoever asked (``lovia_store.db.progress``); nobody by default."""
    config = op.get_context().config
    reporter = None if config is None else config.attributes.get("lovia_store.progress")
    if reporter is not None:
        reporter(task, done, total)


def _adopt_messages(bind: sa.Connection, session_ids: list[str]) -> None:
    m = _z_messages.c
    for done, sid in enumerate(session_ids):
        _report("zett-agent sessions", done, len(session_ids))
        after = None
        while True:
            query = sa.select(_z_messages).where(m.session_id == sid)
            if after is not None:
                query = query.where(m.sequence > after)
            chunk = bind.execute(query.order_by(m.sequence).limit(_CHUNK)).all()
            if not chunk:
                break
            bind.execute(_messages.insert(), [_message_row(row) for row in chunk])
            after = chunk[-1].sequence
    _report("zett-agent sessions", len(session_ids), len(session_ids))


def _adopt_snapshots(bind: sa.Connection) -> None:
    s = _z_snapshots.c
    rows = []
    for row in bind.execute(sa.select(_z_snapshots).order_by(s.session_id, s.version)):
        envelope, verbatim = _envelope(row.message_json, f"snapshot {row.id}")
        rows.append(
            {
                "session_id": row.session_id,
                "version": row.version,
                "snapshot_id": row.id,
                "compacted_through_sequence": row.compacted_through_sequence,
                "summary_json": _compact({"content": summary_from_envelope(envelope)}),
                "envelope_json": verbatim,
                "created_at": _utc(row.created_at),
                "updated_at": _utc(row.updated_at),
            }
        )
    for start in range(0, len(rows), _CHUNK):
        bind.execute(_snapshots.insert(), rows[start : start + _CHUNK])


def _normalise_lovia_schema(bind: sa.Connection) -> None:
    """A lovia 0.9 file's own ``lovia_schema`` (``store TEXT PRIMARY KEY``, which SQLite
    lets be NULL), kept by 0001, takes the column definition our tables declare."""
    columns = {c["name"]: c for c in sa.inspect(bind).get_columns("lovia_schema")}
    store = columns["store"]
    if store["nullable"] or getattr(store["type"], "length", None) != 64:
        with op.batch_alter_table("lovia_schema") as batch:
            batch.alter_column(
                "store", existing_type=store["type"], type_=sa.String(64), nullable=False
            )


def upgrade() -> None:
    bind = op.get_bind()
    # Unless a run that failed half-way added it (MySQL/MariaDB commit each DDL statement).
    if "updated_at" not in {c["name"] for c in sa.inspect(bind).get_columns("lovia_messages")}:
        op.add_column("lovia_messages", sa.Column("updated_at", UTCDateTime(), nullable=True))
    _normalise_lovia_schema(bind)
    # zett's only with zett's columns: a host's tables of the same names are the host's.
    if "zett-agent" not in adoptable(bind):
        return
    stats = _stats(bind)
    session_ids = _adopt_sessions(bind, stats)
    _adopt_messages(bind, [sid for sid in session_ids if stats.get(sid, {}).get("count")])
    _adopt_snapshots(bind)
    for name in ZETT_TABLES:
        op.drop_table(name)
    _guard_against_zett(bind)


GUARD_NOTE = (
    "converted to lovia-store: open this database with lovia_store.integrations.zett; "
    "zett-agent itself opens only the copy or dump kept from before it"
)


def _guard_against_zett(bind: sa.Connection) -> None:
    """Views under zett's table names, so the real zett-agent fails loudly on a converted
    database instead of creating empty tables beside ours (showing an empty session and
    taking writes lovia-store never sees). zett's first call finds a "table" without
    its columns and stops (SQLite: "Cannot add a column to a view"); the views' one
    column says why to whoever looks. They read no table, so no later ALTER minds them.
    """
    existing = set(sa.inspect(bind).get_view_names())
    note = GUARD_NOTE.replace("'", "''")
    for name in ZETT_TABLES:
        if name not in existing:
            op.execute(f"CREATE VIEW {name} AS SELECT '{note}' AS converted_to_lovia_store")


def downgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_view_names())
    for name in ZETT_TABLES:
        if name in existing:
            op.execute(f"DROP VIEW {name}")
    with op.batch_alter_table("lovia_messages") as batch:
        batch.drop_column("updated_at")
