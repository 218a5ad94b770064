"""What lovia's own store tests check through its privates, checked on our tables.

lovia 0.9.119's test suite runs against our stores (``tests/test_lovia_suite.py``);
the tests listed as ``private`` in ``tests/peers/lovia_expected_failures.txt`` read
lovia's tables through its private helpers, so they cannot. Each property they
check is here, on the lovia integration's rows in our schema, on every SQL
backend; each test names the lovia test it ports.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lovia import Agent, CheckpointOptions, Runner
from lovia.checkpointer import RunHead
from lovia.messages import Usage
from lovia.testing import ScriptedProvider, text
from lovia.transcript import AssistantTextEntry, InputEntry, ToolCallEntry, ToolResultEntry
from lovia.web.store import ChatStore
from sqlalchemy import Connection, func, select
from sqlalchemy import text as sql
from sqlalchemy.sql import Executable

from backends import SQLITE_KINDS, Backend
from lovia_store import LoviaStoreError, StoredValueError
from lovia_store.db import tables
from lovia_store.db.contents import read_documents
from lovia_store.integrations import lovia as ours


def open_session(backend: Backend) -> ours.SQLSession:
    assert backend.target is not None
    if backend.kind in SQLITE_KINDS:
        return ours.SQLiteSession(backend.target, wal=backend.kind == "sqlite_wal")
    return ours.SQLSession(backend.target)


def open_checkpointer(backend: Backend) -> ours.SQLCheckpointer:
    assert backend.target is not None
    if backend.kind in SQLITE_KINDS:
        return ours.SQLiteCheckpointer(backend.target, wal=backend.kind == "sqlite_wal")
    return ours.SQLCheckpointer(backend.target)


@pytest.fixture
async def session(sql_backend: Backend) -> AsyncIterator[ours.SQLSession]:
    async with open_session(sql_backend) as store:
        yield store


@pytest.fixture
async def checkpointer(sql_backend: Backend) -> AsyncIterator[ours.SQLCheckpointer]:
    async with open_checkpointer(sql_backend) as store:
        yield store


async def rows(store: ours.SQLSession | ours.SQLCheckpointer, query: Executable) -> list[Any]:
    def work(conn: Connection) -> list[Any]:
        return list(conn.execute(query).all())

    return await store.database.read(work)


async def execute(store: ours.SQLSession | ours.SQLCheckpointer, *statements: str) -> None:
    def work(conn: Connection) -> None:
        for statement in statements:
            conn.execute(sql(statement))

    await store.database.write(work)


def head(turns: int = 1, status: str = "running") -> RunHead:
    return RunHead(agent_name="a", usage=Usage(), turns=turns, status=status)  # type: ignore[arg-type]


def contents(entries: list[Any]) -> list[Any]:
    return [getattr(entry, "content", None) for entry in entries]


# -- tests/stores/test_stores.py ---------------------------------------------------------


async def test_run_id_and_meta_are_stored_as_given(session: ours.SQLSession) -> None:
    """Ports test_sqlite_append_persists_run_id_and_meta."""
    chosen = await session.append(
        "u1", [InputEntry(role="user", content="x")], run_id="r1", meta={"k": "v"}
    )
    assert chosen == "r1"
    runs = tables.session_runs
    stored = await rows(
        session, select(runs.c.run_id, runs.c.meta_json).where(runs.c.session_id == "u1")
    )
    assert [(run_id, json.loads(meta)) for run_id, meta in stored] == [("r1", {"k": "v"})]


def _run_with_result(i: int, chars: int = 5_000) -> list[Any]:
    return [
        InputEntry(role="user", content=f"q{i}"),
        ToolCallEntry(call_id=f"c{i}", name="f", arguments="{}"),
        ToolResultEntry(call_id=f"c{i}", output="r" * chars, raw={"big": True}),
        AssistantTextEntry(content=f"a{i}"),
    ]


async def test_a_stored_document_that_is_not_json_is_a_typed_error(
    session: ours.SQLSession,
) -> None:
    await session.append("u1", _run_with_result(0), run_id="r0")
    await execute(session, "UPDATE lovia_messages SET entry_json = 'not json'")
    with pytest.raises(StoredValueError, match="lovia_messages"):
        await session.load("u1")


def _result_row(run_id: str) -> Executable:
    messages = tables.messages
    return select(messages.c.entry_json).where(
        messages.c.run_id == run_id, messages.c.entry_type == "tool_result"
    )


async def test_a_trim_that_fails_midway_keeps_nothing_of_it(session: ours.SQLSession) -> None:
    """Ports test_sqlite_trim_rolls_back_partial_writes_on_error."""
    for i in range(3):
        await session.append("u1", _run_with_result(i), run_id=f"r{i}")
    # Cut short, so still long enough to be trimmed, but no longer JSON.
    await execute(
        session,
        "UPDATE lovia_messages SET entry_json = SUBSTR(entry_json, 1, LENGTH(entry_json) - 2) "
        "WHERE run_id = 'r1' AND entry_type = 'tool_result'",
    )
    with pytest.raises(ValueError):
        await session.trim_tool_results("u1", keep_runs=0)
    # A later write must not carry any of the failed trim with it.
    await session.append("u1", [InputEntry(role="user", content="later")], run_id="r3")
    [(r0,)] = await rows(session, _result_row("r0"))
    # Stored compressed (its output shared): read as the stores read it.
    [text] = await session.database.read(lambda conn: read_documents(conn, "", [r0]))
    assert json.loads(text)["output"] == "r" * 5_000


async def test_a_head_only_append_adds_no_entry_row(checkpointer: ours.SQLCheckpointer) -> None:
    """Ports test_checkpointer_head_only_append_adds_no_turn_row."""
    await checkpointer.append("r1", [InputEntry(role="user", content="hi")], head(turns=1))
    await checkpointer.append("r1", [], head(turns=1, status="completed"))
    snap = await checkpointer.load("r1")
    assert snap is not None and snap.status == "completed"
    assert contents(snap.entries) == ["hi"]
    entries = tables.run_entries
    assert await rows(checkpointer, select(func.count()).select_from(entries)) == [(1,)]


async def test_a_checkpoint_append_that_fails_midway_stores_its_delta_once(
    sql_backend: Backend, checkpointer: ours.SQLCheckpointer
) -> None:
    """Ports test_sqlite_checkpointer_append_rolls_back_partial_writes: lovia renames
    its head table; here a trigger refuses the delta's second entry, after its first
    entry (and the head) were written in the same transaction."""
    await checkpointer.append("r1", [InputEntry(role="user", content="one")], head(turns=1))
    create, drop = _refusing_trigger(sql_backend.kind, position=2)
    await execute(checkpointer, *create)
    delta = [InputEntry(role="user", content="two"), AssistantTextEntry(content="three")]
    with pytest.raises(LoviaStoreError, match="refused by the test"):
        await checkpointer.append("r1", delta, head(turns=2))
    await execute(checkpointer, *drop)
    # The retry (lovia's save_terminal repeats the same delta) stores it exactly once.
    await checkpointer.append("r1", delta, head(turns=2))
    snap = await checkpointer.load("r1")
    assert snap is not None and snap.turns == 2
    assert contents(snap.entries) == ["one", "two", "three"]


def _refusing_trigger(kind: str, *, position: int) -> tuple[list[str], list[str]]:
    """DDL for a trigger that fails the insert of run entry ``position``, and its removal."""
    if kind in SQLITE_KINDS:
        return (
            [
                "CREATE TRIGGER refuse_entry BEFORE INSERT ON lovia_run_entries "
                f"WHEN NEW.position = {position} "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            ],
            ["DROP TRIGGER refuse_entry"],
        )
    if kind == "mariadb":
        return (
            [
                "CREATE TRIGGER refuse_entry BEFORE INSERT ON lovia_run_entries FOR EACH ROW "
                f"BEGIN IF NEW.position = {position} THEN "
                "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; "
                "END IF; END"
            ],
            ["DROP TRIGGER refuse_entry"],
        )
    return (
        [
            "CREATE FUNCTION refuse_entry() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN IF NEW.position = {position} THEN "
            "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER refuse_entry BEFORE INSERT ON lovia_run_entries "
            "FOR EACH ROW EXECUTE FUNCTION refuse_entry()",
        ],
        ["DROP TRIGGER refuse_entry ON lovia_run_entries", "DROP FUNCTION refuse_entry()"],
    )


async def test_non_ascii_is_stored_verbatim(
    session: ours.SQLSession, checkpointer: ours.SQLCheckpointer
) -> None:
    """Ports test_sqlite_stores_keep_non_ascii_verbatim: CJK stored unescaped."""
    await session.append(
        "u1", [InputEntry(role="user", content="你好世界")], run_id="r1", meta={"备注": "中文"}
    )
    await checkpointer.append("r1", [AssistantTextEntry(content="答案是四十二")], head())
    [(entry,)] = await rows(session, select(tables.messages.c.entry_json))
    [(meta,)] = await rows(session, select(tables.session_runs.c.meta_json))
    [(step,)] = await rows(checkpointer, select(tables.run_entries.c.entry_json))
    assert "你好世界" in entry and "中文" in meta and "答案是四十二" in step
    [segment] = await session.segments("u1")
    assert contents(segment.entries) == ["你好世界"] and segment.meta == {"备注": "中文"}


async def test_another_stores_version_row_is_left_alone(
    sql_backend: Backend, session: ours.SQLSession
) -> None:
    """Ports test_stores_sharing_a_file_keep_their_own_version: a version row of a
    store that is not ours (lovia's web UI keeps 'chat' there) is neither judged
    nor changed when our stores open the database."""
    await session.load("u1")  # our schema exists
    versions = tables.schema_versions

    def add(conn: Connection) -> None:
        conn.execute(versions.insert().values(store="items", version=2))

    await session.database.write(add)
    async with open_session(sql_backend) as reopened, open_checkpointer(sql_backend) as steps:
        await reopened.append("u1", [InputEntry(role="user", content="hi")], run_id="r1")
        await steps.append("r1", [InputEntry(role="user", content="hi")], head())
        stored = await rows(reopened, select(versions.c.version).where(versions.c.store == "items"))
    assert stored == [(2,)]


# -- tests/test_appendonly_persistence.py ------------------------------------------------


def _runs_of(session_id: str) -> Executable:
    runs = tables.session_runs
    return select(runs.c.run_id).where(runs.c.session_id == session_id).order_by(runs.c.position)


async def test_each_run_is_its_own_segment_row(session: ours.SQLSession) -> None:
    """Ports test_session_persists_each_run_as_its_own_segment."""
    agent = Agent(name="a", model=ScriptedProvider([text("hi"), text("Mei")]))
    await Runner.run(agent, "I'm Mei", session=session, session_id="u1")
    await Runner.run(agent, "my name?", session=session, session_id="u1")
    stored = [row.run_id for row in await rows(session, _runs_of("u1"))]
    assert len(set(stored)) == 2
    assert stored == [segment.run_id for segment in await session.segments("u1")]
    assert contents(await session.load("u1")) == ["I'm Mei", "hi", "my name?", "Mei"]


async def test_a_resumed_run_appends_its_delta_once(
    session: ours.SQLSession, checkpointer: ours.SQLCheckpointer
) -> None:
    """Ports test_resume_reloads_history_and_appends_run_delta_once."""
    agent = Agent(name="a", model=ScriptedProvider([text("hello")]))
    await Runner.run(agent, "hi", session=session, session_id="u1")
    [seeded] = [row.run_id for row in await rows(session, _runs_of("u1"))]
    await checkpointer.append(
        "r1", [InputEntry(role="user", content="again")], head(status="interrupted")
    )
    result = await Runner.run(
        Agent(name="a", model=ScriptedProvider([text("recovered")])),
        [],
        session=session,
        session_id="u1",
        checkpoint=CheckpointOptions(checkpointer, "r1", if_run_exists="resume_only"),
    )
    assert result.output == "recovered"
    assert contents(result.entries) == ["again", "recovered"]
    assert [row.run_id for row in await rows(session, _runs_of("u1"))] == [seeded, "r1"]
    assert contents(await session.load("u1")) == ["hi", "hello", "again", "recovered"]


async def test_a_checkpoint_grows_append_by_append(checkpointer: ours.SQLCheckpointer) -> None:
    """Ports test_sqlite_checkpoint_appends_turns_incrementally: entries are appended,
    never rewritten, under one head row (our rows are per entry, lovia's per append)."""
    entries, heads = tables.run_entries, tables.run_heads
    log = select(entries.c.position, entries.c.entry_json).where(entries.c.run_id == "r1")
    await checkpointer.append("r1", [InputEntry(role="user", content="a")], head(turns=1))
    before = await rows(checkpointer, log.order_by(entries.c.position))
    await checkpointer.append(
        "r1", [AssistantTextEntry(content="b")], head(turns=2, status="completed")
    )
    after = await rows(checkpointer, log.order_by(entries.c.position))
    [(first, _)] = before
    assert [position for position, _ in after] == [first, first + 1]
    assert after[:1] == before
    one_head = select(func.count()).select_from(heads).where(heads.c.run_id == "r1")
    assert await rows(checkpointer, one_head) == [(1,)]
    snap = await checkpointer.load("r1")
    assert snap is not None and snap.status == "completed" and snap.turns == 2
    assert contents(snap.entries) == ["a", "b"]
    await checkpointer.delete("r1")
    assert await checkpointer.load("r1") is None
    assert await rows(checkpointer, log) == []


# -- tests/web/test_fork.py --------------------------------------------------------------


async def test_a_fork_whose_source_is_deleted_midway_leaves_no_rows(
    session: ours.SQLSession,
    checkpointer: ours.SQLCheckpointer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    """Ports test_a_source_deleted_mid_fork_publishes_nothing: lovia's web UI forks a
    chat whose source is deleted between the read and the publish; no transcript
    row of either chat is left in our tables."""
    store = ChatStore(session, meta_path=tmp_path / "meta.db", checkpointer=checkpointer)
    await store.upsert("src", agent="bot", title="Source")
    await session.append(
        "src",
        [InputEntry(role="user", content="q1"), AssistantTextEntry(content="a1")],
        run_id="r1",
        meta={"context_state": {"v": 1}},
    )
    read = session.segments

    async def read_then_delete(session_id: str) -> Any:
        segments = await read(session_id)
        await store.delete("src")  # lands between the snapshot and the publish
        return segments

    monkeypatch.setattr(session, "segments", read_then_delete)
    with pytest.raises(LookupError):
        await store.fork("src")
    monkeypatch.undo()
    assert await rows(session, select(tables.messages.c.session_id)) == []
    assert await rows(session, select(tables.session_runs.c.session_id)) == []
    assert await store.list() == []
