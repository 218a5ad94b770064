"""``lovia-store check`` finds the sessions and runs whose stored counters disagree with
their rows, on SQLite, PostgreSQL and MariaDB (issue 34).

A session row counts what its children hold: ``message_count`` the Raw Log rows,
``last_sequence`` the highest sequence ever reserved, ``run_count`` the highest
position of a segment, ``snapshot_version`` the newest snapshot; a run head's
``entry_count`` counts its entries. A copy or an import that stopped between the
row and its children used to leave such a session (``message_count`` 16 beside 13
rows), which ``show`` printed as a truncated run while ``check`` exited 0. The
damage here is made with SQL, as an interrupted load left it; tests/test_lifecycle_copy.py
kills real copies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from lifecycle_support import DONE, populate
from lovia_store import Database, InputEntry, SQLSession, SQLSessionStorage, UserError, upgrade
from lovia_store.cli.app import main
from lovia_store.lifecycle import counter_mismatches

Capsys = pytest.CaptureFixture[str]


async def cli(capsys: Capsys, *args: str) -> tuple[int, str, str]:
    """``lovia-store ARGS`` in-process (in a thread: it runs its own loop)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def execute(url: str, *statements: str) -> None:
    """Run raw SQL on ``url`` in one transaction: damage no store would make."""

    def work(conn: Connection) -> None:
        for statement in statements:
            conn.execute(text(statement))

    async with Database(url) as db:
        await db.write(work)


async def scalar(url: str, statement: str) -> Any:
    async with Database(url) as db:
        return await db.read(lambda conn: conn.execute(text(statement)).scalar_one())


async def test_a_healthy_database_passes_after_rewinds_forks_trims_and_snapshots(
    empty_database_url: str, capsys: Capsys
) -> None:
    """Every store's own writes keep the counters true, including the ones that lower
    them (a rewind keeps ``last_sequence`` and ``run_count`` where they were: a
    sequence or a position is never reused) and a session's deletion."""
    url = empty_database_url
    await populate(url)
    async with Database(url) as db:
        lovia, storage = SQLSession(db), SQLSessionStorage(db)
        await lovia.rewind("lovia-1", keep_entries=7)  # inside the second run
        await lovia.rewind("zett-1", keep_entries=1)  # below its snapshot: the snapshot goes
        await lovia.clear("lovia-2")
        await storage.append("zett-1", "later", InputEntry(role="user", content="after"))
    assert (
        await scalar(url, "SELECT snapshot_version FROM lovia_sessions WHERE session_id = 'zett-1'")
        == 0
    )
    code, out, err = await cli(capsys, "check", url)
    assert (code, out, err) == (0, "schema is current\n", "")
    code, out, _ = await cli(capsys, "check", "--json", url)
    assert code == 0 and json.loads(out)["status"] == "current"


async def test_check_names_every_counter_that_disagrees_with_its_rows(
    empty_database_url: str, capsys: Capsys
) -> None:
    url = empty_database_url
    await populate(url)
    entries = await scalar(url, f"SELECT entry_count FROM lovia_run_heads WHERE run_id = '{DONE}'")
    await execute(
        url,
        # An interrupted copy: the session row and 7 of its 10 messages.
        "DELETE FROM lovia_messages WHERE session_id = 'lovia-1' AND sequence > 7",
        # Its segments after its messages: the second run's segment missing.
        "DELETE FROM lovia_session_runs WHERE session_id = 'lovia-2' AND run_id = 'lovia-2-run-1'",
        # Its snapshots last.
        "DELETE FROM lovia_snapshots WHERE session_id = 'zett-2'",
        # A counter behind its rows: the next append would reuse sequence 3.
        "UPDATE lovia_sessions SET last_sequence = 2, message_count = 4 "
        "WHERE session_id = 'zett-1'",
        # A run head and part of its entries.
        f"DELETE FROM lovia_run_entries WHERE run_id = '{DONE}' AND position > 2",
    )
    code, out, err = await cli(capsys, "check", url)
    assert code == 5, err
    assert out == ""
    assert err.startswith("lovia-store: 5 counters disagree with their rows: ")
    assert len(err.splitlines()) == 1
    for said in (
        "session 'lovia-1': message_count says 10, lovia_messages holds 7 rows",
        "session 'lovia-2': run_count says 2, lovia_session_runs holds 1 row "
        "(5 message rows name a run it lacks)",
        "session 'zett-1': last_sequence says 2, lovia_messages holds sequence 4",
        "session 'zett-2': snapshot_version says 1, lovia_snapshots holds no version",
        f"run '{DONE}': entry_count says {entries}, lovia_run_entries holds 2 rows",
    ):
        assert said in err, said
    assert "running it again" in err  # what to do about it

    code, out, _ = await cli(capsys, "check", "--json", url)
    assert code == 5
    document = json.loads(out)
    assert (document["status"], document["error"]) == ("failed", "CounterMismatchError")
    assert all(m.pop("detail") in err for m in document["mismatches"])
    assert document["mismatches"] == [
        {
            "table": "lovia_sessions",
            "tenant": "",
            "id": "lovia-1",
            "counter": "message_count",
            "says": 10,
            "holds": 7,
        },
        {
            "table": "lovia_sessions",
            "tenant": "",
            "id": "lovia-2",
            "counter": "run_count",
            "says": 2,
            "holds": 1,
        },
        {
            "table": "lovia_sessions",
            "tenant": "",
            "id": "zett-1",
            "counter": "last_sequence",
            "says": 2,
            "holds": 4,
        },
        {
            "table": "lovia_sessions",
            "tenant": "",
            "id": "zett-2",
            "counter": "snapshot_version",
            "says": 1,
            "holds": 0,
        },
        {
            "table": "lovia_run_heads",
            "tenant": "",
            "id": DONE,
            "counter": "entry_count",
            "says": entries,
            "holds": 2,
        },
    ]


async def test_check_of_the_symptom_in_issue_34_and_of_a_schema_that_needs_an_upgrade(
    tmp_path: Path, capsys: Capsys
) -> None:
    """The report's case: ``show`` prints the run cut short, ``check`` says why. The
    schema is checked first: a database that needs an upgrade is exit 1, as before."""
    path = str(tmp_path / "store.sqlite3")
    await populate(path, sessions=1, runs=4)
    await execute(path, "DELETE FROM lovia_messages WHERE session_id = 'lovia-0' AND sequence > 17")
    code, out, _ = await cli(capsys, "show", "lovia-0", path)
    assert code == 0 and "run 4" in out  # the last run, two of its five entries
    code, _, err = await cli(capsys, "check", path)
    assert code == 5
    assert "session 'lovia-0': message_count says 20, lovia_messages holds 17 rows" in err
    await execute(path, "UPDATE lovia_alembic_version SET version_num = '0001'")
    assert (await cli(capsys, "check", path))[0] == 1


@pytest.mark.parametrize("fixture", ["lovia-0.9.119.sqlite3", "zett-0.2.1.sqlite3"])
async def test_converted_lovia_and_zett_agent_files_pass(
    fixture: str, legacy_copy: Callable[[str], Path], capsys: Capsys
) -> None:
    """The counters a conversion computes agree with the rows it wrote."""
    path = legacy_copy(fixture)
    await upgrade(path, legacy_backup=False)
    assert await cli(capsys, "check", str(path)) == (0, "schema is current\n", "")


async def test_the_message_names_ten_and_counts_the_rest_and_the_call_reads_at_most_limit(
    tmp_path: Path, capsys: Capsys
) -> None:
    path = str(tmp_path / "store.sqlite3")
    async with SQLSession(path) as session:
        for n in range(12):
            await session.append(f"s-{n:02d}", [InputEntry(role="user", content="hi")])
    await execute(path, "UPDATE lovia_sessions SET message_count = 2")
    code, out, err = await cli(capsys, "check", path)
    assert code == 5 and out == ""
    assert err.startswith("lovia-store: 12 counters disagree with their rows: session 's-00'")
    assert "session 's-09': message_count says 2, lovia_messages holds 1 row; and 2 more." in err
    assert "'s-10'" not in err
    code, out, _ = await cli(capsys, "check", "--json", path)
    assert [m["id"] for m in json.loads(out)["mismatches"]] == [f"s-{n:02d}" for n in range(12)]
    found = await counter_mismatches(path, limit=3)
    assert [(m.id, m.says, m.holds) for m in found] == [(f"s-{n:02d}", 2, 1) for n in range(3)]
    for wrong in (0, -1, True, "3", 100_001):
        with pytest.raises(UserError, match="limit"):
            await counter_mismatches(path, limit=wrong)  # type: ignore[arg-type]
    await execute(path, "UPDATE lovia_sessions SET message_count = 1 WHERE session_id <> 's-05'")
    code, _, err = await cli(capsys, "check", path)
    assert code == 5
    assert err.startswith("lovia-store: 1 counter disagrees with its rows: session 's-05'")
