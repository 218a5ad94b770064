"""Checkpoints and tool effects stored compressed, shared once and encrypted (issue 33).

On SQLite, PostgreSQL and MariaDB, a checkpointer on a ``Database`` with
``compression_threshold=64`` (the minimum, so ordinary test data is compressed and
its long strings shared) and one that also has ``encryption_keys`` read back every
step, snapshot, listing and tool outcome exactly as a ``compression=False`` database
gives them. A long tool output repeated across steps and outcomes is one
``lovia_contents`` row counting its references; deleting runs (directly, or through
a session's rewind) and replacing an outcome release them, and once every run is
gone the tenant's contents are empty. Encrypted, the head, entry and outcome columns
(and the shared values) hold no plaintext, a wrong or missing key is an
``EncryptionKeyError`` naming the row, and the Runner (and lovia's through the
drop-in) run, crash, resume and replay on such a store.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lovia import Agent as LoviaAgent
from lovia import CheckpointOptions as LoviaOptions
from lovia import Runner as LoviaRunner
from lovia import tool as lovia_tool
from lovia.testing import ScriptedProvider
from lovia.testing import call as lovia_call
from lovia.testing import text as lovia_text
from sqlalchemy import select, update

from backends import shared_server_database
from helpers import call, commit_lost, result, say, user
from lovia_store import (
    Agent,
    CheckpointOptions,
    Database,
    RunHead,
    Runner,
    ScriptedModel,
    SQLCheckpointer,
    SQLSession,
    ToolContext,
    TranscriptEntry,
    function_tool,
)
from lovia_store.db.documents import MARK, references
from lovia_store.db.encryption import EncryptionKey, generate_encryption_key
from lovia_store.db.tables import contents, run_entries, run_heads, tool_effects
from lovia_store.errors import EncryptionKeyError
from lovia_store.integrations import lovia as drop_in

KEY, OTHER_KEY = generate_encryption_key(), generate_encryption_key()
SECRET = "kept-secret-7f3a"
"""In every document the tests write: found in no stored column when encrypted."""
BIG = "".join(f'line {i}: "{SECRET}" \\ é 日本 🙂\n' for i in range(30))
"""A tool output read again and again (quotes, backslashes, non-ASCII: escaped in JSON)."""
OTHER = f"{SECRET} another output, read once " * 4
RUNS = ("r1", "r2")

MODES: dict[str, dict[str, Any]] = {
    "compressed": {"compression_threshold": 64},
    "encrypted": {"compression_threshold": 64, "encryption_keys": [KEY]},
}
PLAIN: dict[str, Any] = {"compression": False}


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mysql),
    ]
)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A new SQLite file, or the run's migrated PostgreSQL or MariaDB database (emptied after)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'stored.sqlite3'}"
        return
    async with shared_server_database(request.param) as made:
        yield made


def literal(value: str) -> str:
    """A string as it stands in a stored JSON document (what ``lovia_contents`` keeps)."""
    return json.dumps(value, ensure_ascii=False)


def head(turns: int, status: str = "running", output: str | None = None) -> RunHead:
    return RunHead(
        agent_name=f"agent {SECRET}", status=status, turns=turns, output=output, updated_at=1.0
    )


def steps(run_id: str) -> list[tuple[list[TranscriptEntry], RunHead]]:
    """A run's steps: BIG read twice (two references); r2 also reads OTHER once."""
    out: list[tuple[list[TranscriptEntry], RunHead]] = [
        ([user(f"read it {SECRET}"), call("c1", "read", '{"path": "a.txt"}')], head(1)),
        ([result("c1", BIG)], head(1)),
        ([say("again"), call("c2", "read", '{"path": "a.txt"}')], head(2)),
        ([result("c2", BIG)], head(2)),
    ]
    if run_id == "r2":
        out.append(([call("c3", "read"), result("c3", OTHER)], head(3)))
    out.append(([say(f"done {SECRET}")], head(3, "completed", f"done {SECRET}")))
    return out


# BIG: two references in each run's entries, one in r1's outcome, two in r2's (output
# and raw); OTHER: one, in r2's entries.
SHARED = {len(literal(BIG)): 7, len(literal(OTHER)): 1}
AFTER_R1 = {len(literal(BIG)): 4, len(literal(OTHER)): 1}


async def write_runs(cp: SQLCheckpointer) -> None:
    for run_id in RUNS:
        for entries, step_head in steps(run_id):
            await cp.append(run_id, entries, step_head, session_id="s")
    await cp.record_intent("r1", "c9", "write")
    assert await cp.run_effect("r1", "c1", "read", lambda _: BIG, lambda v: result("c1", v)) == BIG
    await cp.run_effect("r2", "c1", "read", lambda _: BIG, lambda v: result("c1", v, raw=[v]))


async def observed(cp: SQLCheckpointer) -> dict[str, Any]:
    """Everything the checkpointer reads back (timestamps the database sets left out)."""
    listing = sorted(await cp.list_runs(), key=lambda s: s.run_id)
    completed = await cp.list_runs(status="completed")
    return {
        "snapshots": {run_id: await cp.load(run_id) for run_id in RUNS},
        "documents": {run_id: await cp.load_documents(run_id) for run_id in RUNS},
        "listing": [s.model_dump(exclude={"updated_at"}) for s in listing],
        "completed": sorted(s.run_id for s in completed),
        "effects": {
            run_id: {
                call_id: (effect.tool_name, effect.outcome)
                for call_id, effect in (await cp.tool_effects(run_id)).items()
            }
            for run_id in RUNS
        },
    }


async def shared_values(db: Database, tenant: str) -> dict[int, int]:
    """The tenant's ``lovia_contents``: each value's size -> its references."""

    def work(conn: Any) -> dict[int, int]:
        query = select(contents.c.size, contents.c.refs).where(contents.c.tenant == tenant)
        return {int(size): int(refs) for size, refs in conn.execute(query)}

    return await db.read(work)


async def stored_columns(db: Database, tenant: str) -> list[str]:
    """The head, entry and outcome columns as stored, raw."""

    def work(conn: Any) -> list[str]:
        found: list[str] = []
        for column in (run_heads.c.head_json, run_entries.c.entry_json, tool_effects.c.result_json):
            rows = conn.execute(select(column).where(column.table.c.tenant == tenant))
            found += [value for (value,) in rows if value is not None]
        return found

    return await db.read(work)


@pytest.mark.parametrize("mode", MODES)
async def test_everything_reads_back_as_with_compression_off(url: str, mode: str) -> None:
    async with Database(url, tenant="plain", **PLAIN) as plain_db:
        plain = SQLCheckpointer(plain_db)
        await write_runs(plain)
        expected = await observed(plain)
        assert await shared_values(plain_db, "plain") == {}
        assert all(not text.startswith(MARK) for text in await stored_columns(plain_db, "plain"))
    snapshot = expected["snapshots"]["r2"]
    assert snapshot.entries == [e for entries, _ in steps("r2") for e in entries]
    assert (snapshot.status, snapshot.output) == ("completed", f"done {SECRET}")
    assert expected["effects"]["r1"]["c1"] == ("read", result("c1", BIG))
    assert expected["effects"]["r1"]["c9"] == ("write", None)

    async with Database(url, tenant="coded", **MODES[mode]) as db:
        cp = SQLCheckpointer(db)
        await write_runs(cp)
        assert await observed(cp) == expected
        stored = await stored_columns(db, "coded")
        assert any(text.startswith(MARK + "r") for text in stored)  # shared, compressed
        assert await shared_values(db, "coded") == SHARED
        # A Database without compression reads them too, and the plain rows the other way.
        async with Database(url, tenant="coded", **PLAIN, **_keys(mode)) as other:
            assert await observed(SQLCheckpointer(other)) == expected
        async with Database(url, tenant="plain", **MODES[mode]) as other:
            assert await observed(SQLCheckpointer(other)) == expected


def _keys(mode: str) -> dict[str, Any]:
    return {"encryption_keys": [KEY]} if mode == "encrypted" else {}


@pytest.mark.parametrize("mode", MODES)
async def test_a_repeated_output_is_stored_once_and_released_with_its_runs(
    url: str, mode: str
) -> None:
    async with Database(url, tenant="t", **MODES[mode]) as db:
        cp = SQLCheckpointer(db)
        await write_runs(cp)
        assert await shared_values(db, "t") == SHARED
        lease = await cp.acquire_lease("r1")
        await cp.delete("r1", lease=lease)
        assert await cp.load("r1") is None and await cp.tool_effects("r1") == {}
        assert await shared_values(db, "t") == AFTER_R1
        assert (await cp.load("r2")) == (await observed(cp))["snapshots"]["r2"]
        await cp.delete("r2")
        assert await shared_values(db, "t") == {}
        assert await cp.list_runs() == []
        # Written again from nothing: stored again, counted from one.
        await cp.append("r3", [result("c1", BIG)], head(1))
        assert await shared_values(db, "t") == {len(literal(BIG)): 1}
        await cp.delete("r3")
        assert await shared_values(db, "t") == {}


@pytest.mark.parametrize("mode", MODES)
async def test_a_replaced_outcome_releases_what_it_named(url: str, mode: str) -> None:
    async with Database(url, tenant="t", **MODES[mode]) as db:
        cp = SQLCheckpointer(db)
        await cp.append("r", [call("c1", "read")], head(1))

        async def record(output: str) -> None:
            await cp.run_effect("r", "c1", "read", lambda _: output, lambda v: result("c1", v))

        await record(BIG)
        await record(BIG)  # the same value again: kept, counted once
        assert await shared_values(db, "t") == {len(literal(BIG)): 1}
        await record(OTHER)
        assert await shared_values(db, "t") == {len(literal(OTHER)): 1}
        assert (await cp.tool_effects("r"))["c1"].outcome == result("c1", OTHER)
        await record("short")
        assert await shared_values(db, "t") == {}
        await record(OTHER)
        await cp.delete("r")
        assert await shared_values(db, "t") == {}


@pytest.mark.parametrize("mode", MODES)
async def test_a_rewind_releases_the_checkpoints_it_deletes(url: str, mode: str) -> None:
    """A session's rewind with a checkpointer on its Database deletes the runs it cut
    in its own transaction (``delete_runs``): their shared values go with them."""
    async with Database(url, tenant="t", **MODES[mode]) as db:
        session, cp = SQLSession(db), SQLCheckpointer(db)
        for entries, step_head in steps("r1"):
            await cp.append("r1", entries, step_head, session_id="s")
        snapshot = await cp.load("r1")
        assert snapshot is not None
        await session.append("s", snapshot.entries, run_id="r1")
        assert await session.rewind("s", keep_entries=0, checkpointer=cp) == len(snapshot.entries)
        assert await cp.load("r1") is None
        assert await shared_values(db, "t") == {}


async def assert_counts_match(db: Database, tenant: str) -> None:
    """Each shared value counts exactly the references the stored rows make to it."""

    def work(conn: Any) -> tuple[Counter[str], dict[str, int]]:
        made: Counter[str] = Counter()
        for column in (run_entries.c.entry_json, tool_effects.c.result_json):
            for (text,) in conn.execute(select(column).where(column.table.c.tenant == tenant)):
                made.update(references(text or ""))
        query = select(contents.c.digest, contents.c.refs).where(contents.c.tenant == tenant)
        return made, {digest: int(refs) for digest, refs in conn.execute(query)}

    made, counted = await db.read(work)
    assert counted == dict(made)


@pytest.mark.parametrize("mode", MODES)
async def test_runs_written_and_deleted_at_once_keep_every_count(url: str, mode: str) -> None:
    """Workers append steps and outcomes naming the same value while others delete
    their runs (and each other's, mid-write): no count is lost or leaked."""
    async with Database(url, tenant="t", **MODES[mode]) as db:
        cp = SQLCheckpointer(db)

        async def worker(i: int) -> None:
            run_id = f"w{i}"
            for step in range(3):
                await cp.append(run_id, [result(f"c{step}", BIG)], head(step + 1))
                if i % 3 == 2:
                    await cp.delete(f"w{i - 1}")  # a neighbour's run, mid-write
            await cp.run_effect(run_id, "c0", "read", lambda _: BIG, lambda v: result("c0", v))
            if i % 2:
                await cp.delete(run_id)

        await asyncio.gather(*(worker(i) for i in range(8)))
        await assert_counts_match(db, "t")
        assert await shared_values(db, "t") != {}
        for summary in await cp.list_runs():
            await cp.delete(summary.run_id)
        for i in range(8):  # outcomes of runs whose head a neighbour deleted first
            await cp.delete(f"w{i}")
        assert await shared_values(db, "t") == {}


async def test_encrypted_columns_hold_no_plaintext(url: str) -> None:
    async with Database(url, tenant="t", **MODES["encrypted"]) as db:
        await write_runs(SQLCheckpointer(db))
        stored = await stored_columns(db, "t")
        entries = sum(len(batch) for run_id in RUNS for batch, _ in steps(run_id))
        assert len(stored) == len(RUNS) + entries + 2  # heads, entries, outcomes
        for text in stored:
            flags = text[1:].split("\x1f", 1)[0]
            assert text.startswith(MARK) and "e" in flags, text[:40]
            assert SECRET not in text and "é" not in text and "read it" not in text

        def values(conn: Any) -> list[bytes]:
            return [bytes(data) for (data,) in conn.execute(select(contents.c.data))]

        for data in await db.read(values):
            assert data.startswith(b"e") and SECRET.encode() not in data
            assert "日本".encode() not in data
    if url.startswith("sqlite"):  # the file itself: ids and the schema, nothing written in them
        raw = await asyncio.to_thread(Path(url.split("///", 1)[1]).read_bytes)
        assert SECRET.encode() not in raw and "日本".encode() not in raw


async def test_a_wrong_or_missing_key_is_an_error_naming_the_row(url: str) -> None:
    async with Database(url, tenant="t", **MODES["encrypted"]) as db:
        cp = SQLCheckpointer(db)
        await write_runs(cp)
        expected = await observed(cp)
    key_id = EncryptionKey.of(KEY).id
    for keys in ({"encryption_keys": [OTHER_KEY]}, {}):
        async with Database(url, tenant="t", compression_threshold=64, **keys) as db:
            cp = SQLCheckpointer(db)
            with pytest.raises(EncryptionKeyError) as caught:
                await cp.load("r1")
            assert (caught.value.table, caught.value.column) == ("lovia_run_heads", "head_json")
            assert (caught.value.row, caught.value.key_id) == ({"run_id": "r1"}, key_id)
            with pytest.raises(EncryptionKeyError) as caught:
                await cp.list_runs()
            assert caught.value.table == "lovia_run_heads" and caught.value.row["run_id"] in RUNS
            with pytest.raises(EncryptionKeyError) as caught:
                await cp.tool_effects("r1")
            assert (caught.value.table, caught.value.column) == (
                "lovia_tool_effects",
                "result_json",
            )
            assert caught.value.row == {"run_id": "r1", "call_id": "c1"}
            assert caught.value.key_id == key_id
    # A head another program wrote in clear: the first entry is the one that does not open.
    plain_head = head(1).model_dump_json()
    async with Database(url, tenant="t") as db:

        def clear_head(conn: Any) -> None:
            conn.execute(
                update(run_heads).where(run_heads.c.run_id == "r1").values(head_json=plain_head)
            )

        await db.write(clear_head)
    async with Database(url, tenant="t", encryption_keys=[OTHER_KEY]) as db:
        with pytest.raises(EncryptionKeyError) as caught:
            await SQLCheckpointer(db).load("r1")
        assert (caught.value.table, caught.value.column) == ("lovia_run_entries", "entry_json")
        # The first entry that does not open, or the first naming a shared value that
        # does not (its result, read first): either is a row of r1 holding that key.
        assert caught.value.row in ({"run_id": "r1", "index": 0}, {"run_id": "r1", "index": 2})
        assert caught.value.key_id == key_id
    # Rotated keys (a new one first) read everything, and the delete releases as before.
    async with Database(url, tenant="t", **MODES["encrypted"]) as db:
        db_rotated = Database(
            url, tenant="t", compression_threshold=64, encryption_keys=[OTHER_KEY, KEY]
        )
        async with db_rotated:
            cp = SQLCheckpointer(db_rotated)
            assert await cp.load("r2") == expected["snapshots"]["r2"]
            assert (await cp.tool_effects("r2"))["c1"].outcome == result("c1", BIG, raw=[BIG])
            await cp.delete("r1")
            await cp.delete("r2")
            assert await shared_values(db, "t") == {}


@pytest.mark.parametrize("landed", [False, True], ids=["commit-lost", "reply-lost"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_step_whose_commit_was_lost_is_stored_and_counted_once(
    url: str, mode: str, landed: bool
) -> None:
    """The resolve path compares the step as written (an encrypted document is sealed
    anew each time): a landed step is not appended again, nor its values counted twice."""
    if url.startswith("sqlite"):
        pytest.skip("SQLite's COMMIT is its own executor's; the servers' is lost on the wire")
    async with Database(url, tenant="t", **MODES[mode]) as db:
        cp = SQLCheckpointer(db)
        await cp.append("r", [user("go")], head(1))
        step: list[TranscriptEntry] = [result("c1", BIG), result("c2", BIG)]
        with commit_lost(db, landed=landed) as lost:
            await cp.append("r", step, head(2))
        assert lost
        snapshot = await cp.load("r")
        assert snapshot is not None and snapshot.entries == [user("go"), *step]
        assert await shared_values(db, "t") == {len(literal(BIG)): 2}
        await cp.delete("r")
        assert await shared_values(db, "t") == {}


async def test_the_runner_crashes_resumes_and_replays_on_an_encrypted_store(url: str) -> None:
    """A tool's outcome committed with its effect (``ctx.transaction``) before the worker
    died is read back sealed and shared, and not run again; the replay reads the run."""
    ran: list[str] = []
    crash_once = {"c2"}

    @function_tool
    async def read(ctx: ToolContext, path: str) -> str:
        ran.append(ctx.call_id)
        value: str = await ctx.transaction(lambda _conn: BIG)
        if ctx.call_id in crash_once:
            crash_once.discard(ctx.call_id)
            raise asyncio.CancelledError  # the worker stops after the effect committed
        return value

    def agent() -> Agent:
        script = ScriptedModel(
            [
                [call("c1", "read", '{"path": "a.txt"}')],
                [call("c2", "read", '{"path": "a.txt"}')],
                [say(f"done {SECRET}")],
            ]
        )
        return Agent("a", script, tools=[read])

    expected = [
        user(f"go {SECRET}"),
        call("c1", "read", '{"path": "a.txt"}'),
        result("c1", BIG),
        call("c2", "read", '{"path": "a.txt"}'),
        result("c2", BIG),
        say(f"done {SECRET}"),
    ]
    async with Database(url, tenant="t", **MODES["encrypted"]) as db:
        cp = SQLCheckpointer(db)
        options = CheckpointOptions(cp, "job")
        with pytest.raises(asyncio.CancelledError):
            await Runner.run(agent(), f"go {SECRET}", checkpoint=options)
        crashed = await cp.load("job")
        assert crashed is not None and crashed.status == "interrupted"
        assert crashed.entries == expected[:4]
        assert (await cp.tool_effects("job"))["c2"].outcome == result("c2", BIG)

        done = await Runner.run(agent(), "ignored", checkpoint=options)
        assert (done.final_output, done.entries) == (f"done {SECRET}", expected)
        assert ran == ["c1", "c2"]  # c2's recorded outcome was used, not run again
        # Two results in the entries, two outcomes: one value, four references.
        assert await shared_values(db, "t") == {len(literal(BIG)): 4}
        assert all(SECRET not in text for text in await stored_columns(db, "t"))

        replay = await Runner.run(agent(), "ignored", checkpoint=options)
        assert (replay.replayed, replay.entries) == (True, expected)
        assert ran == ["c1", "c2"]
        await cp.delete("job")
        assert await shared_values(db, "t") == {}


async def test_lovia_s_runner_through_the_drop_in_on_an_encrypted_store(url: str) -> None:
    @lovia_tool
    def read(path: str) -> str:
        """Read a file."""
        return BIG

    def agent(*turns: Any) -> LoviaAgent[Any]:
        return LoviaAgent(name="bot", model=ScriptedProvider(list(turns)), tools=[read])

    async with Database(url, tenant="t", **MODES["encrypted"]) as db:
        cp = drop_in.SQLCheckpointer(db)
        turns = (
            lovia_call("read", {"path": "a"}, call_id="c1"),
            lovia_call("read", {"path": "a"}, call_id="c2"),
            lovia_text(f"done {SECRET}"),
        )
        done = await LoviaRunner.run(
            agent(*turns), f"go {SECRET}", checkpoint=LoviaOptions(cp, "job")
        )
        assert done.output == f"done {SECRET}"
        snapshot = await cp.load("job")
        assert snapshot is not None and snapshot.head.status == "completed"
        outputs = [e.output for e in snapshot.entries if type(e).__name__ == "ToolResultEntry"]
        assert outputs == [BIG, BIG]
        assert [r.run_id for r in await cp.list_runs()] == ["job"]
        # lovia keeps a tool's return value as the result's raw too: two references each.
        assert await shared_values(db, "t") == {len(literal(BIG)): 4}
        assert all(SECRET not in text for text in await stored_columns(db, "t"))
        replay = await LoviaRunner.run(agent(), "x", checkpoint=LoviaOptions(cp, "job"))
        assert replay.output == f"done {SECRET}"
        await cp.delete("job")
        assert await cp.load("job") is None
        assert await shared_values(db, "t") == {}
        await cp.close()
