"""The schema's tables as the stores and migrations use them, through Core.

They are the tables of the ORM models in ``lovia_store.models``, the one
description of the schema: there is nothing to keep in step here.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table

from ..models import (
    MessageRow,
    RunEntryRow,
    RunHeadRow,
    RunLeaseRow,
    SchemaVersionRow,
    SessionRow,
    SessionRunRow,
    SnapshotRow,
    ToolEffectRow,
    metadata,
)

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

schema_versions = cast(Table, SchemaVersionRow.__table__)
sessions = cast(Table, SessionRow.__table__)
messages = cast(Table, MessageRow.__table__)
session_runs = cast(Table, SessionRunRow.__table__)
snapshots = cast(Table, SnapshotRow.__table__)
run_heads = cast(Table, RunHeadRow.__table__)
run_entries = cast(Table, RunEntryRow.__table__)
tool_effects = cast(Table, ToolEffectRow.__table__)
run_leases = cast(Table, RunLeaseRow.__table__)
