"""``rekey`` (issue 33): every stored document written again as the Database says.

Rotation (a new key first, the old one removed afterwards, everything still read),
encryption turned on for rows written in clear, and off again down to plain JSON
text, after which revision 0010's downgrade goes through; a rekey killed with
SIGKILL mid-way leaves every batch whole and is finished by running it again,
which skips what is done; the command line's JSON, text and progress. On SQLite,
PostgreSQL and MariaDB. Rows are written through the contents API
(``stored_support``).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from lovia_store import Database, InputEntry, SQLSession, ToolCallEntry, ToolResultEntry
from lovia_store.db.documents import MARK, DocumentCodec
from lovia_store.db.encryption import EncryptionKey
from lovia_store.db.schema import alembic_config
from lovia_store.errors import EncryptionKeyError, UserError
from lovia_store.lifecycle import counter_mismatches, rekey
from stored_support import (
    DOCUMENTS,
    FORMS,
    KEY1,
    KEY2,
    KINDS,
    SECRET,
    THRESHOLD,
    assert_counts_true,
    cli,
    contents_of,
    database,
    decoded_rows,
    encoded,
    plain_world,
    shared_bytes,
    stored_texts,
    write_world,
)

HERE = Path(__file__).resolve().parent
ROTATING = {"compression_threshold": THRESHOLD, "encryption_keys": [KEY2, KEY1]}
ID1, ID2 = EncryptionKey.of(KEY1).id, EncryptionKey.of(KEY2).id


def key_id(stored: str) -> str | None:
    """The id of the key that sealed a stored document (None: not sealed)."""
    if not stored.startswith(MARK):
        return None
    flags, key, _ = stored[1:].split("\x1f", 2)
    return key if flags.endswith("e") else None


async def key_ids(db: Database) -> set[str | None]:
    return {key_id(text) for _, _, text in await stored_texts(db)}


async def forms_of(db: Database) -> set[str]:
    """The flags of every stored document in lovia-store's form."""
    return {text[1:].split("\x1f", 1)[0] for _, _, text in await stored_texts(db) if encoded(text)}


async def value_key_ids(db: Database) -> set[str | None]:
    return {d[1:9].decode() if d.startswith(b"e") else None for d in await shared_bytes(db)}


def sqlite_bytes(url: str) -> bytes:
    path = Path(url.removeprefix("sqlite+aiosqlite:///"))
    files = [path, path.with_name(path.name + "-wal")]
    return b"".join(f.read_bytes() for f in files if f.exists())


# -- rotation ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_keys_rotate_and_the_old_key_can_go(kind: str, tmp_path: Path) -> None:
    async with database(kind, tmp_path, "db") as url:
        async with Database(url, **FORMS["encrypted"]) as db:
            await write_world(db, "", "acme")
            assert await key_ids(db) == {ID1} and await value_key_ids(db) == {ID1}
        async with Database(url, **ROTATING) as db:
            report = await rekey(db, all_tenants=True, batch_size=5)
            assert report.tenant is None
            assert report.rewritten["lovia_messages"] == 24
            assert report.rewritten["lovia_run_entries"] == 8
            assert report.rows == 48  # every row holds a sealed document
            assert await key_ids(db) == {ID2}
            assert await value_key_ids(db) == {ID2}  # the old values went with their refs
            await assert_counts_true(db)
            again = await rekey(db, all_tenants=True)
            assert again.rows == 0
        async with Database(url, **FORMS["encrypted2"]) as db:  # the old key removed
            assert await decoded_rows(db) == plain_world("", "acme")
            assert await counter_mismatches(db, all_tenants=True) == []
        async with Database(url, **FORMS["encrypted"]) as db:  # the old key alone: refused
            with pytest.raises(EncryptionKeyError) as raised:
                await decoded_rows(db)
            assert raised.value.key_id == ID2


@pytest.mark.parametrize("kind", KINDS)
async def test_a_fork_made_during_a_rotation_is_rekeyed_too(kind: str, tmp_path: Path) -> None:
    """A fork copies stored text as it is: one made mid-walk, of rows not rewritten yet
    to a place already walked, is found by the walk that follows, and the old key can
    still go."""
    output = "".join(f"{i:04d} a file read by a tool, line after line\n" for i in range(40))
    runs = {
        sid: [
            InputEntry(role="user", content=f"read it ({sid})"),
            ToolCallEntry(call_id=f"c-{sid}", name="read", arguments="{}"),
            ToolResultEntry(call_id=f"c-{sid}", output=output),
        ]
        for sid in ("c", "m")
    }
    async with database(kind, tmp_path, "db") as url:
        async with Database(url, **FORMS["encrypted"]) as db:
            for sid, entries in runs.items():
                await SQLSession(db).append(sid, entries)
        forked: list[int] = []

        def fork_into_the_walked_part() -> None:
            async def fork() -> None:
                async with Database(url, **ROTATING) as other:
                    forked.append(await SQLSession(other).fork("m", "d", keep_entries=3))

            # From another Database and thread, between two of the rekey's batches.
            with concurrent.futures.ThreadPoolExecutor(1) as thread:
                thread.submit(asyncio.run, fork()).result()

        def progress(task: str, done: int, total: int) -> None:
            if task == "lovia_messages" and done == 4 and not forked:  # "c" done, in "m"
                fork_into_the_walked_part()

        async with Database(url, **ROTATING) as db:
            report = await rekey(db, batch_size=1, progress=progress)
            assert forked == [3]
            assert report.rewritten["lovia_messages"] == 6 + 2  # the fork's old rows too
            assert await key_ids(db) == {ID2} and await value_key_ids(db) == {ID2}
            await assert_counts_true(db)
        async with Database(url, **FORMS["encrypted2"]) as db:  # the old key removed
            for sid, entries in (*runs.items(), ("d", runs["m"])):
                assert await SQLSession(db).load(sid) == entries


@pytest.mark.parametrize("kind", KINDS)
async def test_one_tenant_is_rekeyed_unless_all_are_asked_for(kind: str, tmp_path: Path) -> None:
    async with database(kind, tmp_path, "db") as url:
        async with Database(url, **FORMS["encrypted"]) as db:
            await write_world(db, "", "acme")
        async with Database(url, **ROTATING) as db:
            report = await rekey(db, tenant="acme")
            assert report.tenant == "acme" and report.rows == 24
            by_tenant: dict[str, set[str | None]] = {}
            texts = await db.read(
                lambda conn: list(
                    conn.exec_driver_sql("SELECT tenant, entry_json FROM lovia_messages")
                )
            )
            for tenant, text in texts:
                by_tenant.setdefault(tenant, set()).add(key_id(text))
            assert by_tenant == {"": {ID1}, "acme": {ID2}}
            assert (await rekey(db)).rows == 24  # the default tenant's turn
            assert await key_ids(db) == {ID2}
            await assert_counts_true(db)
        with pytest.raises(UserError, match="batch_size"):
            await rekey(url, batch_size=0)


# -- encryption on and off ---------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_rows_written_in_clear_are_encrypted(kind: str, tmp_path: Path) -> None:
    async with database(kind, tmp_path, "db") as url, on_engine(url) as target:
        async with Database(target, **FORMS["plain"]) as db:
            await write_world(db, "", "acme")
            assert await key_ids(db) == {None} and await contents_of(db) == {}
        async with Database(target, **FORMS["encrypted"]) as db:
            report = await rekey(db, all_tenants=True)
            assert report.rows == 48 and report.vacuum is None
            texts = await stored_texts(db)
            assert all(key_id(text) == ID1 and SECRET not in text for _, _, text in texts)
            values = await shared_bytes(db)
            assert values and all(SECRET.encode() not in v for v in values)  # shared now
            assert await decoded_rows(db) == plain_world("", "acme")
            await assert_counts_true(db)
            if kind == "sqlite":  # gone from the tables, not from the file's free space
                assert SECRET.encode() in sqlite_bytes(url)
            again = await rekey(db, all_tenants=True, vacuum=True)
            assert again.rows == 0
            assert again.vacuum == ("full" if kind == "sqlite" else None)
        if kind == "sqlite":  # rewritten: nothing of the clear text is left
            assert SECRET.encode() not in sqlite_bytes(url)


@contextlib.asynccontextmanager
async def on_engine(url: str) -> AsyncIterator[Any]:
    """``url``, or on SQLite an engine whose connections do not erase what they delete
    (``secure_delete`` off, as many builds have it): the clear text stays in the
    file's free space until the rekey's vacuum rewrites it."""
    if not url.startswith("sqlite"):
        yield url
        return
    engine = create_async_engine(url, poolclass=NullPool)

    @event.listens_for(engine.sync_engine, "connect")
    def _keep_deleted(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA secure_delete = 0")

    try:
        yield engine
    finally:
        await engine.dispose()


def downgrade(url: str, revision: str) -> None:
    cfg = alembic_config()
    cfg.cmd_opts = argparse.Namespace(x=[f"url={url}"])
    command.downgrade(cfg, revision)


@pytest.mark.parametrize("kind", KINDS)
async def test_encrypted_rows_go_back_to_plain_json_and_0010_downgrades(
    kind: str, tmp_path: Path
) -> None:
    async with database(kind, tmp_path, "db") as url:
        async with Database(url, **FORMS["encrypted"]) as db:
            await write_world(db, "", "acme")
        with pytest.raises(RuntimeError, match="rekey --no-compression"):
            await asyncio.to_thread(downgrade, url, "0009")
        async with Database(url, compression=False) as keyless:
            before = await stored_texts(keyless)
            with pytest.raises(EncryptionKeyError) as raised:  # it cannot open them
                await rekey(keyless, all_tenants=True)
            assert raised.value.row and raised.value.key_id == ID1
            assert await stored_texts(keyless) == before  # its batch left as it was
            report = await rekey(keyless, all_tenants=True, decryption_keys=[KEY1])
            assert report.rows == 48
            assert not any(encoded(text) for _, _, text in await stored_texts(keyless))
            assert await contents_of(keyless) == {}
            assert await decoded_rows(keyless) == plain_world("", "acme")
        await asyncio.to_thread(downgrade, url, "0009")


@pytest.mark.parametrize("kind", KINDS)
async def test_long_plain_rows_are_compressed_and_compressed_ones_written_plain(
    kind: str, tmp_path: Path
) -> None:
    async with database(kind, tmp_path, "db") as url:
        async with Database(url, **FORMS["plain"]) as db:
            await write_world(db)
        async with Database(url, **FORMS["compressed"]) as db:
            report = await rekey(db)
            codec = DocumentCodec(threshold=THRESHOLD)
            long = [  # the rows holding a document long enough, and that compresses
                row
                for row in plain_world()["lovia_messages"]
                if any(
                    row[c] is not None and encoded(codec.encode("", row[c]).text)
                    for c in DOCUMENTS["lovia_messages"]
                )
            ]
            assert 0 < len(long) < 12 and report.rewritten["lovia_messages"] == len(long)
            texts = await stored_texts(db)
            assert all(encoded(text) for _, _, text in texts if len(text) > 200)
            assert not any(key_id(text) for _, _, text in texts)
            assert await contents_of(db)
            await assert_counts_true(db)
            assert (await rekey(db)).rows == 0
        async with Database(url, **FORMS["plain"]) as db:
            await rekey(db)
            assert not any(encoded(text) for _, _, text in await stored_texts(db))
            assert await contents_of(db) == {}
            assert await decoded_rows(db) == plain_world()


@pytest.mark.parametrize("kind", KINDS)
async def test_sealed_rows_are_written_whole_without_compression_and_compressed_again(
    kind: str, tmp_path: Path
) -> None:
    """With the same key, ``compression=False`` writes every sealed document whole (flags
    ``e``), releasing every shared value, and compression on compresses them again."""
    whole = {**FORMS["encrypted"], "compression": False}
    async with database(kind, tmp_path, "db") as url:
        async with Database(url, **FORMS["encrypted"]) as db:
            await write_world(db)
            assert await contents_of(db)
            written = await forms_of(db)
            assert {"re", "ze"} <= written
        async with Database(url, **whole) as db:
            report = await rekey(db)
            assert report.rewritten["lovia_messages"] > 0
            texts = await stored_texts(db)
            assert all(text.startswith(f"{MARK}e\x1f{ID1}\x1f") for _, _, text in texts)
            assert await contents_of(db) == {}
            assert await decoded_rows(db) == plain_world()
            await assert_counts_true(db)
            assert (await rekey(db)).rows == 0
        async with Database(url, **FORMS["encrypted"]) as db:
            report = await rekey(db)
            assert report.rewritten["lovia_messages"] > 0
            texts = await stored_texts(db)
            assert await forms_of(db) == written  # as a write with these options stores them
            assert all(key_id(text) == ID1 for _, _, text in texts)
            assert await contents_of(db)
            assert await decoded_rows(db) == plain_world()
            await assert_counts_true(db)
            assert (await rekey(db)).rows == 0  # what does not compress is left alone


# -- killed mid-way ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
async def test_a_rekey_killed_mid_way_is_finished_by_running_it_again(
    kind: str, tmp_path: Path
) -> None:
    sizes = {"sessions": 40, "messages": 30}
    async with database(kind, tmp_path, "db") as url:
        async with Database(url, **FORMS["encrypted"]) as db:
            await write_world(db, "", "acme", **sizes)
        async with Database(url, **FORMS["encrypted"]) as db:
            rows = await decoded_rows(db)
            total = sum(len(rows[name]) for name in FORMS_TABLES)
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "rekey_child.py"),
            url,
            KEY2,
            KEY1,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(HERE)},
        )
        seen: list[tuple[str, int, int]] = []
        try:
            assert child.stdout is not None
            while True:
                line = await asyncio.wait_for(child.stdout.readline(), 120)
                assert line and line != b"done\n", "the rekey ended before it could be killed"
                if line == b"paused\n":
                    break
                task, done, whole = line.decode().split()
                seen.append((task, int(done), int(whole)))
            child.send_signal(signal.SIGKILL)  # inside lovia_messages' 61st batch
            await asyncio.wait_for(child.wait(), 30)
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        assert child.returncode == -signal.SIGKILL
        assert ("lovia_messages", 0, 2 * 40 * 30) in seen  # its total, before it began
        async with Database(url, **ROTATING) as db:
            # every batch whole: both keys in use, every row read, every count true
            half = await stored_texts(db)
            assert {key_id(text) for _, _, text in half} == {ID1, ID2}
            done_rows = await rows_sealed_with(db, ID2)
            assert 0 < done_rows < total
            assert await decoded_rows(db) == plain_world("", "acme", **sizes)
            await assert_counts_true(db)
            assert await counter_mismatches(db, all_tenants=True) == []
            report = await rekey(db, all_tenants=True, batch_size=50)
            assert report.rows == total - done_rows  # what was done is skipped
            assert await key_ids(db) == {ID2}
        async with Database(url, **FORMS["encrypted2"]) as db:
            assert await decoded_rows(db) == plain_world("", "acme", **sizes)
            await assert_counts_true(db)


FORMS_TABLES = (
    "lovia_messages",
    "lovia_session_runs",
    "lovia_snapshots",
    "lovia_run_heads",
    "lovia_run_entries",
    "lovia_tool_effects",
)


async def rows_sealed_with(db: Database, key: str) -> int:
    """Rows whose documents are sealed with ``key`` (a batch rewrites a row whole)."""

    def work(conn: Any) -> int:
        found = 0
        for table, columns in DOCUMENTS.items():
            first = columns[0]
            for (text,) in conn.exec_driver_sql(f"SELECT {first} FROM {table}"):
                found += key_id(text) == key
        return found

    return int(await db.read(work))


# -- the command line --------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_the_command_rotates_decrypts_and_reports_as_json(kind: str, tmp_path: Path) -> None:
    async with database(kind, tmp_path, "db") as url:
        async with Database(url, **FORMS["encrypted"]) as db:
            await write_world(db, "", "acme")
        code, out = await cli(
            "rekey", url, "--encryption-key", KEY2, "--encryption-key", KEY1, "--all-tenants",
            "--json", "--batch-size", "7",
        )  # fmt: skip
        assert code == 0, out
        document = json.loads(out)
        assert document["status"] == "ok" and document["tenant"] is None
        assert document["rows"] == 48 and document["rewritten"]["lovia_messages"] == 24
        async with Database(url, **FORMS["encrypted2"]) as db:
            assert await key_ids(db) == {ID2}
        # the keys from the environment, comma-separated; nothing left to do
        code, out = await cli(
            "rekey", url, "--all-tenants", env={"LOVIA_STORE_ENCRYPTION_KEYS": f"{KEY2}, {KEY1}"}
        )
        assert code == 0 and "rewrote 0 row(s)" in out and "already as the options say" in out
        # a key the documents were not sealed with: exit 5, the row named
        code, out = await cli("rekey", url, "--all-tenants", "--json", "--encryption-key", KEY1)
        assert code == 5
        failure = json.loads(out)
        assert failure["error"] == "EncryptionKeyError" and ID2 in failure["message"]
        # plain JSON text back, the old key only opening
        code, out = await cli(
            "rekey", url, "--all-tenants", "--no-compression", "--decryption-key", KEY2
        )
        assert code == 0, out
        assert "rewrote 48 row(s)" in out and "lovia_messages: 24" in out
        async with Database(url) as db:
            assert not any(encoded(text) for _, _, text in await stored_texts(db))
            assert await decoded_rows(db) == plain_world("", "acme")
        code, out = await cli("rekey", url, "--encryption-key", "not base64!")
        assert code == 2


def test_the_command_shows_its_progress_on_a_terminal(tmp_path: Path) -> None:
    from test_cli_terminal import on_terminal, piped, visible

    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite3'}"

    async def write() -> None:
        async with Database(url, **FORMS["encrypted"]) as db:
            await write_world(db, sessions=10, messages=30)

    asyncio.run(write())
    code, screen = on_terminal(
        "rekey", url, "--encryption-key", KEY2, "--encryption-key", KEY1, "--batch-size", "20",
        cwd=tmp_path, columns=120,
    )  # fmt: skip
    assert code == 0, screen
    shown = visible(screen)
    assert b"\x1b[?25l" in screen  # a live display ran
    assert "rekeying " in shown
    assert "lovia_messages" in shown and "300/300" in shown
    assert "rewrote 360 row(s)" in shown  # 300 messages, 20 run entries, 10 of the rest
    again = piped("rekey", url, "--encryption-key", KEY2, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stderr == b"" and b"rewrote 0 row(s)" in again.stdout


# -- what is current -------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"encryption_keys": [KEY2, KEY1]},
        {"encryption_keys": [KEY1]},
        {"compression": True},
        {"compression": False},
        {"encryption_keys": [KEY1], "compression": False},
    ],
    ids=["rotating", "sealing", "compressing", "plain", "sealing-whole"],
)
def test_the_rows_a_batch_selects_in_sql_are_those_not_current(options: dict[str, Any]) -> None:
    """The SQL test on a stored text's head selects every document the Python test
    calls not current, and besides at most long plain ones (which may not compress).
    Sealed documents are current only as the options write them: whole (flags ``e``)
    without compression, and with it unless long enough to compress."""
    from sqlalchemy import Column, MetaData, Table, Text, create_engine, insert, select

    from lovia_store.lifecycle.rekeying import _Form

    texts: set[str] = set()
    long = json.dumps({"output": f"{SECRET} " * 40, "other": "x" * 100})
    short = json.dumps({"a": 1})
    for keys in (None, [KEY1], [KEY2]):
        for compression in (True, False):
            codec = DocumentCodec(
                threshold=THRESHOLD, compression=compression, encryption_keys=keys
            )
            for text in (long, short):
                for share in (True, False):
                    texts.add(codec.encode("t", text, shareable=share).text)
    texts.add(json.dumps({"n": "y" * 80}))  # long, plain; compresses
    table = Table("docs", MetaData(), Column("doc", Text))
    engine = create_engine("sqlite://")
    form = _Form(DocumentCodec(threshold=THRESHOLD, **options), "t")
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(insert(table), [{"doc": t} for t in texts])
        selected = set(conn.execute(select(table.c.doc).where(form.pending(table.c.doc))).scalars())
    stale = {t for t in texts if not form.current(t)}
    assert stale and stale <= selected
    assert all(not t.startswith(MARK) and len(t) >= THRESHOLD for t in selected - stale)
    assert texts - selected  # some are current
