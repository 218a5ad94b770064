"""The Raw Log API's session calls, on every SQL backend (SQLite, SQLite WAL, PostgreSQL).

create_session, get_session, update_session, delete_session, list_sessions,
count_messages: each rule of zett-agent's document, and "bad input writes nothing".
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import update

from backends import Backend
from helpers import say, user
from lovia_store import CompactedMessage, SessionView, SQLSessionStorage, UserError
from lovia_store.db.tables import messages


async def fill(store: SQLSessionStorage, session_id: str, count: int, **kwargs: Any) -> None:
    for i in range(count):
        await store.append(session_id, "req", user(f"{session_id} {i}"), **kwargs)


# -- create_session / get_session -----------------------------------------------------------------


async def test_create_then_get_returns_the_same_summary(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        made = await store.create_session(
            session_id="s1", title="Review", agent_name="main", session_type=4
        )
        assert (made.session_id, made.title, made.agent_name) == ("s1", "Review", "main")
        assert (made.session_type, made.parent_session_id, made.message_count) == (4, None, 0)
        assert made.created_at == made.updated_at and made.created_at.tzinfo is not None
        assert await store.get_session("s1") == made
        assert await store.load("s1") == SessionView(
            session_type=4, title="Review", agent_name="main"
        )


async def test_create_generates_a_time_ordered_id(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        first = await store.create_session()
        second = await store.create_session()
        assert uuid.UUID(first.session_id).version == 7
        assert first.session_id < second.session_id
        assert (first.title, first.agent_name, first.session_type) == (None, None, 0)


async def test_create_normalises_display_values(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        made = await store.create_session(session_id="s", title="  Hi there \n", agent_name=" a ")
        assert (made.title, made.agent_name) == ("Hi there", "a")
        assert await store.get_session("s") == made


async def test_create_keeps_a_parent_link(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await store.create_session(session_id="root")
        child = await store.create_session(session_id="child", parent_session_id="root")
        assert child.parent_session_id == "root"
        # A plain id, no foreign key: the parent need not exist.
        orphan = await store.create_session(session_id="o", parent_session_id="gone")
        assert orphan.parent_session_id == "gone"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"session_id": ""}, "session_id"),
        ({"session_id": "   "}, "session_id"),
        ({"session_id": 7}, "session_id"),
        ({"session_id": "s", "parent_session_id": "s"}, "parent_session_id"),
        ({"session_id": "s", "parent_session_id": " "}, "parent_session_id"),
        ({"session_id": "s", "title": ""}, "title"),
        ({"session_id": "s", "title": "   "}, "title"),
        ({"session_id": "s", "title": "x" * 201}, "title"),
        ({"session_id": "s", "title": 5}, "title"),
        ({"session_id": "s", "agent_name": "y" * 65}, "agent_name"),
        ({"session_id": "s", "agent_name": "\t"}, "agent_name"),
        ({"session_id": "s", "session_type": -1}, "session_type"),
        ({"session_id": "s", "session_type": True}, "session_type"),
        ({"session_id": "s", "session_type": "3"}, "session_type"),
    ],
)
async def test_create_refuses_bad_input_and_writes_nothing(
    sql_backend: Backend, kwargs: dict[str, Any], message: str
) -> None:
    async with sql_backend.storage() as store:
        with pytest.raises(ValueError, match=message):
            await store.create_session(**kwargs)
        assert await store.list_sessions() == []


async def test_create_accepts_the_longest_display_values(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        made = await store.create_session(session_id="s", title="t" * 200, agent_name="a" * 64)
        assert await store.get_session("s") == made


async def test_create_refuses_an_existing_session(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        made = await store.create_session(session_id="s", title="first")
        with pytest.raises(UserError, match="already exists"):
            await store.create_session(session_id="s", title="second")
        await store.append("appended", "r", user("hi"))
        with pytest.raises(ValueError, match="already exists"):
            await store.create_session(session_id="appended")
        assert await store.get_session("s") == made


async def test_get_unknown_session_is_none(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        assert await store.get_session("nobody") is None


# -- update_session -------------------------------------------------------------------------------


async def test_update_changes_only_what_is_given(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        made = await store.create_session(session_id="s", title="old", agent_name="agent")
        await fill(store, "s", 2)
        renamed = await store.update_session("s", title="  new title ")
        assert renamed is not None
        assert (renamed.title, renamed.agent_name) == ("new title", "agent")
        assert renamed.message_count == 2
        assert renamed.updated_at > made.updated_at and renamed.created_at == made.created_at
        both = await store.update_session("s", agent_name=" other ", title="t")
        assert both is not None and (both.title, both.agent_name) == ("t", "other")
        assert await store.get_session("s") == both


async def test_update_needs_at_least_one_field(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        made = await store.create_session(session_id="s", title="keep")
        with pytest.raises(ValueError, match="title or an agent_name"):
            await store.update_session("s")
        with pytest.raises(ValueError, match="title or an agent_name"):
            await store.update_session("s", title=None, agent_name=None)
        assert await store.get_session("s") == made


@pytest.mark.parametrize(
    "kwargs", [{"title": ""}, {"title": "x" * 201}, {"agent_name": "  "}, {"agent_name": "z" * 65}]
)
async def test_update_refuses_bad_values_and_writes_nothing(
    sql_backend: Backend, kwargs: dict[str, Any]
) -> None:
    async with sql_backend.storage() as store:
        made = await store.create_session(session_id="s", title="keep", agent_name="me")
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            await store.update_session("s", **{"title": "fine", **kwargs})
        assert await store.get_session("s") == made


async def test_update_unknown_session_is_none_and_creates_nothing(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        assert await store.update_session("nobody", title="x") is None
        assert await store.get_session("nobody") is None


# -- delete_session -------------------------------------------------------------------------------


async def test_delete_removes_messages_snapshots_and_identity(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 3)
        await store.snapshot("s", CompactedMessage(content="sum"), 2, 0)
        await fill(store, "keep", 1)
        assert await store.delete_session("s") is True
        assert await store.get_session("s") is None
        assert await store.count_messages("s") == 0
        assert await store.list_raw_messages("s") == []
        assert (await store.load("s")).snapshot is None
        assert await store.delete_session("s") is False
        assert await store.delete_session("never") is False
        assert await store.count_messages("keep") == 1
        # The id is free again and starts from the beginning.
        assert await store.append("s", "r", user("again")) == 1
        assert (await store.snapshot("s", CompactedMessage(content="x"), 1, 0)).version == 1


async def test_delete_an_empty_created_session(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await store.create_session(session_id="empty")
        assert await store.delete_session("empty") is True
        assert await store.list_sessions() == []


# -- list_sessions / count_messages ---------------------------------------------------------------


async def test_list_is_latest_activity_first(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        for name in ("a", "b", "c"):
            await store.create_session(session_id=name)
        assert [s.session_id for s in await store.list_sessions()] == ["c", "b", "a"]
        await store.append("a", "r", user("news"))
        assert [s.session_id for s in await store.list_sessions()] == ["a", "c", "b"]
        await store.update_session("b", title="renamed")
        listed = await store.list_sessions()
        assert [s.session_id for s in listed] == ["b", "a", "c"]
        assert [s.message_count for s in listed] == [0, 1, 0]
        assert listed[0] == await store.get_session("b")


async def test_list_filters_by_type_and_pages(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        for i in range(7):
            await store.create_session(session_id=f"s{i}", session_type=i % 3)
        newest_first = [f"s{i}" for i in reversed(range(7))]
        assert [s.session_id for s in await store.list_sessions(limit=3)] == newest_first[:3]
        page = await store.list_sessions(limit=3, offset=5)
        assert [s.session_id for s in page] == newest_first[5:]
        assert await store.list_sessions(offset=7) == []
        typed = await store.list_sessions(session_types=[2, 0])
        assert [s.session_id for s in typed] == ["s6", "s5", "s3", "s2", "s0"]
        assert [s.session_id for s in await store.list_sessions(session_types=(1,))] == [
            "s4",
            "s1",
        ]
        assert len(await store.list_sessions(session_types=[])) == 7  # empty: no filter
        assert await store.list_sessions(session_types=[9]) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},
        {"limit": -1},
        {"limit": True},
        {"limit": 2.0},
        {"offset": -1},
        {"offset": "1"},
        {"session_types": [-1]},
        {"session_types": [True]},
        {"session_types": "0"},
        {"session_types": 0},
    ],
)
async def test_list_refuses_bad_arguments(sql_backend: Backend, kwargs: dict[str, Any]) -> None:
    async with sql_backend.storage() as store:
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            await store.list_sessions(**kwargs)


async def test_count_messages(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        assert await store.count_messages("nobody") == 0
        await store.create_session(session_id="s")
        assert await store.count_messages("s") == 0
        await fill(store, "s", 5)
        await store.append("s", "other", say("done"))
        assert await store.count_messages("s") == 6
        assert (await store.get_session("s")).message_count == 6  # type: ignore[union-attr]


async def test_counts_never_decode_payloads(sql_backend: Backend) -> None:
    """Corrupt every stored document: counting and listing sessions still work."""
    async with sql_backend.storage() as store:
        await fill(store, "s", 4)

        def corrupt(conn: Any) -> None:
            conn.execute(update(messages).values(entry_json="{not json"))

        await store.database.write(corrupt)
        assert await store.count_messages("s") == 4
        assert [(s.session_id, s.message_count) for s in await store.list_sessions()] == [("s", 4)]
        assert (await store.get_session("s")).message_count == 4  # type: ignore[union-attr]
        with pytest.raises(ValueError):
            await store.list_raw_messages("s")


async def test_concurrent_creates_of_one_id_let_exactly_one_win(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        outcomes = await asyncio.gather(
            *(store.create_session(session_id="race", title=f"t{i}") for i in range(8)),
            return_exceptions=True,
        )
        winners = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(winners) == 1
        assert all(isinstance(o, UserError) for o in outcomes if o not in winners)
        assert await store.get_session("race") == winners[0]
