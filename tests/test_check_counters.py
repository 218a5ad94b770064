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
from typing import Any

import pytest
from sqlalchemy import Connection, text

from lifecycle_support import DONE, populate
from lovia_store import Database, InputEntry, SQLSession, SQLSessionStorage
from lovia_store.cli.app import main

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
    assert "run it again" in err  # what to do about it

    code, out, _ = await cli(capsys, "check", "--json", url)
    assert code == 5
    document = json.loads(out)
    assert (document["status"], document["error"]) == ("failed", "CounterMismatchError")
    assert document["mismatches"] == [
        {
            "table": "lovia_sessions",
            "id": "lovia-1",
            "counter": "message_count",
            "says": 10,
            "holds": 7,
        },
        {"table": "lovia_sessions", "id": "lovia-2", "counter": "run_count", "says": 2, "holds": 1},
        {
            "table": "lovia_sessions",
            "id": "zett-1",
            "counter": "last_sequence",
            "says": 2,
            "holds": 4,
        },
        {
            "table": "lovia_sessions",
            "id": "zett-2",
            "counter": "snapshot_version",
            "says": 1,
            "holds": 0,
        },
        {
            "table": "lovia_run_heads",
            "id": DONE,
            "counter": "entry_count",
            "says": entries,
            "holds": 2,
        },
    ]


async def test_check_of_the_symptom_in_issue_34_and_of_a_schema_that_needs_an_upgrade(
    tmp_path: Any, capsys: Capsys
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
    await execute(path, "UPDATE lovia_schema SET version = 1 WHERE store = 'session'")
    assert (await cli(capsys, "check", path))[0] == 1
