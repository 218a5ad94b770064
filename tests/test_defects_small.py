"""Issue 18's small defects, each on every backend it concerns: D9 (an offset
page of an unknown session), D12 and D6 (effect ids checked before any SQL,
a long call id refused rather than cut on MariaDB)."""

from __future__ import annotations

from typing import Any

import pytest

from backends import Backend
from lovia_store import ToolResultEntry, UserError


async def test_offset_page_of_an_unknown_session_is_empty(sql_backend: Backend) -> None:
    """D9: SQLite read OFFSET NULL for a session without a row and refused it."""
    storage = sql_backend.storage()
    try:
        assert await storage.list_raw_messages("no-such-session", offset=1) == []
        assert await storage.list_raw_messages("no-such-session", offset=1, limit=3) == []
    finally:
        await storage.close()


BAD_IDS: list[Any] = ["", None, 7, "x" * 256, "a\x00b", "\ud800"]


@pytest.mark.parametrize("field", ["run_id", "call_id", "tool_name"])
@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_effect_ids_are_checked_before_sql(backend: Backend, field: str, bad: Any) -> None:
    """D12: record_intent and run_effect refuse a bad id with UserError and store nothing."""
    ids = {"run_id": "r1", "call_id": "c1", "tool_name": "tool"} | {field: bad}
    async with backend.checkpointer() as checkpointer:
        with pytest.raises(UserError, match=field):
            await checkpointer.record_intent(ids["run_id"], ids["call_id"], ids["tool_name"])
        with pytest.raises(UserError, match=field):
            await checkpointer.run_effect(
                ids["run_id"],
                ids["call_id"],
                ids["tool_name"],
                lambda _conn: None,
                lambda _value: ToolResultEntry(call_id="c1", output="done"),
            )
        assert await checkpointer.tool_effects("r1") == {}


async def test_long_call_ids_stay_apart_or_are_refused(backend: Backend) -> None:
    """D6: MariaDB's INSERT IGNORE cut two distinct long call ids to one effect."""
    first, second = "c" * 255 + "1", "c" * 255 + "2"
    async with backend.checkpointer() as checkpointer:
        await checkpointer.record_intent("r1", "c" * 255, "tool")  # the limit itself is accepted
        for call_id in (first, second):
            with pytest.raises(UserError, match="call_id is 256 characters long; the limit is 255"):
                await checkpointer.record_intent("r1", call_id, "tool")
        assert list(await checkpointer.tool_effects("r1")) == ["c" * 255]
