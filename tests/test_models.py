"""The ORM models are the schema's one description, and a host can query and join them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, ForeignKeyConstraint, String, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, selectinload
from sqlalchemy.pool import NullPool

from backends import Backend
from helpers import a_run
from lovia_store import (
    Database,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    entry_from_dict,
)
from lovia_store.db import tables
from lovia_store.db.contents import store_documents
from lovia_store.db.urls import to_url
from lovia_store.errors import EncryptionKeyError, UserError
from lovia_store.models import (
    ContentRow,
    Id,
    MessageRow,
    RunEntryRow,
    RunHeadRow,
    SessionRow,
    SessionRunRow,
    SnapshotRow,
    Tenant,
    ToolEffectRow,
    decode_documents,
    decode_documents_sync,
    metadata,
)
from stored_support import FORMS, KEY2, KINDS, database, plain_world, write_world


class HostBase(DeclarativeBase):
    pass


class Ticket(HostBase):
    """A host's own model, pointing at one of our sessions."""

    __tablename__ = "host_tickets"

    ticket_id: Mapped[int] = mapped_column(primary_key=True)
    subject: Mapped[str] = mapped_column(String(100))
    # Our types, so the join compares like with like (on MariaDB, the same collation);
    # a session is keyed by its tenant and its id.
    tenant: Mapped[str] = mapped_column(Tenant, default="")
    session_id: Mapped[str] = mapped_column(Id)
    session: Mapped[SessionRow] = relationship(SessionRow, lazy="raise")

    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant", "session_id"],
            [SessionRow.__table__.c.tenant, SessionRow.__table__.c.session_id],
        ),
    )


def test_the_tables_the_stores_use_are_the_models_tables() -> None:
    assert tables.metadata is metadata is SessionRow.metadata
    assert tables.sessions is SessionRow.__table__
    assert tables.messages is MessageRow.__table__
    assert set(metadata.tables) == {
        "lovia_schema",
        "lovia_sessions",
        "lovia_messages",
        "lovia_session_runs",
        "lovia_snapshots",
        "lovia_run_heads",
        "lovia_run_entries",
        "lovia_tool_effects",
        "lovia_run_leases",
        "lovia_contents",
    }
    assert tables.contents is ContentRow.__table__


@pytest.fixture
async def host_engine(sql_backend: Backend) -> AsyncIterator[AsyncEngine]:
    assert sql_backend.target is not None
    engine = create_async_engine(to_url(sql_backend.target), poolclass=NullPool)
    yield engine
    await engine.dispose()


async def test_a_host_joins_its_model_to_ours_in_one_orm_session(
    host_engine: AsyncEngine,
) -> None:
    async with Database(host_engine) as db:
        store = SQLSession(db)
        await store.append("s-1", a_run("1"), run_id="r1", meta={"n": 1})
        await store.append("s-1", a_run("2"), run_id="r2")
        await store.append("s-2", a_run("3"), run_id="r3")
        async with host_engine.begin() as conn:
            await conn.run_sync(HostBase.metadata.create_all)
        async with AsyncSession(host_engine) as orm:
            orm.add_all(
                [
                    Ticket(ticket_id=1, subject="refund", session_id="s-1"),
                    Ticket(ticket_id=2, subject="login", session_id="s-2"),
                ]
            )
            await orm.commit()

            counted = (
                select(Ticket.subject, SessionRow.run_count, func.count(MessageRow.sequence))
                .join(SessionRow, Ticket.session)
                .join(SessionRow.messages)
                .group_by(Ticket.subject, SessionRow.run_count)
                .order_by(Ticket.subject)
            )
            per_run = len(a_run("x"))
            expected = [("login", 1, per_run), ("refund", 2, 2 * per_run)]
            assert (await orm.execute(counted)).all() == expected

            loaded = select(SessionRow).options(
                selectinload(SessionRow.messages), selectinload(SessionRow.runs)
            )
            row = (await orm.scalars(loaded.where(SessionRow.session_id == "s-1"))).one()
            texts = await decode_documents(orm, "", [m.entry_json for m in row.messages])
            entries = [entry_from_dict(json.loads(text)) for text in texts]
            assert entries == await store.load("s-1")
            assert [run.run_id for run in row.runs] == ["r1", "r2"]
            assert json.loads(row.runs[0].meta_json or "null") == {"n": 1}
            assert row.created_at.tzinfo is not None
            assert row.created_at <= datetime.now(UTC)
            ticket = (
                await orm.scalars(
                    select(Ticket)
                    .options(selectinload(Ticket.session))
                    .where(Ticket.ticket_id == 2)
                )
            ).one()
            assert ticket.session.session_id == "s-2" and ticket.session.message_count == per_run
            run = (
                await orm.scalars(select(SessionRunRow).where(SessionRunRow.run_id == "r3"))
            ).one()
            assert (run.session_id, run.first_sequence, run.entry_count) == ("s-2", 1, per_run)
        await store.append("s-1", a_run("4"), run_id="r4")  # our stores go on as before
        assert len(await store.load("s-1")) == 3 * per_run


async def test_run_heads_read_as_objects(host_engine: AsyncEngine) -> None:
    async with Database(host_engine) as db:
        checkpointer = SQLCheckpointer(db)
        await checkpointer.append("run-1", a_run("q"), RunHead(agent_name="support"))
        async with AsyncSession(host_engine) as orm:
            head = (
                await orm.scalars(select(RunHeadRow).options(selectinload(RunHeadRow.entries)))
            ).one()
            assert head.run_id == "run-1" and head.entry_count == len(a_run("q"))
            texts = await decode_documents(orm, "", [e.entry_json for e in head.entries])
            assert [entry_from_dict(json.loads(text)) for text in texts] == a_run("q")
            head_text = await decode_documents(orm, "", head.head_json, database=db)
            assert json.loads(head_text)["agent_name"] == "support"


async def test_shared_values_read_as_rows(host_engine: AsyncEngine) -> None:
    """``ContentRow``: what a tenant's documents share, with its reference count and its
    length as text; the bytes are the codec's (compressed), not the value."""
    output = '"' + "the same long tool output " * 10 + '"'
    document = '{"output": ' + output + "}"
    async with Database(host_engine, compression_threshold=64) as db:

        def write(conn: Connection) -> None:
            stored = store_documents(conn, "acme", [document, document], shareable=True)
            conn.execute(
                insert(tables.run_heads),
                {
                    "tenant": "acme",
                    "run_id": "run-1",
                    "status": "running",
                    "head_json": "{}",
                    "created_at": datetime.now(UTC),
                    "updated_at": datetime.now(UTC),
                },
            )
            conn.execute(
                insert(tables.run_entries),
                [
                    {"tenant": "acme", "run_id": "run-1", "position": n, "entry_json": text}
                    for n, text in enumerate(stored)
                ],
            )

        await db.write(write, tenant="acme")
        async with AsyncSession(host_engine) as orm:
            row = (await orm.scalars(select(ContentRow))).one()
            assert (row.tenant, row.refs, row.size) == ("acme", 2, len(output))
            assert len(row.digest) == 64 and isinstance(row.data, bytes)
            assert output.encode() not in row.data


@pytest.mark.parametrize("kind", KINDS)
async def test_the_documented_decoder_reads_stored_documents(kind: str, tmp_path: Path) -> None:
    """Compressed, shared and encrypted documents read through the ORM come back as the
    texts that were written, through an AsyncSession, an AsyncConnection or a sync
    Session, in the transaction that read the rows; a wrong key is refused, typed."""
    expected = plain_world("", "acme")
    async with database(kind, tmp_path, "db") as url, Database(url, **FORMS["encrypted"]) as db:
        await write_world(db, "", "acme")
        engine = create_async_engine(to_url(url), poolclass=NullPool)
        try:
            async with AsyncSession(engine) as orm:
                rows = (
                    await orm.scalars(
                        select(MessageRow)
                        .where(MessageRow.tenant == "acme")
                        .order_by(MessageRow.session_id, MessageRow.sequence)
                    )
                ).all()
                assert all(not (r.entry_json or "").startswith("{") for r in rows)
                texts = await decode_documents(
                    orm, "acme", [r.entry_json for r in rows], database=db
                )
                wanted = [r for r in expected["lovia_messages"] if r["tenant"] == "acme"]
                assert texts == [r["entry_json"] for r in wanted]
                tags = await decode_documents(orm, "acme", [r.tags_json for r in rows], database=db)
                assert tags == [r["tags_json"] for r in wanted]
                effect = (await orm.scalars(select(ToolEffectRow).limit(1))).one()
                summaries = await orm.run_sync(  # a sync Session, as a sync host has
                    lambda session: decode_documents_sync(
                        session,
                        "",
                        session.scalars(
                            select(SnapshotRow.summary_json)
                            .where(SnapshotRow.tenant == "")
                            .order_by(SnapshotRow.session_id)
                        ).all(),
                        database=db,
                    )
                )
                assert summaries == [
                    r["summary_json"] for r in expected["lovia_snapshots"] if r["tenant"] == ""
                ]
                one = await decode_documents(
                    orm,
                    effect.tenant,
                    effect.result_json,
                    encryption_keys=FORMS["encrypted"]["encryption_keys"],
                )
                assert one in {r["result_json"] for r in expected["lovia_tool_effects"]}
                values = (await orm.scalars(select(ContentRow))).all()
                assert values and all(v.refs >= 1 and v.data.startswith(b"e") for v in values)
                with pytest.raises(EncryptionKeyError):
                    await decode_documents(
                        orm, "acme", [rows[0].entry_json], encryption_keys=[KEY2]
                    )
                with pytest.raises(EncryptionKeyError):  # no key at all
                    await decode_documents(orm, "acme", [rows[0].entry_json])
                with pytest.raises(UserError):
                    await decode_documents(orm, "acme", [], database=db, encryption_keys=[KEY2])
                assert await decode_documents(orm, "acme", ["{}", None]) == ["{}", None]
            async with engine.connect() as conn:
                entries = (
                    (
                        await conn.execute(
                            select(RunEntryRow.entry_json)
                            .where(RunEntryRow.tenant == "")
                            .order_by(RunEntryRow.run_id, RunEntryRow.position)
                        )
                    )
                    .scalars()
                    .all()
                )
                texts = await decode_documents(conn, "", list(entries), database=db)
                assert texts == [
                    r["entry_json"] for r in expected["lovia_run_entries"] if r["tenant"] == ""
                ]
        finally:
            await engine.dispose()
