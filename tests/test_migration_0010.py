"""Revision 0010 creates ``lovia_contents``, on every SQL backend: a database at 0009 with
rows (two tenants, long tool outputs) upgrades with every row as it was, read back
exactly through an encrypting, compressing Database; new documents are then stored in
the codec's form. The downgrade is refused, with nothing changed, while any document
is in that form or any value is shared, and goes through once every document is plain
JSON again and the table is empty. A run that stopped half way is finished by the next.

New documents are written here with ``store_documents`` (the API every store uses) on
the rows' own tables, not through the stores: what the stores write is their suites'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Column, Connection, Table, insert, inspect, select, text, update
from sqlalchemy.sql.elements import ColumnElement

from helpers import call, result, say, user
from lovia_store import (
    Database,
    RunHead,
    SchemaNotCurrentError,
    SQLCheckpointer,
    SQLSession,
    check,
    upgrade,
)
from lovia_store.db import tables
from lovia_store.db.contents import read_documents, release_documents, store_documents
from lovia_store.db.documents import MARK
from lovia_store.db.encryption import generate_encryption_key
from lovia_store.db.schema_state import HEAD_REVISION, scripts
from lovia_store.entries import entry_to_json
from test_migration_0009 import TABLES, _alembic, _on, _revision, _rows
from test_schema_drift import differences

CONTENTS = "lovia_contents"
DOCUMENTS: dict[str, tuple[str, ...]] = scripts().get_revision("0010").module.DOCUMENTS
"""Every JSON column, by table: what the downgrade looks through (tests/test_frozen_
migrations.py checks it against tables.py)."""
TENANTS = ("", "acme")
NOW = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
OUTPUT = "line of a file the agent read, long enough to be shared once\n" * 6
"""A tool output read twice in every session: longer than the threshold (64)."""
KEY = generate_encryption_key()


@pytest.fixture
def url(empty_database_url: str) -> str:
    return empty_database_url


def history(tenant: str) -> list[Any]:
    return [
        user(f"read it, {tenant or 'default'}"),
        call("c1", "read_file"),
        result("c1", OUTPUT),
        call("c2", "read_file"),
        result("c2", OUTPUT),
        say("done"),
    ]


def _rows_at_0009(conn: Connection) -> None:
    """What 0009's stores wrote: plain JSON text in every document column, in two tenants
    (a session with its messages, segment and snapshot; a run with its head, entries,
    a tool effect and a lease), the long tool output in several documents."""
    for tenant in TENANTS:
        entries = history(tenant)
        conn.execute(
            insert(tables.sessions),
            {
                "tenant": tenant,
                "session_id": "s1",
                "last_sequence": len(entries),
                "message_count": len(entries),
                "run_count": 1,
                "created_at": NOW,
                "updated_at": NOW,
            },
        )
        conn.execute(
            insert(tables.messages),
            [
                {
                    "tenant": tenant,
                    "session_id": "s1",
                    "sequence": number,
                    "request_id": "r1",
                    "run_id": "r1",
                    "entry_type": entry.type,
                    "call_id": getattr(entry, "call_id", None),
                    "entry_json": entry_to_json(entry),
                    "metadata_json": '{"note": "' + "m" * 80 + '"}' if number == 1 else None,
                    "tags_json": '["a", "b"]' if number == 1 else None,
                    "envelope_json": '{"id": "e1"}' if number == 1 else None,
                    "created_at": NOW,
                }
                for number, entry in enumerate(entries, start=1)
            ],
        )
        conn.execute(
            insert(tables.session_runs),
            {
                "tenant": tenant,
                "session_id": "s1",
                "run_id": "r1",
                "position": 1,
                "first_sequence": 1,
                "entry_count": len(entries),
                "meta_json": '{"model": "m1"}',
                "created_at": NOW,
            },
        )
        conn.execute(
            insert(tables.snapshots),
            {
                "tenant": tenant,
                "session_id": "s1",
                "version": 1,
                "snapshot_id": "snap-1",
                "compacted_through_sequence": 2,
                "summary_json": '{"summary": "' + "s" * 100 + '"}',
                "envelope_json": "{}",
                "created_at": NOW,
                "updated_at": NOW,
            },
        )
        conn.execute(
            insert(tables.run_heads),
            {
                "tenant": tenant,
                "run_id": "run-1",
                "status": "running",
                "head_json": RunHead(agent_name=f"agent {tenant}").model_dump_json(),
                "entry_count": len(entries),
                "created_at": NOW,
                "updated_at": NOW,
            },
        )
        conn.execute(
            insert(tables.run_entries),
            [
                {"tenant": tenant, "run_id": "run-1", "position": n, "entry_json": entry_to_json(e)}
                for n, e in enumerate(entries)
            ],
        )
        conn.execute(
            insert(tables.tool_effects),
            {
                "tenant": tenant,
                "run_id": "run-1",
                "call_id": "c1",
                "tool_name": "read_file",
                "started_at": NOW,
                "result_json": '{"output": ' + f'"{OUTPUT!r}"' + "}",
            },
        )
        conn.execute(
            insert(tables.run_leases),
            {
                "tenant": tenant,
                "run_id": "run-1",
                "token": 1,
                "lease_id": "l" * 32,
                "holder": "h",
                "expires_ms": 0,
            },
        )


async def _a_0009_database(url: str) -> dict[str, list[tuple[Any, ...]]]:
    await asyncio.to_thread(_alembic, url, "upgrade", "0009")
    assert await _revision(url) == "0009"
    await _on(url, _rows_at_0009, write=True)
    rows: dict[str, list[tuple[Any, ...]]] = await _on(url, _rows)
    assert all(rows.values())
    return rows


def _documents(conn: Connection) -> dict[tuple[str, str], list[tuple[str, Any, str | None]]]:
    """Every JSON document as stored, by (table, column): (tenant, the row's key, text)."""
    found = {}
    for name, columns in DOCUMENTS.items():
        table = tables.metadata.tables[name]
        key = _key_columns(table)
        ordered = select(table.c.tenant, *key, *(table.c[c] for c in columns)).order_by(
            table.c.tenant, *key
        )
        rows = conn.execute(ordered).all()
        for at, column in enumerate(columns):
            found[(name, column)] = [
                (row[0], tuple(row[1 : 1 + len(key)]), row[1 + len(key) + at]) for row in rows
            ]
    return found


def _key_columns(table: Table) -> list[Column[Any]]:
    return [c for c in table.primary_key.columns if c.name != "tenant"]


def _row(table: Table, tenant: str, key: tuple[Any, ...]) -> list[ColumnElement[bool]]:
    """The WHERE clause of one row: its tenant and its key (as ``_documents`` names it)."""
    pairs = zip(_key_columns(table), key, strict=True)
    return [table.c.tenant == tenant, *(column == value for column, value in pairs)]


def _contents(conn: Connection) -> list[tuple[str, str, int]]:
    c = tables.contents.c
    rows = conn.execute(select(c.tenant, c.digest, c.refs).order_by(c.tenant, c.digest))
    return [(t, d, int(r)) for t, d, r in rows]


def _tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


def _decoded(db_documents: dict[Any, Any]) -> Callable[[Connection], dict[Any, list[Any]]]:
    """Every document read back through the connection's codec, tenant by tenant."""

    def work(conn: Connection) -> dict[Any, list[Any]]:
        out = {}
        for place, rows in db_documents.items():
            texts = [read_documents(conn, tenant, [stored])[0] for tenant, _key, stored in rows]
            out[place] = [(t, k, text) for (t, k, _), text in zip(rows, texts, strict=True)]
        return out

    return work


def _coded(url: str, **options: Any) -> Database:
    """A Database that compresses from 64 characters on and encrypts (unless told)."""
    return Database(url, compression_threshold=64, encryption_keys=[KEY], **options)


async def _new_writes(db: Database) -> list[str]:
    """New run entries in each tenant, written as every store writes them: through the
    codec, the long output shared. Returns what the columns hold."""
    stored: list[str] = []
    for tenant in TENANTS:
        texts = [entry_to_json(result("c9", OUTPUT)), entry_to_json(say("short"))]

        def work(conn: Connection, tenant: str = tenant, texts: list[str] = texts) -> list[str]:
            encoded = store_documents(conn, tenant, texts, shareable=True)
            conn.execute(
                insert(tables.run_entries),
                [
                    {"tenant": tenant, "run_id": "run-1", "position": 100 + n, "entry_json": s}
                    for n, s in enumerate(encoded)
                ],
            )
            return encoded

        stored += await db.write(work, tenant=tenant)
    return stored


async def _refuse_downgrade(url: str, where: str) -> None:
    """0010's downgrade refuses, naming ``where``, and changes nothing."""
    before = await _on(url, _documents), await _on(url, _contents), await _on(url, _tables)
    with pytest.raises(RuntimeError, match=rf"below 0010.*\({where}\).*nothing was changed"):
        await asyncio.to_thread(_alembic, url, "downgrade", "0009")
    assert await _revision(url) == "0010"
    after = await _on(url, _documents), await _on(url, _contents), await _on(url, _tables)
    assert after == before


async def _write_back_plain(url: str) -> None:
    """Every document rewritten as plain JSON text and its shared values released, as a
    Database with ``compression=False`` and no keys writes them (the state ``rekey
    --no-compression`` leaves), through the SQL any host could run."""
    async with _coded(url) as reading, Database(url, compression=False) as plain:
        found = await reading.read(_documents)
        texts = await reading.read(_decoded(found))

        def rewrite(conn: Connection) -> None:
            for (name, column), rows in found.items():
                table = tables.metadata.tables[name]
                for (tenant, key, stored), (_, _, text_) in zip(
                    rows, texts[(name, column)], strict=True
                ):
                    if stored is None or not stored.startswith(MARK):
                        continue
                    (written,) = store_documents(conn, tenant, [text_])
                    assert written == text_  # compression=False, no keys: as it is
                    release_documents(conn, tenant, [stored])
                    row = _row(table, tenant, key)
                    conn.execute(update(table).where(*row).values({column: written}))

        await plain.write(rewrite)
    assert await _on(url, _contents) == []


def _forget_acme(conn: Connection) -> None:
    """Tenant "acme" deleted, children first: 0009's downgrade refuses another tenant."""
    for name in reversed(TABLES):
        conn.execute(text(f"DELETE FROM {name} WHERE tenant = 'acme'"))


def _rewrite(
    name: str, column: str, tenant: str, key: tuple[Any, ...], text_: str, *, encode: bool
) -> Callable[[Connection], None]:
    """Work that writes ``text_`` into one row's column: in the codec's form (compressed
    or sealed, not shared), or as it is."""
    table = tables.metadata.tables[name]

    def work(conn: Connection) -> None:
        stored = store_documents(conn, tenant, [text_])[0] if encode else text_
        assert stored.startswith(MARK) == encode
        conn.execute(update(table).where(*_row(table, tenant, key)).values({column: stored}))

    return work


# -- up from 0009 ---------------------------------------------------------------------------------


async def test_rows_written_at_0009_read_exactly_after_the_upgrade(url: str) -> None:
    before = await _a_0009_database(url)
    plain = await _on(url, _documents)

    report = await upgrade(url)
    assert (report.from_revision, report.to_revision) == ("0009", HEAD_REVISION)
    assert await _revision(url) == HEAD_REVISION
    assert await _on(url, _rows) == before  # nothing rewritten
    assert await _on(url, _contents) == []
    assert await _on(url, differences) == []

    async with _coded(url) as db:
        # Old plain rows read as they are, whatever the Database's codec.
        assert await db.read(_decoded(plain)) == plain
        for tenant in TENANTS:
            session = SQLSession(db, tenant=tenant)
            assert await session.load("s1") == history(tenant)
            run = await SQLCheckpointer(db, tenant=tenant).load("run-1")
            assert run is not None and run.entries == history(tenant)
            assert run.agent_name == f"agent {tenant}"

        # New writes use the codec: sealed, the long output stored once per tenant.
        stored = await _new_writes(db)
        assert all(s.startswith(MARK) and OUTPUT[:40] not in s for s in stored)
        counted = await db.read(_contents)
        assert [(tenant, refs) for tenant, _, refs in counted] == [("", 1), ("acme", 1)]

        # Old and new in one read: each exactly as written.
        found = await db.read(_documents)
        texts = await db.read(_decoded(found))
        entries = [text_ for _, _, text_ in texts[("lovia_run_entries", "entry_json")]]
        expected = [entry_to_json(e) for e in history("")]
        expected += [entry_to_json(result("c9", OUTPUT)), entry_to_json(say("short"))]
        expected += [entry_to_json(e) for e in history("acme")]
        expected += [entry_to_json(result("c9", OUTPUT)), entry_to_json(say("short"))]
        assert entries == expected


# -- down to 0009 ---------------------------------------------------------------------------------


async def test_the_downgrade_is_refused_while_a_document_is_encoded_or_a_value_shared(
    url: str,
) -> None:
    await _a_0009_database(url)
    await upgrade(url)
    async with _coded(url) as db:
        await _new_writes(db)
    # Shared values and documents that name them.
    await _refuse_downgrade(url, "lovia_run_entries.entry_json")
    await _write_back_plain(url)
    plain = await _on(url, _documents)

    # Each JSON column in turn holding one document in the codec's form (not shared:
    # compressed or sealed), lovia_contents empty: refused, naming it.
    async with _coded(url) as db:
        for (name, column), rows in plain.items():
            tenant, key, text_ = next(r for r in rows if r[2] is not None)
            await db.write(_rewrite(name, column, tenant, key, text_, encode=True))
            await _refuse_downgrade(url, f"{name}.{column}")
            await db.write(_rewrite(name, column, tenant, key, text_, encode=False))

    # A shared value alone, every document plain (a rewrite by hand that did not release
    # it): refused too, 0009 keeps no such table.
    def stray(conn: Connection) -> None:
        conn.execute(
            insert(tables.contents),
            {"tenant": "", "digest": "0" * 64, "refs": 1, "size": 1, "data": b"p1"},
        )

    await _on(url, stray, write=True)
    await _refuse_downgrade(url, CONTENTS)
    await _on(url, lambda c: c.execute(text(f"DELETE FROM {CONTENTS}")), write=True)

    # Every document plain and the table empty: the downgrade goes through.
    rows = await _on(url, _rows)
    await asyncio.to_thread(_alembic, url, "downgrade", "0009")
    assert await _revision(url) == "0009"
    assert CONTENTS not in await _on(url, _tables)
    assert await _on(url, _rows) == rows
    assert await _on(url, _documents) == plain


async def test_down_past_0010_and_back_up(url: str) -> None:
    before = await _a_0009_database(url)
    await upgrade(url)
    await asyncio.to_thread(_alembic, url, "downgrade", "0009")
    assert await _revision(url) == "0009"
    assert CONTENTS not in await _on(url, _tables)
    assert await _on(url, _rows) == before
    await upgrade(url)
    assert await _revision(url) == HEAD_REVISION
    assert await _on(url, _rows) == before
    assert await _on(url, differences) == []

    # Further in one command, through 0010 and 0009, once only the default tenant has
    # rows (0009 refuses another's), and up again.
    await _on(url, _forget_acme, write=True)
    default_only = await _on(url, _rows)
    await asyncio.to_thread(_alembic, url, "downgrade", "0008")
    assert await _revision(url) == "0008"
    assert CONTENTS not in await _on(url, _tables)
    await upgrade(url)
    assert await _revision(url) == HEAD_REVISION
    assert await _on(url, _rows) == default_only
    assert await _on(url, differences) == []


# -- half done ------------------------------------------------------------------------------------


async def test_a_half_failed_upgrade_is_finished_by_the_next(url: str) -> None:
    """The table created but 0009 still recorded (MySQL and MariaDB commit the CREATE
    TABLE at once; the run died before recording 0010): the next upgrade records it."""
    before = await _a_0009_database(url)
    await upgrade(url)
    await _on(
        url,
        lambda c: c.execute(text("UPDATE lovia_alembic_version SET version_num = '0009'")),
        write=True,
    )
    with pytest.raises(SchemaNotCurrentError):
        await check(url)
    report = await upgrade(url)
    assert (report.from_revision, report.to_revision) == ("0009", HEAD_REVISION)
    assert await _on(url, _rows) == before
    assert await _on(url, _contents) == []
    assert await _on(url, differences) == []


async def test_a_table_of_that_name_that_is_not_ours_is_refused(url: str) -> None:
    before = await _a_0009_database(url)
    await _on(
        url,
        lambda c: c.execute(text(f"CREATE TABLE {CONTENTS} (id INTEGER PRIMARY KEY)")),
        write=True,
    )
    with pytest.raises(RuntimeError, match=r"lovia_contents.*not lovia-store's.*nothing was"):
        await upgrade(url)
    assert await _revision(url) == "0009"
    assert await _on(url, _rows) == before
    columns = await _on(url, lambda c: [col["name"] for col in inspect(c).get_columns(CONTENTS)])
    assert columns == ["id"]


async def test_a_downgrade_through_0009_that_0009_refuses(url: str) -> None:
    """Down to 0008 in one command while tenant "acme" has rows: 0010's step lets it go,
    0009's refuses. SQLite and PostgreSQL roll all of it back; MariaDB has committed
    0010's DROP TABLE but not the version change: 0010 recorded without its table. The
    gate takes that for 0009, so the next upgrade runs 0010 again, and a downgrade run
    again (once "acme" is gone) goes on from 0009."""
    before = await _a_0009_database(url)
    await upgrade(url)
    with pytest.raises(RuntimeError, match=r"tenant 'acme'.*nothing was changed"):
        await asyncio.to_thread(_alembic, url, "downgrade", "0008")
    assert await _revision(url) == "0010"
    assert await _on(url, _rows) == before
    dialect = url.split("+")[0].split(":")[0]
    if dialect == "mysql":
        assert CONTENTS not in await _on(url, _tables)
        with pytest.raises(SchemaNotCurrentError) as caught:
            await check(url)
        assert (caught.value.found, caught.value.expected) == ("0009", "0010")
        report = await upgrade(url)
        assert (report.from_revision, report.to_revision) == ("0009", HEAD_REVISION)
    else:
        assert CONTENTS in await _on(url, _tables)
        await check(url)
    assert await _on(url, differences) == []
    assert await _on(url, _rows) == before

    # The same state again, then the downgrade run again once "acme" is gone.
    with pytest.raises(RuntimeError, match="tenant 'acme'"):
        await asyncio.to_thread(_alembic, url, "downgrade", "0008")

    await _on(url, _forget_acme, write=True)
    await asyncio.to_thread(_alembic, url, "downgrade", "0008")
    assert await _revision(url) == "0008"
    assert CONTENTS not in await _on(url, _tables)
    await upgrade(url)
    assert await _revision(url) == HEAD_REVISION
    assert await _on(url, differences) == []


@pytest.mark.parametrize("then", ["upgrade", "downgrade"])
async def test_0010_recorded_without_its_table_is_at_0009(url: str, then: str) -> None:
    """What the MariaDB case above leaves, made by hand on every backend: the gate takes
    it for 0009, and both an upgrade and a downgrade go on from there."""
    await _a_0009_database(url)
    await upgrade(url)
    await _on(url, lambda c: c.execute(text(f"DROP TABLE {CONTENTS}")), write=True)
    with pytest.raises(SchemaNotCurrentError) as caught:
        await check(url)
    assert caught.value.found == "0009"
    if then == "upgrade":
        report = await upgrade(url)
        assert (report.from_revision, report.to_revision) == ("0009", HEAD_REVISION)
        assert await _on(url, differences) == []
    else:
        await _on(url, _forget_acme, write=True)
        await asyncio.to_thread(_alembic, url, "downgrade", "0008")
        assert await _revision(url) == "0008"
