"""Issue 18's D4, D5, D8 and D11, one named case each, on every backend.

What a store cannot give back exactly it refuses with ``UserError`` before any
SQL, the in-memory stores alike (D4, D5, D11); what another program damaged in a
stored row is a ``StoredValueError`` naming the row (D8). The property-based
``test_properties.py`` explores the same ground at random; these pin the cases
the issue names.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from backends import SQLITE_KINDS, Backend
from lovia_store import (
    AssistantTextEntry,
    InMemoryCheckpointer,
    InMemorySession,
    InputEntry,
    MessageTiming,
    ReasoningEntry,
    RunHead,
    SQLCheckpointer,
    SQLiteCheckpointer,
    SQLiteSession,
    StoredValueError,
    TextPart,
    ToolCallEntry,
    ToolResultEntry,
    UserError,
)


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"k": value}
    return value


def checkpointer(backend: Backend) -> Any:
    if backend.kind == "memory":
        return InMemoryCheckpointer()
    assert backend.target is not None
    if backend.kind in SQLITE_KINDS:
        return SQLiteCheckpointer(backend.target, wal=backend.kind == "sqlite_wal")
    return SQLCheckpointer(backend.target)


@pytest.fixture
async def session(backend: Backend) -> AsyncIterator[Any]:
    async with backend.session() as store:
        yield store


BAD_ENTRIES = {
    "nan in a tool result's raw": ToolResultEntry(call_id="c", output="o", raw=math.nan),
    "infinity in reasoning metadata": ReasoningEntry(content="r", metadata={"x": math.inf}),
    "a lone surrogate in text": AssistantTextEntry(content="\ud800"),
    "a lone surrogate in a key": ReasoningEntry(content="r", metadata={"\udc00": 1}),
    "nesting past 200 levels": ToolResultEntry(call_id="c", output="o", raw=[deep(200)]),
}
BAD_META = {
    "nan": {"x": math.nan},
    "a lone surrogate": {"x": "\ud800"},
    "a lone surrogate in a key": {"\ud800": 1},
    "10,000 levels": deep(10_000),
    "201 levels": deep(201),
}


@pytest.mark.parametrize("entry", BAD_ENTRIES.values(), ids=BAD_ENTRIES)
async def test_an_entry_that_would_not_read_back_is_refused_everywhere(
    session: Any, entry: Any
) -> None:
    await session.append("u1", [InputEntry(role="user", content="kept")], run_id="r0")
    with pytest.raises(UserError):
        await session.append("u1", [InputEntry(role="user", content="x"), entry], run_id="r1")
    assert [s.run_id for s in await session.segments("u1")] == ["r0"]
    await session.append("u1", [InputEntry(role="user", content="next")], run_id="r2")


@pytest.mark.parametrize("meta", BAD_META.values(), ids=BAD_META)
async def test_meta_that_would_not_read_back_is_refused_everywhere(session: Any, meta: Any) -> None:
    with pytest.raises(UserError):
        await session.append("u1", [], run_id="r1", meta=meta)
    assert await session.segments("u1") == []


async def test_the_deepest_meta_accepted_reads_back(session: Any) -> None:
    await session.append("u1", [], run_id="r1", meta=deep(200))
    [segment] = await session.segments("u1")
    assert segment.meta == deep(200)


@pytest.mark.parametrize("entries", [None, "abc", 5, {"type": "input"}])
async def test_entries_of_the_wrong_type_are_a_user_error(session: Any, entries: Any) -> None:
    with pytest.raises(UserError, match="entries"):
        await session.append("u1", entries, run_id="r1")


BAD_HEADS = {
    "nan started_at": RunHead(agent_name="a", started_at=math.nan),
    "nan in output": RunHead(agent_name="a", output={"x": math.nan}),
    "a lone surrogate in agent_name": RunHead(agent_name="\ud800"),
    "a lone surrogate in a key": RunHead(agent_name="a", context_state={"\ud800": 1}),
}


@pytest.mark.parametrize("head", BAD_HEADS.values(), ids=BAD_HEADS)
async def test_a_head_that_would_not_read_back_is_refused_everywhere(
    backend: Backend, head: RunHead
) -> None:
    async with checkpointer(backend) as store:
        with pytest.raises(UserError):
            await store.append("r1", [InputEntry(role="user", content="x")], head)
        assert await store.load("r1") is None
        with pytest.raises(UserError, match="entries"):
            await store.append("r1", None, RunHead(agent_name="a"))
        big = RunHead(agent_name="a", turns=2**70)
        await store.append("r1", [ToolResultEntry(call_id="c", output="o", raw=2**80)], big)
        snapshot = await store.load("r1")
        assert snapshot is not None and snapshot.turns == 2**70
        assert snapshot.entries[0].raw == 2**80  # type: ignore[union-attr]


# A store that encodes leaves lone surrogates in strings to pydantic's encoder
# (encode_entries): wherever a string sits, it must be refused as check_entries
# refuses it, and the first mistake of a call named in the same words everywhere.
SURROGATES = {
    "text": [AssistantTextEntry(content="数据\ud800")],
    "an id": [AssistantTextEntry(content="c", id="\udfff")],
    "tool call arguments": [ToolCallEntry(call_id="c", name="n", arguments="é\ud800")],
    "an input's text part": [InputEntry(role="user", content=[TextPart(text="\ud800")])],
    "a raw list": [ToolResultEntry(call_id="c", output="o", raw=[1, "\ud800"])],
    "a nested metadata value": [ReasoningEntry(content="r", metadata={"k": {"j": "\udc00"}})],
    "a nested metadata key": [ReasoningEntry(content="r", metadata={"k": {"\udc00": 1}})],
}
FIRST_MISTAKES = {
    "a lone surrogate before a nan": [
        AssistantTextEntry(content="数\ud800"),
        ToolResultEntry(call_id="c", output="o", raw=math.nan),
    ],
    "a nan before a lone surrogate": [
        ToolResultEntry(call_id="c", output="o", raw=math.nan),
        AssistantTextEntry(content="数\ud800"),
    ],
    "a lone surrogate before a non-entry": [AssistantTextEntry(content="\ud800"), "not one"],
}
BAD_RUNS = {**SURROGATES, **FIRST_MISTAKES}


async def refusal(call: Any) -> str:
    with pytest.raises(UserError) as caught:
        await call
    return str(caught.value)


@pytest.mark.parametrize("entries", BAD_RUNS.values(), ids=BAD_RUNS)
async def test_every_session_store_names_a_runs_first_mistake_alike(
    session: Any, entries: list[Any]
) -> None:
    meta = {"bad": math.nan}  # checked after the entries, so never the one named
    expected = await refusal(InMemorySession().append("u1", entries, run_id="r1", meta=meta))
    assert "entries[" in expected
    assert await refusal(session.append("u1", entries, run_id="r1", meta=meta)) == expected
    assert await session.segments("u1") == []


@pytest.mark.parametrize("entries", BAD_RUNS.values(), ids=BAD_RUNS)
async def test_every_checkpointer_names_a_steps_first_mistake_alike(
    backend: Backend, entries: list[Any]
) -> None:
    head = RunHead(agent_name="\ud800")  # checked after the entries
    expected = await refusal(InMemoryCheckpointer().append("r1", entries, head))
    async with checkpointer(backend) as store:
        assert await refusal(store.append("r1", entries, head)) == expected
        ok = [InputEntry(role="user", content="x")]
        expected = await refusal(InMemoryCheckpointer().append("r1", ok, head))
        assert await refusal(store.append("r1", ok, head)) == expected
        assert await store.load("r1") is None


NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_the_raw_log_refuses_what_it_could_not_store_or_read_back(
    sql_backend: Backend,
) -> None:
    async with sql_backend.storage() as storage:
        for title in ("a\x00b", "a\ud800"):
            with pytest.raises(UserError, match="title"):
                await storage.create_session(session_id="s", title=title)
        with pytest.raises(UserError, match="session_type"):
            await storage.create_session(session_id="s", session_type=2**31)
        await storage.create_session(session_id="s", session_type=2**31 - 1)
        message = AssistantTextEntry(content="x")
        timing = MessageTiming(started_at=NOW, completed_at=NOW, duration_ns=2**63)
        with pytest.raises(UserError, match="duration_ns"):
            await storage.append("s", "q", message, timing=timing)
        for bad in ({"x": math.nan}, {"\ud800": 1}, deep(1_100), deep(201)):
            with pytest.raises(UserError, match="metadata"):
                await storage.append("s", "q", message, metadata=bad)
        with pytest.raises(UserError):
            await storage.append("s", "q", ToolResultEntry(call_id="c", output="o", raw=math.nan))
        assert await storage.list_raw_messages("s") == []
        sequence = await storage.append("s", "q", message, metadata=deep(200), tags={"n": 2**70})
        [record] = await storage.list_raw_messages("s")
        assert record.sequence == sequence
        assert (record.metadata, record.tags) == (deep(200), {"n": 2**70})


# -- D8: damaged rows ---------------------------------------------------------------------

DAMAGE = {
    "broken JSON": "'{\"type\": '",
    "not an object": "'[1]'",
    "not an entry": '\'{"type": "input"}\'',
}


async def damage(store: Any, *statements: str) -> None:
    def work(conn: Connection) -> None:
        for statement in statements:
            conn.execute(text(statement))

    await store.database.write(work)


@pytest.mark.parametrize("bad", DAMAGE.values(), ids=DAMAGE)
async def test_a_damaged_entry_row_is_a_stored_value_error_naming_it(
    sql_backend: Backend, bad: str
) -> None:
    async with sql_backend.session() as session:
        entries = [InputEntry(role="user", content=f"x{i}") for i in range(3)]
        await session.append("u1", entries, run_id="r0")
        await damage(session, f"UPDATE lovia_messages SET entry_json = {bad} WHERE sequence = 2")
        for read in (session.load, session.segments):
            with pytest.raises(StoredValueError, match="lovia_messages row session_id='u1'"):
                await read("u1")
        with pytest.raises(StoredValueError, match="session_id='u1', sequence=2"):
            async for _ in session.iter_entries("u1"):
                pass
        async with sql_backend.storage() as storage:
            with pytest.raises(StoredValueError, match="session_id='u1', sequence=2"):
                await storage.list_raw_messages("u1")
        # Other sessions are unharmed, and the store keeps working.
        await session.append("u2", [InputEntry(role="user", content="y")], run_id="r1")
        assert await session.load("u2") == [InputEntry(role="user", content="y")]


async def test_damaged_meta_and_checkpoint_rows_are_stored_value_errors(
    sql_backend: Backend,
) -> None:
    async with sql_backend.session() as session, checkpointer(sql_backend) as store:
        await session.append("u1", [], run_id="r0", meta={"k": 1})
        await damage(session, "UPDATE lovia_session_runs SET meta_json = 'nope'")
        with pytest.raises(StoredValueError, match=r"lovia_session_runs row.*run_id=.r0."):
            await session.segments("u1")
        await store.append("r1", [InputEntry(role="user", content="x")], RunHead(agent_name="a"))
        await store.append("r2", [InputEntry(role="user", content="x")], RunHead(agent_name="a"))
        await damage(
            store,
            "UPDATE lovia_run_entries SET entry_json = 'nope' WHERE run_id = 'r1'",
            "UPDATE lovia_run_heads SET head_json = '[]' WHERE run_id = 'r2'",
        )
        with pytest.raises(StoredValueError, match="lovia_run_entries row run_id='r1'"):
            await store.load("r1")
        with pytest.raises(StoredValueError, match="lovia_run_heads row run_id='r2'"):
            await store.load("r2")
        with pytest.raises(StoredValueError, match="lovia_run_heads"):
            await store.list_runs()


async def test_a_damaged_tool_result_a_trim_reads_is_named_by_its_sequence(
    sql_backend: Backend,
) -> None:
    async with sql_backend.session() as session:
        long = "o" * 500
        old_run = [ToolResultEntry(call_id=f"c{i}", output=long) for i in range(3)]
        await session.append("u1", old_run, run_id="r0")
        await session.append("u1", [InputEntry(role="user", content="last")], run_id="r1")
        await damage(
            session, f"UPDATE lovia_messages SET entry_json = '{'x' * 500}' WHERE sequence = 2"
        )
        with pytest.raises(StoredValueError, match="session_id='u1', sequence=2"):
            await session.trim_tool_results("u1", keep_chars=100, keep_runs=1)


@pytest.mark.parametrize("wal", [False, True])
async def test_invalid_utf8_in_an_entry_row_is_a_stored_value_error(
    tmp_path: Path, wal: bool
) -> None:
    """Only SQLite lets a TEXT column hold bytes that are not UTF-8."""
    async with SQLiteSession(tmp_path / "store.sqlite3", wal=wal) as session:
        await session.append("u1", [InputEntry(role="user", content="x")], run_id="r0")
        await damage(session, "UPDATE lovia_messages SET entry_json = CAST(X'7B22FF' AS TEXT)")
        with pytest.raises(StoredValueError, match=r"UnicodeDecodeError.*session_id=.u1."):
            await session.load("u1")
        # Columns sqlite3 reads as text itself: typed too, the value left out.
        await session.append("u2", [], run_id="r1", meta={"k": 1})
        await damage(session, "UPDATE lovia_session_runs SET meta_json = CAST(X'7B22FF' AS TEXT)")
        with pytest.raises(StoredValueError, match=r"not UTF-8.*column meta_json") as caught:
            await session.segments("u2")
        assert "\ufffd" not in str(caught.value)
        await session.append("u3", [InputEntry(role="user", content="ok")], run_id="r2")
        assert await session.load("u3") == [InputEntry(role="user", content="ok")]


@pytest.mark.parametrize("wal", [False, True])
async def test_the_lovia_integration_refuses_a_lone_surrogate_and_deep_recursion(
    tmp_path: Path, wal: bool
) -> None:
    from lovia.transcript import InputEntry as LoviaInput
    from lovia.transcript import ToolResultEntry as LoviaResult

    from lovia_store.integrations import lovia as ours

    async with ours.SQLiteSession(tmp_path / "store.sqlite3", wal=wal) as session:
        for entry in (
            LoviaInput(role="user", content="\ud800"),
            LoviaResult(call_id="c", output="o", raw={"\udc00": 1}),
            LoviaResult(call_id="c", output="o", raw=deep(10_000)),
        ):
            with pytest.raises(UserError):
                await session.append("u1", [entry], run_id="r1")
        assert await session.load("u1") == []
        await session.append("u1", [LoviaInput(role="user", content="ok")], run_id="r1")
        assert len(await session.load("u1")) == 1
