"""``database_stats`` and ``lovia-store stats`` on every SQL backend.

The counts are checked against what the test wrote, the largest tool output's size
against the bytes of its stored document read back independently, and the size
against the backend's growth as data is added.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from backends import Backend
from helpers import a_run, call, result, user
from lovia_store import Database, RunHead, SchemaNotCurrentError, SQLSession, UserError, upgrade
from lovia_store.cli import main
from lovia_store.db.tables import messages
from lovia_store.lifecycle.stats import database_stats

Capsys = pytest.CaptureFixture[str]


async def fill(backend: Backend) -> None:
    # Written as plain JSON (compression=False): the sizes below are the outputs' own.
    # Compressed, an output is stored once in lovia_contents and its row is small
    # (tests/test_stored_lifecycle.py counts those).
    assert backend.target is not None
    plain = Database(backend.target, wal=backend.kind == "sqlite_wal", compression=False)
    async with plain, SQLSession(plain) as session:
        await session.append("small", [user("hi")], run_id="r1")
        await session.append("big", a_run("1", output="x" * 5_000), run_id="r1")
        await session.append("big", a_run("2", output="数" * 3_000), run_id="r2")
        await session.append("mid", [call("m"), result("m", "y" * 100)], run_id="r1")
    async with backend.storage() as storage:
        await storage.create_session(session_id="titled", title="Trip plans")
        await storage.append("titled", "req", user("where to?"))
    async with backend.checkpointer() as checkpointer:
        for n, status in enumerate(
            ["running", "interrupted", "interrupted", "completed", "failed"]
        ):
            head = RunHead(agent_name="a", status=status)  # type: ignore[arg-type]
            await checkpointer.append(f"run-{n}", [user("q")], head)


async def stored_bytes(target: str, session_id: str, sequence: int) -> int:
    async with Database(target) as db:

        def work(conn: Any) -> int:
            query = select(messages.c.entry_json).where(
                messages.c.session_id == session_id, messages.c.sequence == sequence
            )
            document = conn.execute(query).scalar_one()
            return len(document.encode() if isinstance(document, str) else document)

        return await db.read(work)


async def test_counts_sizes_and_the_largest(sql_backend: Backend) -> None:
    assert sql_backend.target is not None
    await upgrade(sql_backend.target)  # stats never migrates
    empty = await database_stats(sql_backend.target)
    assert (empty.sessions, empty.messages, empty.runs_in_flight, empty.finished_runs) == (0,) * 4
    assert empty.largest_sessions == [] and empty.largest_tool_outputs == []
    await fill(sql_backend)
    stats = await database_stats(sql_backend.target, top=3)
    assert stats.backend in ("sqlite", "postgresql", "mysql")
    assert (stats.sessions, stats.messages) == (4, 1 + 8 + 2 + 1)
    assert (stats.runs_in_flight, stats.finished_runs) == (3, 2)
    assert stats.size_bytes == sum(stats.size_detail.values()) > 0
    if sql_backend.kind != "mariadb":  # InnoDB refreshes its figures lazily
        assert stats.size_bytes >= empty.size_bytes
    assert [(s.session_id, s.messages) for s in stats.largest_sessions] == [
        ("big", 8),
        ("mid", 2),
        ("small", 1),
    ]
    biggest = stats.largest_tool_outputs
    assert [(o.session_id, o.sequence, o.call_id) for o in biggest] == [
        ("big", 7, "c-2"),  # 3,000 three-byte characters
        ("big", 3, "c-1"),
        ("mid", 2, "m"),
    ]
    for output in biggest:
        assert output.bytes == await stored_bytes(
            sql_backend.target, output.session_id, output.sequence
        )
    assert biggest[0].bytes > 9_000 > biggest[1].bytes > 5_000
    titled = await database_stats(sql_backend.target, top=10)
    assert [s.title for s in titled.largest_sessions if s.session_id == "titled"] == ["Trip plans"]
    assert len(titled.largest_tool_outputs) == 3  # only three tool results are stored
    none = await database_stats(sql_backend.target, top=0)
    assert none.largest_sessions == [] == none.largest_tool_outputs
    assert none.sessions == 4
    if sql_backend.kind == "sqlite_wal":  # the log is counted while a writer keeps it
        async with sql_backend.session() as session:
            await session.append("small", [user("again")], run_id="r2")
            live = await database_stats(sql_backend.target, top=0)
            wal = await asyncio.to_thread(os.path.getsize, f"{sql_backend.target}-wal")
            assert live.size_detail["wal"] == wal > 0
            assert live.messages == stats.messages + 1


async def test_the_command_counts_the_shared_values_references(
    tmp_path: Path, capsys: Capsys
) -> None:
    path = tmp_path / "shared.sqlite3"
    async with SQLSession(path) as session:  # compressed, the output is stored once
        await session.append("s", a_run("1", output="z" * 5_000), run_id="r1")
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["stats", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"shared values +1 \(.* stored, 1 reference\)", out), out


async def test_bad_top_and_an_old_database_are_refused(sql_backend: Backend, tmp_path: Any) -> None:
    assert sql_backend.target is not None
    for bad in (-1, 1.5, True):
        with pytest.raises(UserError, match="top"):
            await database_stats(sql_backend.target, top=bad)  # type: ignore[arg-type]
    with pytest.raises(SchemaNotCurrentError):
        await database_stats(tmp_path / "never-upgraded.sqlite3")
    assert not (tmp_path / "never-upgraded.sqlite3").exists()


async def test_the_command_prints_a_table_and_json(sql_backend: Backend, capsys: Capsys) -> None:
    assert sql_backend.target is not None
    await fill(sql_backend)
    capsys.readouterr()
    # The command runs its own loop: from this test's loop, in a thread.
    code = await asyncio.to_thread(main, ["stats", sql_backend.target, "--top", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    for text in ("sessions", "4", "runs in flight", "3", "database size", "largest sessions"):
        assert text in out
    assert "big" in out and "c-2" in out and "largest tool outputs" in out
    code = await asyncio.to_thread(main, ["stats", "--json", "--top", "1", sql_backend.target])
    out, _ = capsys.readouterr()
    assert code == 0
    document = json.loads(out)
    assert (document["sessions"], document["messages"]) == (4, 12)
    assert (document["runs_in_flight"], document["finished_runs"]) == (3, 2)
    assert [s["session_id"] for s in document["largest_sessions"]] == ["big"]
    assert [o["call_id"] for o in document["largest_tool_outputs"]] == ["c-2"]
    assert document["size_bytes"] == sum(document["size_detail"].values())
    assert "password" not in out


def test_the_command_s_exit_codes(tmp_path: Any, capsys: Capsys) -> None:
    missing = tmp_path / "missing.sqlite3"
    assert main(["stats", str(missing)]) == 1  # needs upgrade: never created
    assert not missing.exists()
    assert main(["upgrade", str(missing)]) == 0
    capsys.readouterr()
    assert main(["stats", "--top", "-1", str(missing)]) == 2
    assert main(["stats", "--json", str(missing)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["sessions"] == 0 and document["largest_tool_outputs"] == []
    assert main(["stats", "--json", str(tmp_path / "nowhere" / "x.sqlite3")]) in (1, 2)
    assert json.loads(capsys.readouterr().out)["status"] in ("needs_upgrade", "usage")


async def test_a_postgresql_schema_is_measured_on_its_own(pg_url: str, capsys: Capsys) -> None:
    """Tables in a named schema: counted and sized there, not in the default one."""
    async with Database(pg_url, schema="agents") as agents, Database(pg_url) as public:
        await SQLSession(agents).append("a", a_run("1", output="z" * 50_000), run_id="r1")
        await SQLSession(public).append("p", [user("hi")], run_id="r1")
        mine = await database_stats(agents, top=1)
        theirs = await database_stats(public, top=1)
    assert (mine.sessions, mine.messages, theirs.sessions, theirs.messages) == (1, 4, 1, 1)
    assert [o.session_id for o in mine.largest_tool_outputs] == ["a"]
    assert theirs.largest_tool_outputs == []
    assert mine.size_bytes > 0 and theirs.size_bytes > 0
    code = await asyncio.to_thread(main, ["stats", "--json", "--schema", "agents", pg_url])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["largest_sessions"][0]["session_id"] == "a"
