"""lovia's own Runner on lovia-store, through ``lovia_store.integrations.lovia``.

Everything here is the real lovia 0.9.119: its ``Runner``, its entries, its
``ScriptedProvider`` (which pops a queue: a test whose provider has nothing
left fails if the model is called again).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from lovia import Agent, CheckpointOptions, MaxTurnsExceeded, Runner, UserError, tool
from lovia.checkpointer import RunHead
from lovia.messages import Usage
from lovia.parts import ImagePart, TextPart
from lovia.testing import ScriptedProvider, call, text
from lovia.transcript import (
    AssistantTextEntry,
    InputEntry,
    ReasoningEntry,
    ToolCallEntry,
    ToolResultEntry,
    entry_to_dict,
)

import lovia_store
from backends import LEGACY, SQLITE_KINDS, Backend
from lovia_store import Database, SQLSessionStorage
from lovia_store.integrations.lovia import (
    SQLCheckpointer,
    SQLiteCheckpointer,
    SQLiteSession,
    SQLSession,
)

HERE = Path(__file__).resolve().parent


@tool
def weather(city: str) -> str:
    """Current weather for a city."""
    return f"rain in {city}"


@pytest.fixture
async def stores(sql_backend: Backend) -> AsyncIterator[tuple[SQLSession, SQLCheckpointer]]:
    """lovia's session and checkpointer on one shared Database of this backend."""
    assert sql_backend.target is not None
    wal = sql_backend.kind == "sqlite_wal"
    db = Database(sql_backend.target, wal=wal) if sql_backend.kind in SQLITE_KINDS else None
    db = db or Database(sql_backend.target)
    async with db:
        yield SQLSession(db), SQLCheckpointer(db)


def agent(*turns: Any, tools: list[Any] | None = None, name: str = "bot") -> Agent[Any]:
    return Agent(name=name, model=ScriptedProvider(list(turns)), tools=tools or [weather])


async def test_the_next_run_sees_the_history(stores: tuple[SQLSession, SQLCheckpointer]) -> None:
    session, cp = stores
    bot = agent(call("weather", {"city": "Zürich"}), text("Umbrella."), text("Zürich."))
    first = await Runner.run(
        bot, "Weather in Zürich?", session=session, session_id="u1", checkpoint=_opts(cp, "r1")
    )
    assert first.output == "Umbrella."
    second = await Runner.run(bot, "Which city?", session=session, session_id="u1")
    assert second.output == "Zürich."
    seen = bot.model.calls[-1]  # what the model was sent on the second run
    assert [m.role for m in seen] == ["user", "assistant", "tool", "assistant", "user"]
    assert seen[0].content == "Weather in Zürich?" and seen[2].content == "rain in Zürich"
    segments = await session.segments("u1")
    assert segments[0].run_id == "r1" and len(segments) == 2
    assert set(segments[0].meta["timing"]) == {"started_at", "finished_at"}  # type: ignore[index]


async def test_a_completed_run_replays_without_the_model(
    stores: tuple[SQLSession, SQLCheckpointer],
) -> None:
    session, cp = stores
    done = await Runner.run(
        agent(text("Once.")), "go", session=session, session_id="s", checkpoint=_opts(cp, "job")
    )
    # An empty script: calling the model would fail the run.
    again = await Runner.run(
        agent(), "ignored", session=session, session_id="s", checkpoint=_opts(cp, "job")
    )
    assert again.output == done.output == "Once."
    assert len(await session.segments("s")) == 1
    snapshot = await cp.load("job")
    assert snapshot is not None and snapshot.status == "completed"
    assert snapshot.usage.clone() == snapshot.usage


async def test_if_run_exists_policies(stores: tuple[SQLSession, SQLCheckpointer]) -> None:
    _, cp = stores
    await Runner.run(agent(text("first")), "go", checkpoint=_opts(cp, "p"))
    with pytest.raises(UserError, match="already exists"):
        await Runner.run(agent(text("x")), "go", checkpoint=_opts(cp, "p", if_run_exists="fail"))
    with pytest.raises(UserError, match="No snapshot"):
        await Runner.run(agent(), [], checkpoint=_opts(cp, "none", if_run_exists="resume_only"))
    restarted = await Runner.run(
        agent(text("second")), "go", checkpoint=_opts(cp, "p", if_run_exists="restart")
    )
    assert restarted.output == "second"
    snapshot = await cp.load("p")
    assert snapshot is not None and snapshot.output == "second"
    assert [e.content for e in snapshot.entries if isinstance(e, AssistantTextEntry)] == ["second"]


async def test_delete_on_success_drops_the_snapshot_after_the_session_append(
    stores: tuple[SQLSession, SQLCheckpointer],
) -> None:
    session, cp = stores
    await Runner.run(
        agent(text("kept in the session")),
        "go",
        session=session,
        session_id="d",
        checkpoint=_opts(cp, "gone", delete_on_success=True),
    )
    assert await cp.load("gone") is None
    assert [s.run_id for s in await session.segments("d")] == ["gone"]


async def test_an_interrupted_handoff_resumes_as_the_target_by_name(
    stores: tuple[SQLSession, SQLCheckpointer],
) -> None:
    _, cp = stores

    def graph() -> Agent[Any]:
        spanish = Agent(name="Spanish", model=ScriptedProvider([text("¡Hola!")]))
        return Agent(
            name="English",
            model=ScriptedProvider([call("transfer_to_spanish", {"reason": "Spanish"})]),
            handoffs=[spanish],
        )

    with pytest.raises(MaxTurnsExceeded):
        await Runner.run(graph(), "Hola", checkpoint=_opts(cp, "h"), max_turns=1)
    stopped = await cp.load("h")
    assert stopped is not None and stopped.status == "interrupted"
    assert stopped.agent_name == "Spanish"
    resumed = await Runner.run(graph(), [], checkpoint=_opts(cp, "h", if_run_exists="resume_only"))
    assert resumed.output == "¡Hola!" and resumed.final_agent.name == "Spanish"


async def test_both_apis_read_the_same_rows(stores: tuple[SQLSession, SQLCheckpointer]) -> None:
    session, _ = stores
    entries = [
        InputEntry(role="user", content=[TextPart(text="look"), ImagePart(url="https://x/y.png")]),
        ReasoningEntry(content="hm", provider="anthropic", metadata={"signature": "s1"}),
        ToolCallEntry(call_id="c1", name="weather", arguments='{"city": "Oslo"}'),
        ToolResultEntry(call_id="c1", output="snow", raw={"deg": -3}),
        AssistantTextEntry(content="Snow.", id="msg_1"),
    ]
    await session.append("both", entries, run_id="lovia-run", meta={"k": [1, {"x": None}]})
    native = lovia_store.SQLSession(session.database)
    assert [lovia_store.entry_to_dict(e) for e in await native.load("both")] == [
        entry_to_dict(e) for e in entries
    ]
    raw = SQLSessionStorage(session.database)
    assert await raw.count_messages("both") == 5
    await native.append("both", [lovia_store.InputEntry(role="user", content="more")], run_id="n")
    loaded = await session.load("both")
    assert isinstance(loaded[-1], InputEntry) and loaded[-1].content == "more"
    assert [entry_to_dict(e) for e in loaded[:5]] == [entry_to_dict(e) for e in entries]
    (first, second) = await session.segments("both")
    assert first.meta == {"k": [1, {"x": None}]} and second.run_id == "n"


async def test_objects_that_are_not_lovia_s_are_refused_clearly(
    stores: tuple[SQLSession, SQLCheckpointer],
) -> None:
    session, cp = stores
    with pytest.raises(lovia_store.UserError, match="not a lovia transcript entry"):
        await session.append("s", [lovia_store.InputEntry(role="user", content="ours")])
    head = lovia_store.RunHead(agent_name="a")
    with pytest.raises(lovia_store.UserError, match=r"lovia\.checkpointer\.RunHead"):
        await cp.append("r", [], head)  # type: ignore[arg-type]
    with pytest.raises(lovia_store.UserError, match="meta"):
        await session.append("s", [], meta={"x": float("nan")})
    assert await session.load("s") == [] and await cp.load("r") is None


async def test_trim_and_rewind_have_lovia_s_semantics(
    stores: tuple[SQLSession, SQLCheckpointer],
) -> None:
    session, _ = stores
    big = "x" * 2000
    await session.append(
        "t",
        [ToolCallEntry("c1", "dump", "{}"), ToolResultEntry("c1", big, raw={"big": True})],
        run_id="r1",
    )
    await session.append("t", [InputEntry("user", "next")], run_id="r2")
    assert await session.trim_tool_results("t", keep_chars=10, keep_runs=1) == 1
    assert await session.trim_tool_results("t", keep_chars=10, keep_runs=1) == 0
    result = (await session.load("t"))[1]
    assert isinstance(result, ToolResultEntry) and result.raw is None
    assert result.output == "x" * 10 + (
        "\n[... 1,990 chars trimmed from stored history; "
        'recall_tool_result("c1") returns the full output '
        "only if it was archived to a result store]"
    )
    # A cut between a call and its result drops the dangling call too.
    assert await session.rewind("t", keep_entries=1) == 3
    assert await session.load("t") == []


async def test_the_lovia_fixture_file_reads_back_through_the_integration(
    legacy_copy: Callable[[str], Path],
) -> None:
    manifest = json.loads((LEGACY / "lovia-0.9.119.manifest.json").read_text())
    path = legacy_copy("lovia-0.9.119.sqlite3")
    async with SQLiteSession(path, wal=True) as session, SQLiteCheckpointer(path) as cp:
        for stored in manifest["sessions"]:
            segments = await session.segments(stored["session_id"])
            assert [
                {
                    "run_id": s.run_id,
                    "entries": [entry_to_dict(e) for e in s.entries],
                    "meta": s.meta,
                }
                for s in segments
            ] == [{k: run[k] for k in ("run_id", "entries", "meta")} for run in stored["runs"]]
        for checkpoint in manifest["checkpoints"]:
            snapshot = await cp.load(checkpoint["run_id"])
            assert snapshot is not None and snapshot.to_dict() == checkpoint["snapshot"]


async def test_a_chat_store_file_of_lovia_s_web_ui_opens_and_keeps_working(tmp_path: Path) -> None:
    """lovia's ``ChatStore.sqlite`` keeps a ``chat`` row in ``lovia_schema``; it is not ours
    to judge, so the file opens, and lovia's ChatStore goes on using it with our stores."""
    from lovia.web.store import ChatStore

    path = tmp_path / "chat.sqlite3"
    original = ChatStore.sqlite(path)
    await original.upsert("c1", title="Atlas", agent="bot")
    await original.session.append("c1", [InputEntry("user", "hello")], run_id="w1")
    head = RunHead(agent_name="bot", usage=Usage(3, 4), turns=1, status="interrupted")
    await original.checkpointer.append("w1-live", [InputEntry("user", "hi")], head)

    session, cp = SQLiteSession(path, wal=True), SQLiteCheckpointer(path, wal=True)
    async with session, cp:
        assert [e.content for e in await session.load("c1")] == ["hello"]  # type: ignore[union-attr]
        snapshot = await cp.load("w1-live")
        assert snapshot is not None and snapshot.usage.input_tokens == 3
        store = ChatStore(session, meta_path=path, checkpointer=cp, wal=True)
        meta = await store.get("c1")
        assert meta is not None and meta.title == "Atlas"
        await store.upsert("c2", title="Second", agent="bot")
        assert {m.id for m in await store.list()} == {"c1", "c2"}


def test_importing_without_lovia_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['lovia'] = None\n"
        "try:\n    import lovia_store.integrations.lovia\n"
        "except ImportError as exc:\n    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "MissingDriverError" in done.stdout and "lovia-store[lovia]" in done.stdout


def _opts(cp: Any, run_id: str, **options: Any) -> CheckpointOptions:
    return CheckpointOptions(cp, run_id, **options)


# -- lovia-store's native stores handed to lovia's Runner ---------------------------


def _native_session(kind: str, path: Path) -> Any:
    return (
        lovia_store.SQLiteSession(path)
        if kind == "SQLiteSession"
        else lovia_store.InMemorySession()
    )


def _native_checkpointer(kind: str, path: Path) -> Any:
    if kind == "SQLiteCheckpointer":
        return lovia_store.SQLiteCheckpointer(path)
    return lovia_store.InMemoryCheckpointer()


def _counted_tool(ran: list[str]) -> Any:
    @tool
    def weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(city)
        return f"rain in {city}"

    return weather


@pytest.mark.parametrize("kind", ["SQLiteSession", "InMemorySession"])
async def test_lovias_runner_refuses_a_native_session_before_the_model_is_called(
    tmp_path: Path, kind: str
) -> None:
    """README's first import handed to lovia's Runner: refused before any work, naming the
    drop-in (it used to run the whole turn, then fail at the session append)."""
    ran: list[str] = []
    bot = agent(call("weather", {"city": "Oslo"}), text("Rain."), tools=[_counted_tool(ran)])
    native = _native_session(kind, tmp_path / "chat.db")
    with pytest.raises(lovia_store.ForeignRunnerError) as caught:
        await Runner.run(bot, "Weather in Oslo?", session=native, session_id="u1")
    assert bot.model.calls == [] and ran == []  # the model was never called, no tool ran
    message = str(caught.value)
    assert f"lovia_store.{kind}" in message and "lovia_store.integrations.lovia" in message
    assert isinstance(caught.value, lovia_store.UserError)
    assert await native.segments("u1") == []  # outside a lovia run it reads as always
    await native.close()


async def test_after_the_refusal_the_same_file_runs_through_the_drop_in(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    async with lovia_store.SQLiteSession(path) as native:
        with pytest.raises(lovia_store.ForeignRunnerError):
            await Runner.run(agent(text("never")), "hi", session=native, session_id="u1")
    async with SQLiteSession(path) as session:
        done = await Runner.run(agent(text("Hello.")), "hi", session=session, session_id="u1")
    assert done.output == "Hello."
    async with lovia_store.SQLiteSession(path) as native:
        assert [type(e).__name__ for e in await native.load("u1")] == [
            "InputEntry",
            "AssistantTextEntry",
        ]


@pytest.mark.parametrize("policy", ["resume", "restart"])
@pytest.mark.parametrize("kind", ["SQLiteCheckpointer", "InMemoryCheckpointer"])
async def test_lovias_runner_refuses_a_native_checkpointer_before_the_model_is_called(
    tmp_path: Path, kind: str, policy: str
) -> None:
    """lovia loads (or, to restart, deletes) the run first and writes it only after the
    first model turn: the native checkpointer refuses at that first call."""
    ran: list[str] = []
    bot = agent(call("weather", {"city": "Oslo"}), text("Rain."), tools=[_counted_tool(ran)])
    cp = _native_checkpointer(kind, tmp_path / "runs.db")
    options = _opts(cp, "r1", if_run_exists=policy)
    with pytest.raises(lovia_store.ForeignRunnerError) as caught:
        await Runner.run(bot, "Weather in Oslo?", checkpoint=options)
    assert bot.model.calls == [] and ran == []
    message = str(caught.value)
    assert f"lovia_store.{kind}" in message and "lovia_store.integrations.lovia" in message
    assert await cp.load("r1") is None
    await cp.close()


async def test_native_stores_beside_lovias_runner_keep_working(tmp_path: Path) -> None:
    """Only a store lovia's Runner drives is refused: the drop-in's checkpointer (which
    deletes through the native one) restarts a run, lovia-store's own Runner runs
    inside a lovia tool on native stores, and native stores read as always after a run."""
    path = tmp_path / "chat.db"
    native_session = lovia_store.SQLiteSession(path)
    native_cp = lovia_store.SQLiteCheckpointer(path)
    inner = lovia_store.Agent(
        "inner", lovia_store.ScriptedModel([[lovia_store.AssistantTextEntry(content="inner")]])
    )

    @tool
    async def nested() -> str:
        """Runs lovia-store's own Runner on native stores."""
        done = await lovia_store.Runner.run(
            inner,
            "go",
            session=native_session,
            session_id="native",
            checkpoint=lovia_store.CheckpointOptions(native_cp, "inner-run"),
        )
        return str(done.final_output)

    async with SQLiteSession(path) as session, SQLiteCheckpointer(path) as cp:
        await Runner.run(agent(text("first")), "go", checkpoint=_opts(cp, "outer"))
        outer = agent(call("nested", {}), text("Done."), tools=[nested])
        options = _opts(cp, "outer", if_run_exists="restart")
        done = await Runner.run(outer, "go", session=session, session_id="u1", checkpoint=options)
    assert done.output == "Done."
    assert [s.run_id for s in await native_session.segments("native")] == ["inner-run"]
    snapshot = await native_cp.load("inner-run")
    assert snapshot is not None and snapshot.status == "completed"
    await native_session.close()
    await native_cp.close()
