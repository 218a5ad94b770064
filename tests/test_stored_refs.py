"""Counted references to shared values (``lovia_contents.refs``) across sequences of
operations, and under edits that wait for one another.

After each step every value's ``refs`` is compared with a recount of the references the
shareable documents make (as ``stored_support.assert_counts_true`` does), and ``check`` must
agree. On SQLite, PostgreSQL and MariaDB, with the documents compressed and their long
strings shared (``compression_threshold=64``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, delete, event, text, update

from helpers import call, eventually, result, say, user
from lovia_store import (
    CompactedMessage,
    Database,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    TranscriptEntry,
)
from lovia_store.db.tables import contents, sessions
from lovia_store.db.types import utcnow
from lovia_store.errors import StoredValueError, UserError
from lovia_store.lifecycle import (
    DestinationConflictError,
    copy_database,
    counter_mismatches,
    export,
    import_file,
    prune,
    rekey,
)
from lovia_store.sessions.trim import trim_rows
from stored_support import KEY1, KEY2, KINDS, contents_of, counted_references, database

# Every value shared; a writer waits for another's lock within 120 s, a bound on a hang.
OPTIONS = {"compression_threshold": 64, "busy_timeout": 120}
BIG = "".join(f"{i:04d} a file read by a tool, line after line\n" for i in range(60))
OTHER = "".join(f"{i:04d} another page fetched by another tool\n" for i in range(50))
HUGE = "".join(f"{i:07d} a long log read by a tool, line after line\n" for i in range(50_000))
"""2.55 M characters: longer than any value a Database remembers (so it is read back)."""


def head(turns: int, status: str = "running") -> RunHead:
    return RunHead(agent_name="agent", status=status, turns=turns, updated_at=1.0)


def run_of(tag: str, output: str) -> list[TranscriptEntry]:
    return [user(f"q {tag}"), call(f"c-{tag}"), result(f"c-{tag}", output), say(f"a {tag}")]


async def two_sessions(url: str, **options: Any) -> tuple[list[Any], list[Any]]:
    """Sessions "s" (two runs, one naming HUGE) and "t" (one run naming HUGE too) written
    with ``options``, counts checked: what each returns loaded."""
    async with Database(url, **options) as before:
        earlier = SQLSession(before)
        await earlier.append("s", run_of("1", HUGE), run_id="r1")
        await earlier.append("s", run_of("2", OTHER), run_id="r2")
        await earlier.append("t", run_of("t", HUGE), run_id="t1")
        await assert_checked(before)
        return await earlier.load("s"), await earlier.load("t")


async def assert_checked(db: Database) -> None:
    """``check`` finds nothing wrong, and the counts equal a recount."""
    found = [m.detail for m in await counter_mismatches(db, all_tenants=True)]
    assert not found, "check: " + "; ".join(found)
    assert await contents_of(db) == await counted_references(db)


async def lock_waits(db: Database, table: str, *, any_statement: bool = False) -> int:
    """How many statements on ``table`` of this test's database wait for a row lock.

    On MariaDB a transaction that waits for its first lock may be missing from
    ``innodb_trx``: a locking statement on ``table`` that is running is counted (it
    returns at once unless it waits, and the tests poll while the lock is held), or
    with ``any_statement`` any running statement on it (a DELETE, an INSERT ... SELECT)."""

    def work(conn: Connection) -> int:
        if conn.dialect.name == "postgresql":
            query = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE :table"
            )
        else:
            query = (
                "SELECT count(*) FROM information_schema.processlist "
                "WHERE db = DATABASE() AND id <> CONNECTION_ID() AND command = 'Query' "
                "AND info LIKE :table"
            )
            if not any_statement:
                query += " AND (info LIKE 'UPDATE %' OR info LIKE '%FOR UPDATE')"
        return int(conn.execute(text(query), {"table": f"%{table}%"}).scalar_one())

    return await db.read(work)


def trim_and_hold(url: str, trimmed: threading.Event, go: threading.Event) -> int:
    """Trim session "old" in a transaction of another Database (its own loop and
    thread) that commits only once ``go`` is set."""

    async def main() -> int:
        async with Database(url, **OPTIONS) as db:

            def work(conn: Connection) -> int:
                count = trim_rows(conn, "", "old", 100, 0)
                trimmed.set()
                assert go.wait(120), "never let go"
                return count

            return await db.write(work)

    return asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
async def test_a_prune_that_waited_for_a_trim_releases_the_trimmed_rows(
    kind: str, tmp_path: Path
) -> None:
    """A prune of an idle session waits for the session's row while a trim of it commits
    (a trim leaves the session's activity as it was, so the session is still pruned):
    what the prune releases must be what it deletes, the trimmed entries, not the
    entries it may have seen before it waited. Otherwise the value the trim released
    is released a second time (deleted while another session names it) and the values
    of the trimmed entries are kept for nothing."""
    async with database(kind, tmp_path, "db") as url, Database(url, **OPTIONS) as db:
        store = SQLSession(db)
        await store.append("old", run_of("1", BIG), run_id="r1")
        await store.append("old", run_of("2", OTHER), run_id="r2")
        await store.append("kept", run_of("k", BIG), run_id="k1")
        idle = utcnow() - timedelta(days=30)
        await db.write(
            lambda conn: conn.execute(
                update(sessions).where(sessions.c.session_id == "old").values(updated_at=idle)
            )
        )
        kept = await store.load("kept")
        await assert_checked(db)

        trimmed, go = threading.Event(), threading.Event()
        trimming = asyncio.ensure_future(asyncio.to_thread(trim_and_hold, url, trimmed, go))
        try:
            assert await asyncio.to_thread(trimmed.wait, 120)
            pruning = asyncio.ensure_future(prune(db, older_than=timedelta(days=7)))
            if kind != "sqlite":  # the prune waits for the trim's lock on the session
                await eventually(lambda: _waiting(db, "lovia_sessions"))
        finally:
            go.set()
        assert await trimming == 2
        report = await pruning
        assert report.sessions == ["old"]

        assert await store.load("old") == []
        await assert_checked(db)
        async with Database(url, **OPTIONS) as fresh:  # no value remembered
            assert await SQLSession(fresh).load("kept") == kept


async def _waiting(db: Database, table: str, *, any_statement: bool = False) -> bool:
    return await lock_waits(db, table, any_statement=any_statement) > 0


def rekey_and_hold(
    url: str, asked: threading.Event, go: threading.Event, trimmed: threading.Event
) -> int:
    """Rotate KEY1 to KEY2 from another Database (its own loop and thread), a session's
    messages a batch. Its key provider answers only once ``go`` is set: it is asked in
    the first batch, when that batch's rows are locked and not yet rewritten (a slow
    secret store). After that first batch it goes on once ``trimmed`` is set."""

    def provider(tenant: str) -> list[bytes | str]:
        asked.set()
        assert go.wait(120), "never let go"
        return [KEY1]

    def progress(task: str, done: int, total: int) -> None:
        if task == "lovia_messages" and done:
            assert trimmed.wait(120), "the trim never ended"

    async def main() -> int:
        async with Database(url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as db:
            report = await rekey(db, decryption_keys=provider, batch_size=8, progress=progress)
            return report.rewritten["lovia_messages"]

    return asyncio.run(main())


SERVERS = [kind for kind in KINDS if kind.id != "sqlite"]
"""SQLite's one writer holds the whole file: no edit ever waits inside another."""


@pytest.mark.parametrize("kind", SERVERS)
async def test_a_trim_that_waited_for_a_rekey_releases_the_rekeyed_rows(
    kind: str, tmp_path: Path
) -> None:
    """A key rotation rewrites a session's rows (new digests counted, the old ones
    released) while a trim of that session waits to write them: the trim must release
    the references of the rows it replaces, the rekeyed ones. Otherwise it releases the
    old forms' values a second time (deleted while another session still names them)
    and the values of the rekeyed rows are kept for nothing. The output is too long
    for a Database to remember: what is deleted is not read from memory either."""
    async with database(kind, tmp_path, "db") as url:
        _, kept = await two_sessions(url, **OPTIONS, encryption_keys=[KEY1])
        # The application writes with the new key first (and reads with both) while
        # the rekey rewrites what the old key sealed.
        async with Database(url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as db:
            await _trim_during_rekey(url, db, kept)


async def _trim_during_rekey(url: str, db: Database, kept: list[TranscriptEntry]) -> None:
    """Trim session "s" on ``db`` while another Database's rekey holds its rows."""
    store = SQLSession(db)
    asked, go, trimmed = threading.Event(), threading.Event(), threading.Event()
    rekeying = asyncio.ensure_future(asyncio.to_thread(rekey_and_hold, url, asked, go, trimmed))
    try:
        assert await asyncio.to_thread(asked.wait, 120)
        trimming = asyncio.ensure_future(store.trim_tool_results("s", keep_chars=100))
        await eventually(lambda: _waiting(db, "lovia_messages"))  # on the rekey's rows
        go.set()
        assert await trimming == 1
    finally:
        go.set()
        trimmed.set()
    failed: StoredValueError | None = None
    try:
        assert await rekeying == 12
    except StoredValueError as exc:
        failed = exc
    await assert_checked(db)
    assert failed is None, failed
    async with Database(url, **OPTIONS, encryption_keys=[KEY2]) as fresh:
        assert await SQLSession(fresh).load("t") == kept


@pytest.mark.parametrize("kind", KINDS)
async def test_two_databases_appending_and_releasing_one_value_at_once_keep_its_count(
    kind: str, tmp_path: Path
) -> None:
    """Writers on two Databases (two pools, as two processes have) append runs naming the
    same long value, fork, trim, rewind and clear their sessions at once: the value is
    stored again when its last reference went just before, never lost, never leaked."""
    async with (
        database(kind, tmp_path, "db") as url,
        Database(url, **OPTIONS) as one,
        Database(url, **OPTIONS) as two,
    ):

        async def worker(i: int) -> None:
            store = SQLSession(one if i % 2 else two)
            sid = f"w{i}"
            for round_ in range(3):
                await store.append(sid, run_of(f"{i}-{round_}-a", BIG), run_id=f"a{round_}")
                await store.append(sid, run_of(f"{i}-{round_}-b", BIG), run_id=f"b{round_}")
                await store.append(sid, run_of(f"{i}-{round_}-a", BIG), run_id=f"a{round_}")
                if i % 3 == 0:
                    await store.fork(sid, f"{sid}-f{round_}", keep_entries=8)
                    await store.trim_tool_results(sid, keep_chars=100)
                elif i % 3 == 1:
                    await store.rewind(sid, keep_entries=4)
                await store.clear(sid)

        await asyncio.gather(*(worker(i) for i in range(6)))
        await assert_checked(one)
        for i in (0, 3):
            for round_ in range(3):
                assert len(await SQLSession(two).load(f"w{i}-f{round_}")) == 8
                await SQLSession(one).clear(f"w{i}-f{round_}")
        await assert_checked(one)
        assert await contents_of(one) == {}


@pytest.mark.parametrize("kind", KINDS)
async def test_every_path_that_drops_or_replaces_documents_keeps_every_count(
    kind: str, tmp_path: Path
) -> None:
    """One sequence over every path that adds, drops or replaces shareable documents,
    the counts recounted after each step: session appends (replayed, refused), the Raw
    Log (keyed replays, a refused parent, snapshots, fork, delete), checkpoints (heads
    replaced, outcomes replaced, runs deleted, a rewind that deletes them), a prune, an
    export imported into a database holding some of the values already, a copy into
    another, and rekeys there and back."""
    async with (
        database(kind, tmp_path, "db") as url,
        database(kind, tmp_path, "into") as into_url,
        database(kind, tmp_path, "copy") as copy_url,
        Database(url, **OPTIONS) as db,
    ):
        store, raw, cp = SQLSession(db), SQLSessionStorage(db), SQLCheckpointer(db)
        nan = {"not a number": float("nan")}
        steps: list[str] = []

        async def step(name: str, act: Awaitable[object]) -> None:
            await act
            steps.append(name)
            try:
                await assert_checked(db)
            except AssertionError as exc:
                raise AssertionError(f"after {steps}: {exc}") from exc

        await step("append", store.append("s", run_of("1", BIG), run_id="r1"))
        await step("replay", store.append("s", run_of("x", OTHER), run_id="r1"))
        with pytest.raises(UserError):
            await store.append("s", [*run_of("2", OTHER), result("n", BIG, raw=nan)], run_id="r2")
        await step("refused", store.append("s", run_of("2", OTHER), run_id="r2"))
        await step("raw", raw.append("z", "q1", result("c1", BIG), idempotency_key="k1"))
        await step("keyed replay", raw.append("z", "q1", result("c1", OTHER), idempotency_key="k1"))
        with pytest.raises(UserError):
            await raw.append("z", "q2", result("c2", OTHER), parent_session_id="s")
        await step("raw 2", raw.append("z", "q2", say(BIG)))
        await step("raw fork", raw.fork("z", "y", keep_entries=1))
        await step("snapshot", raw.snapshot("z", CompactedMessage(content=BIG), 1, 0))
        await step("raw delete", raw.delete_session("z"))

        for turn in range(3):
            await step("checkpoint", cp.append("run", [result(f"c{turn}", BIG)], head(turn)))
        await step("linked", cp.append("run-s", [result("c", OTHER)], head(1), session_id="s"))
        for output in (BIG, BIG, OTHER, "short", BIG):
            await step(
                "outcome",
                cp.run_effect(
                    "run", "e1", "read", lambda _, o=output: o, lambda v: result("e1", v)
                ),
            )
        await step("run deleted", cp.delete("run"))
        await store.append("s", run_of("3", BIG), run_id="run-s")
        await step("rewind with runs", store.rewind("s", keep_entries=4, checkpointer=cp))
        await step("fork", store.fork("s", "f", keep_entries=3))
        await step("trim", store.trim_tool_results("f", keep_chars=10, keep_runs=0))
        await cp.append("old-run", [result("c", OTHER)], head(1, "completed"))
        old = utcnow() - timedelta(days=30)
        await db.write(
            lambda conn: conn.execute(
                update(sessions).where(sessions.c.session_id == "f").values(updated_at=old)
            )
        )
        await step("prune", prune(db, older_than=timedelta(days=7)))
        assert await store.load("f") == []

        path = tmp_path / "export.jsonl"
        await export(db, path)
        async with Database(into_url, **OPTIONS) as into:
            await SQLSession(into).append("held", run_of("h", BIG), run_id="h1")
            await import_file(into, path)
            await import_file(into, path)  # nothing new: nothing counted again
            await assert_checked(into)
            await copy_database(into, copy_url)
        async with Database(copy_url, **OPTIONS, encryption_keys=[KEY1]) as copied:
            await rekey(copied)
            await assert_checked(copied)
            held = await SQLSession(copied).load("held")
        async with Database(copy_url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as copied:
            await rekey(copied, batch_size=3)
            await assert_checked(copied)
        async with Database(copy_url, compression=False) as copied:
            await rekey(copied, decryption_keys=[KEY2])
            await assert_checked(copied)
            assert await contents_of(copied) == {}
            assert await SQLSession(copied).load("held") == held

        await step("clear", store.clear("s"))
        await step("delete", raw.delete_session("y"))
        await step("last runs", cp.delete("old-run"))
        assert await contents_of(db) == {}


async def test_the_check_names_a_missing_value_and_how_many_references_name_it(
    tmp_path: Path,
) -> None:
    """A value deleted by other means is named, with its references counted in words
    that agree with their number."""
    async with Database(tmp_path / "db.sqlite3", **OPTIONS) as db:
        store = SQLSession(db)
        await store.append("one", run_of("1", BIG), run_id="r1")
        await store.append("two", run_of("2", OTHER), run_id="r1")
        await store.append("two", run_of("3", OTHER), run_id="r2")

        def forget(conn: Connection) -> None:
            conn.execute(delete(contents))

        await db.write(forget)
        details = sorted(m.detail for m in await counter_mismatches(db))
        assert [detail.split(", and ")[1] for detail in details] == sorted(
            ["1 reference names it", "2 references name it"]
        )


EDITS = {
    "rewind": lambda db: SQLSession(db).rewind("s", keep_entries=4),
    "clear": lambda db: SQLSession(db).clear("s"),
    "raw delete": lambda db: SQLSessionStorage(db).delete_session("s"),
    "fork": lambda db: SQLSession(db).fork("s", "f", keep_entries=8),
}


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("kind", SERVERS)
async def test_edits_that_meet_a_rekey_of_their_rows_keep_every_count(
    kind: str, edit: str, tmp_path: Path
) -> None:
    """The other edits that release what they drop (or count what they copy) meet a
    rekey as the trim above does: started while the rekey holds the session's rows
    locked, not yet rewritten. Whatever they wait for (or a deadlock one of them is
    rolled back for, and run again), every count is true after, and nothing anyone
    names is deleted."""
    async with database(kind, tmp_path, "db") as url:
        copied, kept = await two_sessions(url, **OPTIONS, encryption_keys=[KEY1])
        async with Database(url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as db:
            asked, go, edited = threading.Event(), threading.Event(), threading.Event()
            rekeying = asyncio.ensure_future(
                asyncio.to_thread(rekey_and_hold, url, asked, go, edited)
            )
            try:
                assert await asyncio.to_thread(asked.wait, 120)
                editing = asyncio.ensure_future(EDITS[edit](db))

                async def stuck() -> bool:
                    if editing.done():
                        return True
                    return await _waiting(db, "lovia_messages", any_statement=True)

                await eventually(stuck)
                go.set()
                await editing
            finally:
                go.set()
                edited.set()
            failed: StoredValueError | None = None
            try:
                await rekeying
            except StoredValueError as exc:
                failed = exc
            await assert_checked(db)
            assert failed is None, failed
        async with Database(url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as fresh:
            assert await SQLSession(fresh).load("t") == kept
            if edit == "fork":  # copied as stored: a copy of a row not yet rekeyed
                assert await SQLSession(fresh).load("f") == copied


@pytest.mark.parametrize("kind", KINDS)
async def test_writes_that_fail_midway_count_nothing(kind: str, tmp_path: Path) -> None:
    """A write that fails after it counted (an import unit refused on a conflicting row,
    keyed Raw Log appends racing on one key: the loser's row breaks the key's unique
    index) leaves no count behind."""
    async with (
        database(kind, tmp_path, "db") as url,
        Database(url, **OPTIONS) as one,
        Database(url, **OPTIONS) as two,
    ):
        cp = SQLCheckpointer(one)
        await SQLSession(one).append("s", run_of("1", BIG), run_id="r1")
        await cp.append("run", [result("c", BIG)], head(1))
        path = tmp_path / "export.jsonl"
        await export(one, path)
        await SQLSession(one).clear("s")
        await cp.delete("run")
        await SQLSession(one).append("other", run_of("o", OTHER), run_id="r1")
        await cp.append("run", [result("c", OTHER)], head(2))  # differs: refused
        before = await contents_of(one)
        with pytest.raises(DestinationConflictError) as refused:
            await import_file(one, path)
        assert refused.value.kind == "run"  # after the session's rows were counted
        assert await SQLSession(one).load("s") == []
        assert await contents_of(one) == before
        await assert_checked(one)

        async def keyed(db: Database, n: int) -> int:
            entry = result(f"c{n}", BIG)
            return await SQLSessionStorage(db).append("z", "q", entry, idempotency_key="k")

        for _ in range(5):
            sequences = await asyncio.gather(
                *(keyed(one if n % 2 else two, n) for n in range(4)), return_exceptions=True
            )
            assert all(isinstance(s, int) for s in sequences), sequences
            assert len(set(sequences)) == 1, sequences
            assert await SQLSessionStorage(one).count_messages("z") == 1
            await assert_checked(one)
            await SQLSessionStorage(two).delete_session("z")
        assert await contents_of(one) == before


def rekey_paused_before_rewriting(
    url: str, paused: threading.Event, go: threading.Event, keys: bool = True
) -> int:
    """Rotate KEY1 to KEY2 from another Database (its own loop and thread), pausing its
    first batch of messages once it has counted the new forms and released the old ones
    (their values' rows locked, one deleted), just before it rewrites the rows."""

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("UPDATE lovia_messages") and not paused.is_set():
            paused.set()
            assert go.wait(120), "never let go"

    async def main() -> int:
        sealed = {"encryption_keys": [KEY2, KEY1]} if keys else {}
        async with Database(url, **OPTIONS, **sealed) as db:
            event.listen(db.sync_engine, "before_cursor_execute", before)
            report = await rekey(db, batch_size=8)
            return report.rewritten["lovia_messages"]

    return asyncio.run(main())


@pytest.mark.parametrize("kind", SERVERS)
async def test_a_fork_that_met_a_rekey_counts_the_values_its_copies_name(
    kind: str, tmp_path: Path
) -> None:
    """A fork copies its origin's rows as they are stored and counts once more the values
    they name (``retain_references``, an UPDATE that never stores a value). Started
    while a rekey has released the old forms' values but not yet rewritten the rows, it
    must not copy documents naming a value the rekey deletes."""
    async with database(kind, tmp_path, "db") as url:
        copied, _ = await two_sessions(url, **OPTIONS, encryption_keys=[KEY1])
        async with Database(url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as db:
            paused, go = threading.Event(), threading.Event()
            rekeying = asyncio.ensure_future(
                asyncio.to_thread(rekey_paused_before_rewriting, url, paused, go)
            )
            try:
                assert await asyncio.to_thread(paused.wait, 120)
                forking = asyncio.ensure_future(SQLSession(db).fork("s", "f", keep_entries=8))

                async def stuck() -> bool:
                    return forking.done() or await _waiting(db, "lovia_", any_statement=True)

                await eventually(stuck)
                go.set()
                assert await forking == 8
            finally:
                go.set()
            assert await rekeying == 12
            await assert_checked(db)
        async with Database(url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as fresh:
            assert await SQLSession(fresh).load("f") == copied


async def _prune_s(db: Database) -> None:
    idle = utcnow() - timedelta(days=30)
    await db.write(
        lambda conn: conn.execute(
            update(sessions).where(sessions.c.session_id == "s").values(updated_at=idle)
        )
    )
    report = await prune(db, older_than=timedelta(days=7))
    assert report.sessions == ["s"]


PAUSED_EDITS = {
    "trim": lambda db: SQLSession(db).trim_tool_results("s", keep_chars=100),
    "prune": _prune_s,
    **EDITS,
}


@pytest.mark.parametrize("edit", PAUSED_EDITS)
@pytest.mark.parametrize("kind", SERVERS)
async def test_edits_that_meet_a_rekey_between_its_release_and_its_rewrite(
    kind: str, edit: str, tmp_path: Path
) -> None:
    """Each edit of a session started while a rekey has released the old forms' values
    of its rows (one deleted) and not yet rewritten them: every count is true after, the
    rekey ends, and what another session names is still stored."""
    async with database(kind, tmp_path, "db") as url:
        _, kept = await two_sessions(url, **OPTIONS, encryption_keys=[KEY1])
        async with Database(url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as db:
            failed = await _edit_meeting_a_paused_rekey(db, url, PAUSED_EDITS[edit])
            await assert_checked(db)
            assert failed is None, failed
        async with Database(url, **OPTIONS, encryption_keys=[KEY2, KEY1]) as fresh:
            assert await SQLSession(fresh).load("t") == kept


@pytest.mark.parametrize("edit", PAUSED_EDITS)
@pytest.mark.parametrize("kind", SERVERS)
async def test_edits_that_meet_a_rekey_that_compresses_their_rows(
    kind: str, edit: str, tmp_path: Path
) -> None:
    """As above, the rekey compressing documents written plain (compression off): the
    rows it rewrites name shared values only once rewritten, so an edit that finds the
    rows to release by their stored form must wait for the rewrite all the same."""
    async with database(kind, tmp_path, "db") as url:
        _, kept = await two_sessions(url, compression=False)
        async with Database(url, **OPTIONS) as db:
            failed = await _edit_meeting_a_paused_rekey(db, url, PAUSED_EDITS[edit], False)
            assert failed is None, failed
            await assert_checked(db)
            assert await SQLSession(db).load("t") == kept


async def _edit_meeting_a_paused_rekey(
    db: Database, url: str, edit: Callable[[Database], Awaitable[Any]], *rekeying: Any
) -> StoredValueError | None:
    """``edit`` run on ``db`` while a rekey (``rekey_paused_before_rewriting``, with
    ``rekeying`` as its further arguments) has released its rows' former values and not
    yet rewritten them, the rekey let go once the edit waits (or ended); the rekey's
    ``StoredValueError``, if it met one."""
    paused, go = threading.Event(), threading.Event()
    running = asyncio.ensure_future(
        asyncio.to_thread(rekey_paused_before_rewriting, url, paused, go, *rekeying)
    )
    try:
        assert await asyncio.to_thread(paused.wait, 120)
        editing = asyncio.ensure_future(edit(db))

        async def stuck() -> bool:
            return editing.done() or await _waiting(db, "lovia_", any_statement=True)

        await eventually(stuck)
        go.set()
        await editing
    finally:
        go.set()
    try:
        await running
    except StoredValueError as exc:
        return exc
    return None
