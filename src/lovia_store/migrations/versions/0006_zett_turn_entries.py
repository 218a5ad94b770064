"""zett-agent assistant messages shown whole in lovia's view: reasoning, text and every call.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

A zett-agent assistant message holds reasoning, text and any number of tool
calls; 0002 (and lovia-store before this revision) showed each as one entry
(its text, else its first call), so lovia's view of a zett session had tool
results whose calls were missing, which providers refuse. Every message row
that keeps a zett envelope and was shown as an assistant entry is projected
again, from its envelope, as its reasoning (without a provider: zett's plain
text, never replayed as a provider's own), its text and one ``tool_call`` per
call, in that order. One entry stays a single JSON document; several become
a JSON array in the same row (entry type ``entries``), so the Raw Log keeps
one row, one sequence, per zett message. Envelopes, sequences and every
other column are unchanged; rows without an envelope (lovia's own) are not
read. The downgrade gives those rows their one entry back.

Frozen like every revision: the projection is written out here, nothing is
imported from lovia_store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MULTIPLE = "entries"
_ASSISTANT_KIND = 3
_SHOWN_AS_ASSISTANT = ("assistant_text", "tool_call", "reasoning", MULTIPLE)
_CHUNK = 500

_messages = sa.table(
    "lovia_messages",
    *(sa.column(name) for name in ("session_id", "sequence", "entry_type", "call_id")),
    sa.column("entry_json"),
    sa.column("envelope_json"),
)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _str(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _call(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "call_id": _str(call.get("id")),
        "name": _str(call.get("name")),
        "arguments": json.dumps(call.get("arguments") or {}, ensure_ascii=False),
        "type": "tool_call",
    }


def _text(text: str) -> dict[str, Any]:
    return {"content": text, "id": None, "type": "assistant_text"}


def _turn_entries(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Reasoning, text, then every call; one empty text when there is none of them."""
    text = _str(data.get("content"))
    calls = [c for c in data.get("tool_calls") or () if isinstance(c, dict)]
    reasoning = data.get("reasoning")
    entries: list[dict[str, Any]] = []
    if reasoning:
        entries.append(
            {
                "content": _str(reasoning),
                "id": None,
                "provider": None,
                "metadata": {},
                "type": "reasoning",
            }
        )
    if text or not (calls or entries):
        entries.append(_text(text))
    entries.extend(_call(call) for call in calls)
    return entries


def _one_entry(data: dict[str, Any]) -> list[dict[str, Any]]:
    """What 0002 showed: the text, else the first call, else the reasoning."""
    text = _str(data.get("content"))
    calls = [c for c in data.get("tool_calls") or () if isinstance(c, dict)]
    reasoning = data.get("reasoning")
    if text or not (calls or reasoning):
        return [_text(text)]
    if calls:
        return [_call(calls[0])]
    return [
        {
            "content": _str(reasoning),
            "id": None,
            "provider": data.get("provider") if isinstance(data.get("provider"), str) else None,
            "metadata": {},
            "type": "reasoning",
        }
    ]


def _row(entries: list[dict[str, Any]]) -> dict[str, Any]:
    if len(entries) == 1:
        entry = entries[0]
        return {
            "entry_type": entry["type"],
            "call_id": entry.get("call_id"),
            "entry_json": _compact(entry),
        }
    return {"entry_type": MULTIPLE, "call_id": None, "entry_json": _compact(entries)}


def _report(task: str, done: int, total: int | None) -> None:
    """Progress for whoever asked (``lovia_store.db.progress``); nobody by default."""
    config = op.get_context().config
    reporter = None if config is None else config.attributes.get("lovia_store.progress")
    if reporter is not None:
        reporter(task, done, total)


def _reproject(project: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> None:
    """Every assistant row with an envelope, projected by ``project``, a chunk at a time."""
    bind = op.get_bind()
    m = _messages.c
    after: tuple[str, int] | None = None
    read = 0
    while True:
        query = sa.select(m.session_id, m.sequence, m.envelope_json).where(
            m.envelope_json.is_not(None), m.entry_type.in_(_SHOWN_AS_ASSISTANT)
        )
        if after is not None:
            query = query.where(sa.tuple_(m.session_id, m.sequence) > sa.tuple_(*after))
        rows = bind.execute(query.order_by(m.session_id, m.sequence).limit(_CHUNK)).all()
        if not rows:
            return
        changes = []
        for session_id, sequence, envelope_json in rows:
            envelope = json.loads(envelope_json)
            data = envelope.get("data") if isinstance(envelope, dict) else None
            if envelope.get("kind") != _ASSISTANT_KIND or not isinstance(data, dict):
                continue
            changes.append({"sid": session_id, "seq": sequence, **_row(project(data))})
        if changes:
            bind.execute(
                _messages.update()
                .where(m.session_id == sa.bindparam("sid"), m.sequence == sa.bindparam("seq"))
                .values(
                    entry_type=sa.bindparam("entry_type"),
                    call_id=sa.bindparam("call_id"),
                    entry_json=sa.bindparam("entry_json"),
                ),
                changes,
            )
        after = (rows[-1].session_id, rows[-1].sequence)
        read += len(rows)
        _report("zett-agent messages", read, None)  # found as it goes: no total


def upgrade() -> None:
    _reproject(_turn_entries)


def downgrade() -> None:
    _reproject(_one_entry)
