"""One log, two APIs: lovia's sessions and the Raw Log API read and write the same sessions.

On every SQL backend, with both stores sharing one ``Database``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from backends import Backend
from helpers import a_run, call, result, say, user
from lovia_store import (
    CompactedMessage,
    Database,
    Segment,
    SnapshotConflictError,
    SQLSession,
    SQLSessionStorage,
)


@dataclass
class Both:
    session: SQLSession
    storage: SQLSessionStorage


@pytest.fixture
async def both(sql_backend: Backend) -> AsyncIterator[Both]:
    assert sql_backend.target is not None
    db = Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal")
    try:
        yield Both(SQLSession(db), SQLSessionStorage(db))
    finally:
        await db.close()


async def test_a_replayed_run_id_leaves_no_trace(both: Both) -> None:
    """The replay reserves nothing: the next run's sequences follow on, the log stays
    dense (a deep page is still a key seek) and the counts agree."""
    await both.session.append("s", a_run("1"), run_id="r1")
    await both.session.append("s", a_run("other"), run_id="r1")
    await both.session.append("s", a_run("2"), run_id="r2")
    records = await both.storage.list_raw_messages("s")
    assert [r.sequence for r in records] == list(range(1, 9))
    assert [r.run_id for r in records] == ["r1"] * 4 + ["r2"] * 4
    (summary,) = await both.storage.list_sessions()
    assert summary.message_count == 8
    deep = await both.storage.list_raw_messages("s", offset=6)
    assert [r.sequence for r in deep] == [7, 8]


async def test_runs_appended_by_lovia_are_raw_messages(both: Both) -> None:
    await both.session.append("s", a_run("1"), run_id="r1", meta={"m": 1})
    await both.session.append("s", a_run("2"), run_id="r2")
    assert await both.storage.count_messages("s") == 8
    (summary,) = await both.storage.list_sessions()
    assert (summary.session_id, summary.message_count, summary.title) == ("s", 8, None)
    records = await both.storage.list_raw_messages("s")
    assert [r.sequence for r in records] == list(range(1, 9))
    assert [r.message for r in records] == a_run("1") + a_run("2")
    assert [r.run_id for r in records] == ["r1"] * 4 + ["r2"] * 4
    assert [r.request_id for r in records] == ["r1"] * 4 + ["r2"] * 4
    # No timing was recorded: instantaneous at the append; ids are stable.
    assert all(r.started_at == r.completed_at == r.created_at for r in records)
    assert all(r.duration_ns == 0 and r.metadata == {} == r.tags for r in records)
    again = await both.storage.list_raw_messages("s", after_sequence=2, limit=3)
    assert [(r.id, r.sequence) for r in again] == [(r.id, r.sequence) for r in records[2:5]]
    assert len({r.id for r in records}) == 8
    view = await both.storage.load("s")
    assert view.snapshot is None and view.messages == a_run("1") + a_run("2")


async def test_raw_messages_form_segments_by_request_id(both: Both) -> None:
    await both.storage.append("s", "req-1", user("q1"))
    await both.storage.append("s", "req-1", say("a1"))
    await both.session.append("s", a_run("run"), run_id="run-1", meta={"m": 1})
    await both.storage.append("s", "req-2", user("q2"))
    await both.storage.append("s", "req-2", call("c"))
    await both.storage.append("s", "req-2", result("c"))
    await both.storage.append("s", "req-1", say("a3"))  # a request id seen before, not adjacent
    assert await both.session.segments("s") == [
        Segment("req-1", [user("q1"), say("a1")], None),
        Segment("run-1", a_run("run"), {"m": 1}),
        Segment("req-2", [user("q2"), call("c"), result("c")], None),
        Segment("req-1", [say("a3")], None),
    ]
    assert await both.session.load("s") == [
        user("q1"),
        say("a1"),
        *a_run("run"),
        user("q2"),
        call("c"),
        result("c"),
        say("a3"),
    ]
    assert await both.storage.count_messages("s") == 10
    assert [r.sequence for r in await both.storage.list_raw_messages("s")] == list(range(1, 11))


async def test_display_fields_survive_lovia_appends(both: Both) -> None:
    await both.storage.create_session(
        session_id="s", title="Titled", agent_name="a", session_type=5
    )
    await both.session.append("s", a_run("1"), run_id="r1")
    summary = await both.storage.get_session("s")
    assert summary is not None
    assert (summary.title, summary.agent_name, summary.session_type) == ("Titled", "a", 5)
    assert summary.message_count == 4
    await both.storage.append("s", "req", say("after"))
    assert [s.run_id for s in await both.session.segments("s")] == ["r1", "req"]


async def test_clear_and_delete_remove_the_same_session(both: Both) -> None:
    await both.storage.append("a", "req", user("hi"))
    await both.storage.snapshot("a", CompactedMessage(content="s"), 1, 0)
    await both.session.clear("a")
    assert await both.storage.get_session("a") is None
    assert (await both.storage.load("a")).snapshot is None
    await both.session.append("b", a_run("1"), run_id="r1")
    assert await both.storage.delete_session("b") is True
    assert await both.session.segments("b") == []
    # The run id is free again.
    await both.session.append("b", a_run("2"), run_id="r1")
    assert await both.session.load("b") == a_run("2")


async def test_rewind_removes_snapshots_beyond_the_cut(both: Both) -> None:
    for i in range(5):
        await both.session.append("s", [user(f"q{i}"), say(f"a{i}")], run_id=f"r{i}")
    await both.storage.snapshot("s", CompactedMessage(content="v1"), 4, 0)
    await both.storage.snapshot("s", CompactedMessage(content="v2"), 8, 1)
    await both.storage.snapshot("s", CompactedMessage(content="v3"), 9, 2)
    assert await both.session.rewind("s", keep_entries=6) == 4
    view = await both.storage.load("s")
    assert view.snapshot is not None and view.snapshot.version == 1
    assert [r.sequence for r in view.raw_tail] == [5, 6]
    assert view.messages == [CompactedMessage(content="v1"), user("q2"), say("a2")]
    assert await both.storage.count_messages("s") == 6
    # Versioning continues from the latest snapshot left.
    with pytest.raises(SnapshotConflictError) as caught:
        await both.storage.snapshot("s", CompactedMessage(content="stale"), 6, 3)
    assert caught.value.actual == 1
    with pytest.raises(ValueError, match="not a stored sequence"):
        await both.storage.snapshot("s", CompactedMessage(content="gone"), 8, 1)
    again = await both.storage.snapshot("s", CompactedMessage(content="v2 again"), 6, 1)
    assert again.version == 2
    # New messages continue after the highest sequence ever reserved.
    assert await both.storage.append("s", "req", user("next")) == 11
    assert [r.sequence for r in await both.storage.list_raw_messages("s")] == [1, 2, 3, 4, 5, 6, 11]


async def test_rewind_that_keeps_every_snapshot_keeps_the_version(both: Both) -> None:
    for i in range(3):
        await both.session.append("s", [user(f"q{i}"), say(f"a{i}")], run_id=f"r{i}")
    await both.storage.snapshot("s", CompactedMessage(content="v1"), 2, 0)
    assert await both.session.rewind("s", keep_entries=4) == 2
    view = await both.storage.load("s")
    assert view.snapshot is not None and view.snapshot.version == 1
    with pytest.raises(SnapshotConflictError) as caught:
        await both.storage.snapshot("s", CompactedMessage(content="stale"), 4, 0)
    assert caught.value.actual == 1
    assert (await both.storage.snapshot("s", CompactedMessage(content="v2"), 4, 1)).version == 2


async def test_rewind_inside_a_long_segment_finds_its_dangling_call(both: Both) -> None:
    # One request of 104 messages, its tool call 100 rows before the cut: the rows
    # before the cut are read back in pages, and the call is on the second one.
    await both.storage.append("s", "req", user("q"))
    await both.storage.append("s", "req", call("x"))
    for i in range(50):
        await both.storage.append("s", "req", user(f"q{i}"))
        await both.storage.append("s", "req", say(f"a{i}"))
    await both.storage.append("s", "req", result("x"))
    await both.storage.append("s", "req", say("done"))
    assert await both.session.rewind("s", keep_entries=102) == 3
    records = await both.storage.list_raw_messages("s")
    assert [r.sequence for r in records] == [1, *range(3, 103)]


async def test_rewind_drops_every_dangling_call_and_the_snapshots_they_were_in(
    both: Both,
) -> None:
    for message in [user("q"), call("a"), call("b"), result("a"), result("b"), say("done")]:
        await both.storage.append("s", "req", message)
    await both.storage.snapshot("s", CompactedMessage(content="v1"), 2, 0)
    # Keep three: the question and both calls, whose results go, so the calls go too.
    assert await both.session.rewind("s", keep_entries=3) == 5
    view = await both.storage.load("s")
    assert (view.snapshot, view.messages) == (None, [user("q")])
    assert (await both.storage.snapshot("s", CompactedMessage(content="x"), 1, 0)).version == 1


async def test_rewind_to_zero_leaves_no_snapshot(both: Both) -> None:
    await both.storage.append("s", "req", user("q"))
    await both.storage.append("s", "req", say("a"))
    await both.storage.snapshot("s", CompactedMessage(content="v1"), 1, 0)
    assert await both.session.rewind("s", keep_entries=0) == 2
    view = await both.storage.load("s")
    assert (view.snapshot, view.raw_tail) == (None, [])
    await both.storage.append("s", "req", user("new"))
    assert (await both.storage.snapshot("s", CompactedMessage(content="x"), 3, 0)).version == 1


async def test_rewind_that_drops_a_dangling_call_leaves_a_hole(both: Both) -> None:
    for message in [user("q"), call("x"), say("thinking"), result("x"), say("a")]:
        await both.storage.append("s", "req", message)
    # Cut after the call and the text: the call lost its result, so it goes too.
    assert await both.session.rewind("s", keep_entries=3) == 3
    records = await both.storage.list_raw_messages("s")
    assert [(r.sequence, r.message) for r in records] == [(1, user("q")), (3, say("thinking"))]
    assert [r.sequence for r in await both.storage.list_raw_messages("s", offset=1)] == [3]
    with pytest.raises(ValueError, match="not a stored sequence"):
        await both.storage.snapshot("s", CompactedMessage(content="x"), 2, 0)
    assert (await both.storage.snapshot("s", CompactedMessage(content="x"), 3, 0)).version == 1


async def test_paging_after_a_rewind_stays_exact(both: Both) -> None:
    for i in range(6):
        run = [user(f"q{i}"), call(f"c{i}"), result(f"c{i}")]
        await both.session.append("s", run, run_id=f"r{i}")
    await both.session.rewind("s", keep_entries=8)  # r2 keeps its question only
    for i in range(4):
        await both.storage.append("s", "later", say(f"s{i}"))
    log = [r.sequence for r in await both.storage.list_raw_messages("s")]
    assert log == [1, 2, 3, 4, 5, 6, 7, 19, 20, 21, 22]
    for after in (0, 3, 7, 19):
        for offset in (0, 1, 4, 9):
            page = await both.storage.list_raw_messages(
                "s", after_sequence=after, offset=offset, limit=3
            )
            inside = [q for q in log if q > after]
            assert [r.sequence for r in page] == inside[offset : offset + 3]


async def test_trim_marks_the_record_updated(both: Both) -> None:
    await both.session.append("s", a_run("1", output="x" * 3000), run_id="r1")
    await both.session.append("s", a_run("2"), run_id="r2")
    before = await both.storage.list_raw_messages("s")
    assert await both.session.trim_tool_results("s", keep_chars=10) == 1
    after = await both.storage.list_raw_messages("s")
    assert after[2].updated_at > after[2].created_at == before[2].created_at
    assert after[2].message.output.startswith("x" * 10)  # type: ignore[union-attr]
    assert [r.updated_at for i, r in enumerate(after) if i != 2] == [
        r.updated_at for i, r in enumerate(before) if i != 2
    ]
