"""Declared effect modes under crashes: what each one guarantees, with real SIGKILLs.

A worker is killed inside the tool (before or after its effect, or inside the
transaction that records it); the same call is then issued again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from backends import fresh_server_database, pooled_url
from lovia_store import (
    Agent,
    AssistantTextEntry,
    CheckpointOptions,
    Database,
    InMemoryCheckpointer,
    Runner,
    ScriptedModel,
    SQLiteCheckpointer,
    ToolCallEntry,
    ToolContext,
    UserError,
    function_tool,
)

CHILD = Path(__file__).with_name("effects_child.py")
KEY = "pay-run:pay"

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A SQLite file, a new PostgreSQL database, and one through a transaction pooler."""
    if request.param == "sqlite":
        yield str(tmp_path / "effects.sqlite3")
        return
    async with fresh_server_database("postgres") as made:
        yield pooled_url(made) if request.param == "pgbouncer" else made


def run_child(url: str, mode: str, kill: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), url, mode, kill, str(log)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def crash_then_reissue(url: str, mode: str, kill: str, log: Path) -> dict[str, Any]:
    crashed = run_child(url, mode, kill, log)
    assert crashed.returncode == -9, crashed.stderr
    healed = run_child(url, mode, "none", log)
    assert healed.returncode == 0, healed.stderr
    result: dict[str, Any] = json.loads(healed.stdout)
    return result


def events(log: Path) -> list[str]:
    return log.read_text().splitlines()


def tool_result(result: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in result["entries"] if e["type"] == "tool_result")


async def charges(url: str) -> int:
    async with Database(url) as db:

        def count(conn: Any) -> int:
            return int((conn.execute(text("SELECT count(*) FROM host_charges"))).scalar())

        return await db.read(count)


async def test_at_least_once_runs_a_dangling_call_again(url: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    result = crash_then_reissue(url, "at_least_once", "after_effect", log)
    assert events(log) == [f"start {KEY}", f"effect {KEY}", f"start {KEY}", f"effect {KEY}"]
    assert tool_result(result)["is_error"] is False


async def test_at_most_once_never_runs_a_started_call_again(url: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    result = crash_then_reissue(url, "at_most_once", "after_effect", log)
    assert events(log) == [f"start {KEY}", f"effect {KEY}"]
    outcome = tool_result(result)
    assert outcome["is_error"] is True and "outcome is unknown" in outcome["output"]
    assert result["entries"][-1] == {"type": "assistant_text", "content": "charged", "id": None}


async def test_at_most_once_may_mean_zero_times(url: str, tmp_path: Path) -> None:
    """Killed after the intent was recorded but before the effect: it never happens."""
    log = tmp_path / "log"
    result = crash_then_reissue(url, "at_most_once", "before_effect", log)
    assert events(log) == [f"start {KEY}"]
    assert tool_result(result)["is_error"] is True


async def test_keyed_reruns_with_the_same_idempotency_key(url: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    result = crash_then_reissue(url, "keyed", "after_effect", log)
    keys = {line.split()[1] for line in events(log)}
    assert keys == {KEY} and events(log).count(f"effect {KEY}") == 2
    assert json.loads(tool_result(result)["output"])["key"] == KEY


async def test_a_committed_transactional_effect_is_never_repeated(url: str, tmp_path: Path) -> None:
    """Killed after the effect and its outcome committed together: the outcome is reused."""
    log = tmp_path / "log"
    result = crash_then_reissue(url, "transactional", "after_effect", log)
    assert events(log) == [f"start {KEY}", f"effect {KEY}"]
    assert await charges(url) == 1
    assert json.loads(tool_result(result)["output"]) == {"charged": KEY}


async def test_an_uncommitted_transactional_effect_rolls_back_and_reruns(
    url: str, tmp_path: Path
) -> None:
    """Killed inside the transaction: neither effect nor outcome landed; it runs once more."""
    log = tmp_path / "log"
    result = crash_then_reissue(url, "transactional", "in_transaction", log)
    assert events(log) == [f"start {KEY}", f"effect {KEY}", f"start {KEY}", f"effect {KEY}"]
    assert await charges(url) == 1
    assert tool_result(result)["is_error"] is False


async def test_transaction_needs_a_sql_checkpointer() -> None:
    @function_tool
    async def pay(ctx: ToolContext) -> Any:
        return await ctx.transaction(lambda conn: conn)

    model = ScriptedModel(
        [
            [ToolCallEntry(call_id="p", name="pay", arguments="{}")],
            [AssistantTextEntry(content="x")],
        ]
    )
    result = await Runner.run(
        Agent("a", model, tools=[pay]),
        "go",
        checkpoint=CheckpointOptions(InMemoryCheckpointer(), "r"),
    )
    failed = result.entries[2]
    assert failed.type == "tool_result" and failed.is_error and "SQL checkpointer" in failed.output


async def test_intents_are_recorded_only_where_they_matter(tmp_path: Path) -> None:
    """at-least-once tools skip the extra write; the others commit an intent first."""
    seen: dict[str, list[str]] = {}
    checkpointer = SQLiteCheckpointer(tmp_path / "intents.sqlite3")

    def make(mode: Any) -> Any:
        @function_tool(name=f"t_{mode}", effect=mode)
        async def tool(ctx: ToolContext) -> str:
            effects = await checkpointer.tool_effects(ctx.run_id)
            seen[mode] = sorted(effects)
            return "ok"

        return tool

    modes = ["at_least_once", "at_most_once", "keyed"]
    calls = [ToolCallEntry(call_id=m, name=f"t_{m}", arguments="{}") for m in modes]
    model = ScriptedModel([calls, [AssistantTextEntry(content="done")]])
    await Runner.run(
        Agent("a", model, tools=[make(m) for m in modes]),
        "go",
        checkpoint=CheckpointOptions(checkpointer, "intents"),
    )
    assert seen == {
        "at_least_once": [],
        "at_most_once": ["at_most_once"],
        "keyed": ["at_most_once", "keyed"],
    }
    await checkpointer.delete("intents")
    assert await checkpointer.tool_effects("intents") == {}
    await checkpointer.close()


def test_unknown_effect_mode_is_refused() -> None:
    with pytest.raises(UserError, match="effect must be one of"):
        function_tool(lambda: None, effect="exactly_once")
