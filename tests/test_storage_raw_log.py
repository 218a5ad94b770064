"""The Raw Log API's log calls, on every SQL backend (SQLite, SQLite WAL, PostgreSQL).

append, list_raw_messages, load and snapshot: each rule of zett-agent's
document, and "bad input writes nothing".
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from backends import Backend
from helpers import call, result, say, user
from lovia_store import (
    CompactedMessage,
    Database,
    InputEntry,
    MessageTiming,
    ReasoningEntry,
    SessionView,
    SnapshotConflictError,
    SQLSessionStorage,
    Usage,
)

T0 = datetime(2026, 1, 2, 9, 30, 1, 250000, tzinfo=UTC)


def measured() -> MessageTiming:
    return MessageTiming(
        started_at=T0,
        completed_at=T0 + timedelta(seconds=2, microseconds=345678),
        duration_ns=2_345_678_311,
        reasoning_started_at=T0 + timedelta(microseconds=120000),
        reasoning_completed_at=T0 + timedelta(microseconds=932500),
        reasoning_duration_ns=812_500_137,
        content_started_at=T0 + timedelta(microseconds=932500),
        content_completed_at=T0 + timedelta(seconds=1, microseconds=572750),
        content_duration_ns=640_250_059,
    )


async def fill(store: SQLSessionStorage, session_id: str, count: int) -> list[int]:
    return [await store.append(session_id, f"r{i // 3}", user(f"m{i}")) for i in range(count)]


# -- append ---------------------------------------------------------------------------------------


async def test_append_numbers_each_session_from_one(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        assert await fill(store, "a", 5) == [1, 2, 3, 4, 5]
        assert await fill(store, "b", 2) == [1, 2]
        assert await store.append("a", "r", say("more")) == 6
        records = await store.list_raw_messages("a")
        assert [r.sequence for r in records] == [1, 2, 3, 4, 5, 6]
        assert [r.message for r in records] == [user(f"m{i}") for i in range(5)] + [say("more")]
        assert len({r.id for r in records}) == 6


async def test_first_append_creates_the_session_later_ones_keep_it(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        before = datetime.now(UTC)
        await store.append("s", "r", user("hi"), parent_session_id="p", title=" T ", agent_name="A")
        made = await store.get_session("s")
        assert made is not None
        assert (made.parent_session_id, made.title, made.agent_name) == ("p", "T", "A")
        assert (made.session_type, made.message_count) == (0, 1)
        assert before <= made.created_at == made.updated_at
        await store.append(
            "s", "r", say("yo"), parent_session_id="p", title="other", agent_name="B"
        )
        later = await store.get_session("s")
        assert later is not None
        assert (later.title, later.agent_name, later.message_count) == ("T", "A", 2)
        assert later.updated_at > made.updated_at and later.created_at == made.created_at


async def test_append_to_a_created_session(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await store.create_session(session_id="s", title="kept", session_type=2)
        assert await store.append("s", "r", user("hi")) == 1
        view = await store.load("s")
        assert (view.title, view.session_type) == ("kept", 2)


async def test_request_id_does_not_deduplicate(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        assert await store.append("s", "same", user("hi")) == 1
        assert await store.append("s", "same", user("hi")) == 2
        records = await store.list_raw_messages("s")
        assert [(r.request_id, r.message) for r in records] == [("same", user("hi"))] * 2


async def test_no_timing_records_an_instant(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        before = datetime.now(UTC)
        await store.append("s", "r", user("hi"))
        after = datetime.now(UTC)
        (record,) = await store.list_raw_messages("s")
        assert before <= record.started_at == record.completed_at <= after
        assert record.duration_ns == 0
        assert record.reasoning_started_at is record.content_duration_ns is None
        assert record.timing.duration_ns == 0
        assert before <= record.created_at == record.updated_at <= after


async def test_measured_timing_metadata_tags_and_usage_read_back(sql_backend: Backend) -> None:
    metadata: dict[str, Any] = {"user": "u-1", "nested": {"a": [1, 2.5, None, True]}, "": 0}
    tags: dict[str, Any] = {"env": "test", "labels": ["x"], "ünï": "✓"}
    usage = Usage(
        input_tokens=1523,
        output_tokens=312,
        cache_read_tokens=1024,
        cache_write_tokens=256,
        reasoning_tokens=128,
    )
    async with sql_backend.storage() as store:
        await store.append(
            "s", "r", say("answer"), measured(), metadata=metadata, tags=tags, usage=usage
        )
        (record,) = await store.list_raw_messages("s")
        assert record.timing == measured()
        assert (record.metadata, record.tags) == (metadata, tags)
        assert record.usage == usage
        assert (record.input_tokens, record.reasoning_tokens) == (1523, 128)
        assert record.total_tokens == 1835 and record.cache_hit_rate == 1024 / 1523
        assert record.run_id is None and record.envelope is None
        metadata["user"] = "changed"  # the stored copy is not aliased
        assert (await store.list_raw_messages("s"))[0].metadata["user"] == "u-1"


async def test_empty_metadata_and_tags_read_as_empty_objects(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await store.append("s", "r", user("hi"))
        (record,) = await store.list_raw_messages("s")
        assert (record.metadata, record.tags) == ({}, {})
        assert (record.usage, record.total_tokens) == (None, None)


async def test_integers_of_any_size_in_metadata_and_tags_read_back_exactly(
    sql_backend: Backend,
) -> None:
    wide = {"u64": 2**64 - 1, "over": 2**64, "under": -(2**64) - 1, "huge": 10**40, "f": 0.5}
    async with sql_backend.storage() as store:
        await store.append("s", "r", user("hi"), metadata=wide, tags={"t": 2**64})
        (record,) = await store.list_raw_messages("s")
        assert (record.metadata, record.tags) == (wide, {"t": 2**64})
        assert all(type(record.metadata[k]) is int for k in ("u64", "over", "under", "huge"))
        assert (await store.load("s")).raw_tail[0].metadata == wide


@pytest.mark.parametrize("message", [say("text"), ReasoningEntry(content="why"), call("c1")])
async def test_usage_goes_with_what_the_assistant_produced(
    sql_backend: Backend, message: Any
) -> None:
    async with sql_backend.storage() as store:
        await store.append("s", "r", message, usage=Usage(input_tokens=5, output_tokens=1))
        (record,) = await store.list_raw_messages("s")
        assert record.usage == Usage(input_tokens=5, output_tokens=1)


GOOD: dict[str, Any] = {"session_id": "s", "request_id": "r", "message": say("x")}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"message": user("hi"), "usage": Usage(input_tokens=1)}, "usage"),
        ({"message": result("c1"), "usage": Usage(output_tokens=1)}, "usage"),
        ({"usage": Usage(input_tokens=-1)}, "usage.input_tokens"),
        ({"usage": {"input_tokens": 1}}, "usage"),
        ({"metadata": ["not", "an", "object"]}, "metadata"),
        ({"metadata": {"bad": {1, 2}}}, "metadata"),
        ({"metadata": {"nan": float("nan")}}, "metadata"),
        ({"metadata": {1: "non-string key"}}, "metadata"),
        ({"tags": {"": 1}}, "tags"),
        ({"tags": {"  ": 1}}, "tags"),
        ({"tags": "env=test"}, "tags"),
        ({"tags": {"obj": object()}}, "tags"),
        ({"message": {"type": "input", "role": "user", "content": "a dict"}}, "message"),
        ({"message": CompactedMessage(content="summaries go to snapshot()")}, "message"),
        ({"timing": {"started_at": T0}}, "timing"),
        ({"session_id": ""}, "session_id"),
        ({"session_id": None}, "session_id"),
        ({"request_id": ""}, "request_id"),
        ({"request_id": 3}, "request_id"),
        ({"parent_session_id": "s"}, "parent_session_id"),
        ({"parent_session_id": ""}, "parent_session_id"),
        ({"title": "   "}, "title"),
        ({"title": "x" * 201}, "title"),
        ({"agent_name": "y" * 65}, "agent_name"),
        ({"message": call("c" * 300)}, "call_id"),
        ({"message": result("c" * 300)}, "call_id"),
    ],
)
async def test_append_refuses_bad_input_and_writes_nothing(
    sql_backend: Backend, changes: dict[str, Any], message: str
) -> None:
    async with sql_backend.storage() as store:
        with pytest.raises(ValueError, match=message):
            await store.append(**{**GOOD, **changes})
        assert await store.list_sessions() == []
        assert await store.append(**GOOD) == 1


@pytest.mark.parametrize(
    "timing",
    [
        {"duration_ns": -1},
        {"started_at": datetime(2026, 1, 1)},  # naive
        {"reasoning_started_at": T0},  # a span given in part
        {"content_duration_ns": 5},
        {"reasoning_duration_ns": -1, "reasoning_started_at": T0, "reasoning_completed_at": T0},
    ],
)
def test_message_timing_validates(timing: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        MessageTiming(**{"started_at": T0, "completed_at": T0, "duration_ns": 0, **timing})


async def test_the_parent_cannot_change(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await store.append("child", "r", user("hi"), parent_session_id="root")
        for parent in ("other", None):
            with pytest.raises(ValueError, match="parent"):
                await store.append("child", "r", user("no"), parent_session_id=parent)
        await store.append("root", "r", user("hi"))
        with pytest.raises(ValueError, match="parent"):
            await store.append("root", "r", user("no"), parent_session_id="p")
        # Nothing of the refused appends was kept: no messages, no sequences.
        assert await store.append("child", "r", say("ok"), parent_session_id="root") == 2
        assert [r.message for r in await store.list_raw_messages("child")] == [
            user("hi"),
            say("ok"),
        ]
        assert (await store.get_session("child")).message_count == 2  # type: ignore[union-attr]


async def test_concurrent_appends_in_one_loop_get_distinct_sequences(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        got = await asyncio.gather(*(store.append("s", "r", user(str(i))) for i in range(30)))
        assert sorted(got) == list(range(1, 31))
        records = await store.list_raw_messages("s")
        assert {r.sequence: r.message for r in records} == {
            seq: user(str(i)) for i, seq in enumerate(got)
        }


# -- list_raw_messages ----------------------------------------------------------------------------


async def test_pages_match_a_slice_of_the_log(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 12)
        log = list(range(1, 13))
        for after in (0, 1, 5, 11, 12, 20):
            for through in (None, 1, 6, 12, 30):
                for limit in (1, 4, 100):
                    for offset in (0, 2, 11, 40):
                        page = await store.list_raw_messages(
                            "s",
                            after_sequence=after,
                            through_sequence=through,
                            limit=limit,
                            offset=offset,
                        )
                        inside = [q for q in log if q > after and (through is None or q <= through)]
                        assert [r.sequence for r in page] == inside[offset : offset + limit], (
                            after,
                            through,
                            limit,
                            offset,
                        )


async def test_paging_ignores_snapshots(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 5)
        await store.snapshot("s", CompactedMessage(content="sum"), 4, 0)
        assert [r.sequence for r in await store.list_raw_messages("s")] == [1, 2, 3, 4, 5]


async def test_paging_an_unknown_session_is_empty(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        assert await store.list_raw_messages("nobody") == []
        assert await store.list_sessions() == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"after_sequence": -1}, "after_sequence"),
        ({"after_sequence": None}, "after_sequence"),
        ({"through_sequence": 0}, "through_sequence"),
        ({"through_sequence": -3}, "through_sequence"),
        ({"limit": 0}, "limit"),
        ({"limit": True}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 1.0}, "offset"),
        ({"offset": 2**64}, "offset"),
    ],
)
async def test_paging_refuses_bad_bounds(
    sql_backend: Backend, kwargs: dict[str, Any], message: str
) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 2)
        with pytest.raises(ValueError, match=message):
            await store.list_raw_messages("s", **kwargs)


async def test_default_page_is_ten_thousand(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 3)
        assert len(await store.list_raw_messages("s")) == 3
        assert len(await store.list_raw_messages("s", limit=2)) == 2


# -- load -----------------------------------------------------------------------------------------


async def test_load_without_a_snapshot_is_the_whole_log(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await store.append("s", "r", user("q"), parent_session_id="p", title="t", agent_name="a")
        await store.append("s", "r", say("a"), parent_session_id="p")
        view = await store.load("s")
        assert view.snapshot is None
        assert (view.parent_session_id, view.title, view.agent_name) == ("p", "t", "a")
        assert view.raw_tail == await store.list_raw_messages("s")
        assert view.messages == [user("q"), say("a")] == view.entries


async def test_load_is_the_latest_snapshot_and_the_tail_after_it(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 10)
        await store.snapshot("s", CompactedMessage(content="one"), 6, 0)
        second = await store.snapshot("s", CompactedMessage(content="two"), 8, 1)
        view = await store.load("s")
        assert view.snapshot == second
        assert [r.sequence for r in view.raw_tail] == [9, 10]
        assert view.messages == [CompactedMessage(content="two"), user("m8"), user("m9")]
        assert view.entries[0] == InputEntry(role="user", content="two")


async def test_load_of_an_unknown_session_is_empty_and_creates_nothing(
    sql_backend: Backend,
) -> None:
    async with sql_backend.storage() as store:
        assert await store.load("nobody") == SessionView()
        assert (await store.load("nobody")).messages == []
        assert await store.get_session("nobody") is None
        assert await store.list_sessions() == []


# -- snapshot -------------------------------------------------------------------------------------


async def test_snapshot_versions_count_up(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 6)
        before = datetime.now(UTC)
        first = await store.snapshot("s", CompactedMessage(content="a"), 2, 0)
        assert (first.version, first.compacted_through_sequence, first.session_id) == (1, 2, "s")
        assert first.compacted_message == CompactedMessage(content="a")
        assert before <= first.created_at == first.updated_at
        second = await store.snapshot("s", CompactedMessage(content="b"), 6, 1)
        assert second.version == 2 and second.id != first.id
        assert (await store.load("s")).snapshot == second


async def test_a_stale_version_is_a_conflict_and_writes_nothing(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 6)
        await store.snapshot("s", CompactedMessage(content="a"), 2, 0)
        for stale in (0, 2, 5):
            with pytest.raises(SnapshotConflictError) as caught:
                await store.snapshot("s", CompactedMessage(content="late"), 4, stale)
            assert isinstance(caught.value, ValueError)
            assert (caught.value.expected, caught.value.actual) == (stale, 1)
        assert (await store.load("s")).snapshot.version == 1  # type: ignore[union-attr]
        with pytest.raises(SnapshotConflictError):
            await store.snapshot("nobody", CompactedMessage(content="x"), 1, 1)


async def test_a_version_past_what_the_database_numbers_is_stale_not_a_driver_error(
    sql_backend: Backend,
) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 3)
        for version in (2**31 - 1, 2**31, 2**63 - 1):
            with pytest.raises(SnapshotConflictError):
                await store.snapshot("s", CompactedMessage(content="x"), 2, version)
        assert (await store.load("s")).snapshot is None
        stored = await store.snapshot("s", CompactedMessage(content="x"), 2, 0)
        assert stored.version == 1


@pytest.mark.parametrize("boundary", [0, -1, 7, 100])
async def test_the_boundary_must_be_a_stored_sequence(sql_backend: Backend, boundary: int) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 6)
        with pytest.raises(ValueError, match="compacted_through_sequence"):
            await store.snapshot("s", CompactedMessage(content="x"), boundary, 0)
        # The failed call rolled its version claim back.
        assert (await store.snapshot("s", CompactedMessage(content="x"), 6, 0)).version == 1


async def test_the_boundary_must_advance(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 6)
        await store.snapshot("s", CompactedMessage(content="a"), 4, 0)
        for boundary in (4, 3, 1):
            with pytest.raises(ValueError, match="advance"):
                await store.snapshot("s", CompactedMessage(content="b"), boundary, 1)
        assert (await store.snapshot("s", CompactedMessage(content="b"), 5, 1)).version == 2


async def test_snapshot_of_an_unknown_or_empty_session_is_refused(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        with pytest.raises(ValueError, match="no raw messages"):
            await store.snapshot("nobody", CompactedMessage(content="x"), 1, 0)
        await store.create_session(session_id="empty")
        with pytest.raises(ValueError, match="compacted_through_sequence"):
            await store.snapshot("empty", CompactedMessage(content="x"), 1, 0)
        assert await store.get_session("nobody") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("summary text", 1, 0), "compacted_message"),
        ((CompactedMessage(content="x"), "1", 0), "compacted_through_sequence"),
        ((CompactedMessage(content="x"), 1, -1), "expected_version"),
        ((CompactedMessage(content="x"), 1, None), "expected_version"),
    ],
)
async def test_snapshot_refuses_bad_arguments(
    sql_backend: Backend, args: tuple[Any, ...], message: str
) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 2)
        with pytest.raises(ValueError, match=message):
            await store.snapshot("s", *args)
        assert (await store.load("s")).snapshot is None


async def test_snapshot_never_touches_raw_messages(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 5)
        before = await store.list_raw_messages("s")
        session = await store.get_session("s")
        await store.snapshot("s", CompactedMessage(content="x"), 3, 0)
        assert await store.list_raw_messages("s") == before
        assert await store.count_messages("s") == 5
        assert await store.get_session("s") == session  # not activity: updated_at unchanged


async def test_concurrent_snapshots_in_one_loop_let_exactly_one_win(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        await fill(store, "s", 5)
        outcomes = await asyncio.gather(
            *(store.snapshot("s", CompactedMessage(content=str(i)), 3, 0) for i in range(6)),
            return_exceptions=True,
        )
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(won) == 1 and won[0].version == 1
        assert all(isinstance(o, SnapshotConflictError) for o in outcomes if o not in won)


# -- close ----------------------------------------------------------------------------------------


async def test_close_is_idempotent_and_spares_a_borrowed_database(sql_backend: Backend) -> None:
    store = sql_backend.storage()
    await store.append("s", "r", user("hi"))
    await store.close()
    await store.close()
    assert sql_backend.target is not None
    async with Database(sql_backend.target) as db:
        borrowed = SQLSessionStorage(db)
        assert await borrowed.count_messages("s") == 1
        await borrowed.close()
        assert await SQLSessionStorage(db).count_messages("s") == 1
    reopened = sql_backend.storage()
    try:
        assert [r.message for r in await reopened.list_raw_messages("s")] == [user("hi")]
    finally:
        await reopened.close()
