"""``copy_database`` between backends: every public read equal, verified, resumable, refusing.

Pairs: SQLite -> PostgreSQL, PostgreSQL -> MariaDB, MariaDB -> SQLite. The source
holds every kind of row (tests/lifecycle_support.py) and a run interrupted mid-tool,
which then resumes on the destination with our Runner. A copy killed with SIGKILL
mid-way is finished by running it again; the legacy lovia and zett-agent files are
copied into PostgreSQL and MariaDB with every session equal.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from backends import fresh_server_database, migrated_server_database
from lifecycle_support import (
    IN_FLIGHT,
    IN_FLIGHT_SESSION,
    lovia_entries,
    populate,
    public_reads,
    resume_run,
)
from lovia_store import (
    AssistantTextEntry,
    Database,
    InputEntry,
    SQLSession,
    SQLSessionStorage,
    upgrade,
)
from lovia_store.cli.app import main
from lovia_store.lifecycle import DestinationConflictError, copy_database, counter_mismatches
from lovia_store.lifecycle.verify import summarize

HERE = Path(__file__).resolve().parent


@contextlib.asynccontextmanager
async def database(
    kind: str, tmp_path: Path, name: str, *, migrated: bool = False
) -> AsyncIterator[str]:
    """A new database of ``kind`` (sqlite, postgres, mariadb): its URL. A server's is
    empty, or ``migrated`` and empty (where the copy's first open is not the point)."""
    if kind == "sqlite":
        yield str(tmp_path / f"{name}.sqlite3")
        return
    made = migrated_server_database if migrated else fresh_server_database
    async with made(kind) as url:
        yield url


PAIRS = [
    pytest.param("sqlite", "postgres", id="sqlite-postgres", marks=pytest.mark.postgres),
    pytest.param(
        "postgres",
        "mariadb",
        id="postgres-mariadb",
        marks=[pytest.mark.postgres, pytest.mark.mysql],
    ),
    pytest.param("mariadb", "sqlite", id="mariadb-sqlite", marks=pytest.mark.mysql),
]


async def message_counts(url: str) -> dict[str, int]:
    """Raw Log length per session, read through the public API (not the copy's reader)."""
    async with SQLSessionStorage(url) as storage:
        return {
            s.session_id: len(await storage.list_raw_messages(s.session_id))
            for s in await storage.list_sessions(limit=10_000)
        }


@pytest.mark.parametrize(("source_kind", "destination_kind"), PAIRS)
async def test_copy_makes_every_public_read_equal_and_the_run_in_flight_resumes(
    source_kind: str, destination_kind: str, tmp_path: Path
) -> None:
    async with (
        database(source_kind, tmp_path, "src") as src,
        database(destination_kind, tmp_path, "dst") as dst,
    ):
        await populate(src)
        reports: list[tuple[str, int, int | None]] = []
        report = await copy_database(src, dst, progress=lambda *a: reports.append(a))
        assert report.ok, report.differing
        before = await public_reads(src)
        assert await public_reads(dst) == before
        # The verification's counts agree with an independent, public reading of both sides.
        counts = await message_counts(src)
        assert counts == await message_counts(dst)
        assert {
            c.session_id: c.destination.counts["message"] for c in report.sessions if c.destination
        } == counts
        assert report.inserted["message"] == sum(counts.values())
        assert ("sessions", len(counts), len(counts)) in reports
        # Copying again changes nothing.
        again = await copy_database(src, dst)
        assert again.ok and sum(again.inserted.values()) == 0
        assert again.unchanged == report.inserted
        # The run interrupted on the source resumes on the destination: the tool that
        # had finished is not run again, the run completes into its session.
        assert before[IN_FLIGHT]["load"].status == "interrupted"
        async with Database(dst) as db:
            result, calls = await resume_run(db, IN_FLIGHT, IN_FLIGHT_SESSION)
        assert (result.final_output, calls) == ("all done", ["t2"])
        async with SQLSession(dst) as session:
            segments = await session.segments(IN_FLIGHT_SESSION)
        assert [s.run_id for s in segments] == [IN_FLIGHT]
        assert await public_reads(src) == before  # the source untouched


@pytest.mark.postgres
async def test_a_destination_holding_other_data_is_refused_unchanged(tmp_path: Path) -> None:
    src = str(tmp_path / "src.sqlite3")
    await populate(src, sessions=1, runs=1)
    async with fresh_server_database("postgres") as dst:
        async with SQLSession(dst) as session:  # a session the source does not have
            await session.append("someone-else", lovia_entries(0), run_id="x")
        before = await public_reads(dst)
        with pytest.raises(DestinationConflictError, match="someone-else") as caught:
            await copy_database(src, dst)
        assert caught.value.kind == "session" and caught.value.line is None
        assert await public_reads(dst) == before
    async with fresh_server_database("postgres") as dst:
        await copy_database(src, dst)
        async with SQLSession(src) as session:  # the source moves on: the copies now differ
            await session.append("lovia-0", lovia_entries(9), run_id="later")
        before = await public_reads(dst)
        with pytest.raises(DestinationConflictError, match="last_sequence"):
            await copy_database(src, dst)
        assert await public_reads(dst) == before


async def test_the_cli_prints_the_verification_and_refuses_a_conflict_with_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = str(tmp_path / "src.sqlite3"), str(tmp_path / "dst.sqlite3")
    await populate(src, sessions=1, runs=1)
    code = await asyncio.to_thread(main, ["copy", src, dst])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ok      lovia-0  5 message 1 segment 0 snapshot" in out
    assert "every session equal on both sides" in out
    async with SQLSession(dst) as session:
        await session.append("only-here", lovia_entries(0), run_id="x")
    code = await asyncio.to_thread(main, ["copy", src, dst, "--json"])
    document = capsys.readouterr().out
    assert code == 5 and '"error": "DestinationConflictError"' in document


# -- a copy killed mid-way ------------------------------------------------------------------


CHILD = """
import asyncio, os, signal, sys
from lovia_store.lifecycle import copy_database

def report(task, done, total):
    if task == "messages" and done >= int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(copy_database(sys.argv[1], sys.argv[2], progress=report))
"""


async def populate_many(target: str, sessions: int, runs: int, entries: int) -> None:
    """``sessions * runs * entries`` messages, in few transactions."""
    async with Database(target, synchronous="normal") as db:
        session = SQLSession(db)
        for s in range(sessions):
            for r in range(runs):
                batch = [
                    AssistantTextEntry(content=f"s{s} r{r} e{e} " + "x" * 200)
                    if e % 2
                    else InputEntry(role="user", content=f"q{e}")
                    for e in range(entries)
                ]
                await session.append(f"s-{s:03d}", batch, run_id=f"r-{s}-{r}")


KILLED = [
    # 30 sessions of 200 messages and 4 segments: killed with some of them copied.
    pytest.param((30, 4, 50), 4500, (1, 29), id="many-sessions"),
    # 2 sessions of 2,500 messages, more than a unit holds: killed while the first
    # one is read, then while the second one is.
    pytest.param((2, 10, 250), 2100, (0, 0), id="big-session-first"),
    pytest.param((2, 10, 250), 4600, (1, 1), id="big-session-second"),
]


@pytest.mark.parametrize(
    "destination_kind",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mysql),
    ],
)
@pytest.mark.parametrize(("shape", "kill_at", "whole_sessions"), KILLED)
@pytest.mark.default_tier_on("sqlite")
async def test_a_copy_killed_mid_way_is_finished_by_running_it_again(
    destination_kind: str,
    shape: tuple[int, int, int],
    kill_at: int,
    whole_sessions: tuple[int, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SIGKILLed mid-way, a copy leaves whole sessions, each with counters that agree
    with its rows: ``check`` passes and ``show`` prints no run cut short (issue 34: a
    session row used to carry the source's counters while part of its rows were still
    to come). A session larger than a unit is written in one transaction of its own,
    so killed while it is read, nothing of it is there. Running the copy again
    finishes it."""
    sessions, runs, entries = shape
    total = sessions * runs * entries
    src = str(tmp_path / "src.sqlite3")
    await populate_many(src, sessions=sessions, runs=runs, entries=entries)
    async with database(destination_kind, tmp_path, "dst", migrated=True) as dst:
        child = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", CHILD, src, dst, str(kill_at)],
            capture_output=True,
            timeout=120,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()
        partial = await message_counts(dst)
        fewest, most = whole_sessions
        assert fewest <= len(partial) <= most, partial
        assert set(partial.values()) <= {runs * entries}  # every session whole
        assert await counter_mismatches(dst) == []
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["check", dst]) == 0, capsys.readouterr().err
        async with SQLSession(dst) as copied:  # every run shown is whole
            for session_id in partial:
                for segment in await copied.segments(session_id):
                    assert len(segment.entries) == entries, (session_id, segment.run_id)
        report = await copy_database(src, dst)
        assert report.ok
        assert report.inserted["message"] + report.unchanged["message"] == total
        assert report.unchanged["message"] == sum(partial.values())
        assert await public_reads(dst) == await public_reads(src)
        assert await counter_mismatches(dst) == []


async def test_a_session_an_older_copy_left_cut_short_is_completed_by_copying_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a copy killed by an earlier lovia-store could leave (the session row with
    the source's counters, part of its rows): ``check`` exits 5 naming the session and
    saying to copy again, and copying again completes it."""
    src, dst = str(tmp_path / "src.sqlite3"), str(tmp_path / "dst.sqlite3")
    await populate(src, sessions=2, runs=3)
    assert (await copy_database(src, dst)).ok
    async with Database(dst) as db:

        def cut(conn: Connection) -> None:
            for table in ("lovia_session_runs", "lovia_messages"):
                conn.execute(text(f"DELETE FROM {table} WHERE session_id = 'lovia-1'"))

        await db.write(cut)
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["check", dst]) == 5
    err = capsys.readouterr().err
    assert "session 'lovia-1': message_count says 15, lovia_messages holds 0 rows" in err
    assert "running it again" in err
    report = await copy_database(src, dst)
    assert report.ok and report.inserted["message"] == 15 and report.inserted["segment"] == 3
    assert await counter_mismatches(dst) == []
    assert await public_reads(dst) == await public_reads(src)


# -- the legacy files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "destination_kind",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mysql),
    ],
)
@pytest.mark.parametrize("fixture", ["lovia-0.9.119.sqlite3", "zett-0.2.1.sqlite3"])
async def test_legacy_files_copy_into_servers_with_every_session_equal(
    fixture: str, destination_kind: str, legacy_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    path = legacy_copy(fixture)
    await upgrade(path, legacy_backup=False)  # a source is read as it is: converted first
    async with fresh_server_database(destination_kind) as dst:
        report = await copy_database(str(path), dst)
        assert report.ok and len(report.sessions) >= 2
        reads: dict[str, Any] = await public_reads(str(path))
        assert await public_reads(dst) == reads
        assert sum(report.inserted.values()) > 0


# -- lovia's own Runner ---------------------------------------------------------------------


@pytest.mark.postgres
async def test_a_lovia_run_in_flight_resumes_on_the_destination_with_lovias_runner(
    tmp_path: Path,
) -> None:
    from lovia import Agent, CheckpointOptions, MaxTurnsExceeded, Runner, tool
    from lovia.testing import ScriptedProvider, call, text

    from lovia_store.integrations.lovia import SQLCheckpointer as LoviaCheckpointer
    from lovia_store.integrations.lovia import SQLSession as LoviaSession

    asked: list[str] = []

    @tool
    def weather(city: str) -> str:
        """Current weather for a city."""
        asked.append(city)
        return f"rain in {city}"

    def bot(*turns: Any) -> Any:
        return Agent(name="bot", model=ScriptedProvider(list(turns)), tools=[weather])

    src = str(tmp_path / "src.sqlite3")
    async with Database(src) as db:
        with pytest.raises(MaxTurnsExceeded):  # stops after the tool ran: interrupted
            await Runner.run(
                bot(call("weather", {"city": "Bern"})),
                "Weather in Bern?",
                session=LoviaSession(db),
                session_id="u1",
                checkpoint=CheckpointOptions(LoviaCheckpointer(db), "lovia-run"),
                max_turns=1,
            )
    assert asked == ["Bern"]
    async with fresh_server_database("postgres") as dst:
        assert (await copy_database(src, dst)).ok
        async with Database(dst) as db:
            session, checkpointer = LoviaSession(db), LoviaCheckpointer(db)
            stopped = await checkpointer.load("lovia-run")
            assert stopped is not None and stopped.status == "interrupted"
            resumed = await Runner.run(
                bot(text("Umbrella.")),
                [],
                session=session,
                session_id="u1",
                checkpoint=CheckpointOptions(
                    checkpointer, "lovia-run", if_run_exists="resume_only"
                ),
            )
            assert resumed.output == "Umbrella."
            assert asked == ["Bern"]  # the tool that had run is not run again
            assert [s.run_id for s in await session.segments("u1")] == ["lovia-run"]


@pytest.mark.postgres
async def test_a_copy_into_a_postgresql_schema_lands_there(tmp_path: Path) -> None:
    src = str(tmp_path / "src.sqlite3")
    await populate(src, sessions=1, runs=2)
    async with fresh_server_database("postgres") as url, Database(url, schema="tenant") as dst:
        report = await copy_database(src, dst)
        assert report.ok and report.inserted["message"] > 0
        async with SQLSession(dst) as placed, SQLSession(src) as original:
            assert await placed.load("lovia-0") == await original.load("lovia-0")
        async with SQLSession(url) as default_schema:
            assert await default_schema.load("lovia-0") == []


@pytest.mark.postgres
async def test_a_copy_of_a_source_being_written_reports_truthfully(tmp_path: Path) -> None:
    """Appends land in the source while it is copied: each session is copied as of one
    moment (a prefix of the source's), the copy's own verification never calls a
    session different that is equal, and, once the writer has stopped, the tallies
    call a session equal exactly when every public read of it is equal on both sides.
    (The copy's verification reads the source at one moment; appends after it can
    make an equal session differ by the end, never the reverse.)"""
    src = str(tmp_path / "src.sqlite3")
    async with Database(src, wal=True) as db:  # WAL: the copy reads while the writer writes
        session = SQLSession(db)
        for s in range(20):
            await session.append(f"live-{s:02d}", lovia_entries(0), run_id=f"r-{s}-0")
        stop = asyncio.Event()

        async def write() -> int:
            n = 0
            while not stop.is_set():
                n += 1
                await session.append(f"live-{n % 20:02d}", lovia_entries(n), run_id=f"w-{n}")
                await asyncio.sleep(0)
            return n

        async with fresh_server_database("postgres") as dst:
            writer = asyncio.create_task(write())
            try:
                report = await copy_database(src, dst)
            finally:
                stop.set()
                written = await writer
            assert written > 0
            async with SQLSession(dst) as copied:
                source, copy = await summarize(db), await summarize(copied.database)
                for check in report.sessions:
                    mine = await session.load(check.session_id)
                    theirs = await copied.load(check.session_id)
                    assert theirs == mine[: len(theirs)]  # a prefix: never half a run
                    same = theirs == mine and await session.segments(
                        check.session_id
                    ) == await copied.segments(check.session_id)
                    if same:
                        assert check.equal, check.session_id
                    tallies = source.sessions[check.session_id], copy.sessions[check.session_id]
                    assert (tallies[0] == tallies[1]) == same, check.session_id
