"""The checkpoint contract: append, load, delete and ``list_runs``, bad input refused.

Store-agnostic: every case takes ``make``, a zero-argument callable opening a new
checkpointer. ``list_runs`` is lovia-store's, not the ``Checkpointer`` protocol's: a store
without it leaves the cases about it out (``without=("list_runs",)``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from lovia_store.checkpoints.contract import Checkpointer, RunHead, RunSnapshot
from lovia_store.entries import InputEntry, Usage, entry_to_dict
from lovia_store.errors import UserError

from ._cases import Case, a_run, call, case, every_shape, opened, raises, result, say, user

MakeCheckpointer = Callable[[], Any]
CHECKPOINT_CASES: list[Case] = []
checkpoint_case = partial(case, CHECKPOINT_CASES)


async def listed(cp: Any) -> list[str] | None:
    """The run ids ``list_runs`` shows, or None for a store without ``list_runs``.

    Cases that only double-check with ``list_runs`` call it through here, so they run on
    a store without it as well.
    """
    list_runs = getattr(cp, "list_runs", None)
    if list_runs is None:
        return None
    return [summary.run_id for summary in await list_runs()]


def full_head(**changes: Any) -> RunHead:
    """A head with every field away from its default, so a lost field shows."""
    values: dict[str, Any] = {
        "agent_name": "researcher",
        "usage": Usage(
            input_tokens=120,
            output_tokens=34,
            cache_read_tokens=56,
            cache_write_tokens=7,
            reasoning_tokens=8,
        ),
        "turns": 3,
        "status": "interrupted",
        "output": {"answer": [1, 2.5, "drei", None, True], "nested": {"k": {}}},
        "error": {"type": "ProviderError", "message": "overloaded", "details": {"n": 3}},
        "last_input_tokens": 99,
        "context_state": {"context": {"version": 3, "summary": {"text": "ünïcødé ✓"}}},
        "started_at": 1767261599.5,
        "pending_handoff": "writer",
        "updated_at": 1767261607.75,
    }
    values.update(changes)
    return RunHead(**values)


# -- append and load ------------------------------------------------------------------------------


@checkpoint_case()
async def test_is_a_checkpointer(make: MakeCheckpointer) -> None:
    """Every bundled store satisfies the runtime-checkable protocol CheckpointOptions checks."""
    async with opened(make()) as cp:
        assert isinstance(cp, Checkpointer)


@checkpoint_case()
async def test_load_rebuilds_entries_in_order_and_the_latest_head(
    make: MakeCheckpointer,
) -> None:
    """Batches concatenate in append order; the head is the last one written, field for field."""
    entries = every_shape()
    batches = [entries[:1], entries[1:4], entries[4:5], entries[5:]]
    async with opened(make()) as cp:
        for turns, batch in enumerate(batches):
            await cp.append("run-1", batch, full_head(turns=turns, status="running"))
        last = full_head()
        await cp.append("run-1", [], last)
        snapshot = await cp.load("run-1")
    assert snapshot is not None
    assert snapshot.run_id == "run-1"
    assert [entry_to_dict(e) for e in snapshot.entries] == [entry_to_dict(e) for e in entries]
    assert snapshot.head == last
    # Each head field survives, not just equality of the whole model.
    assert snapshot.usage == last.usage and snapshot.usage.reasoning_tokens == 8
    assert snapshot.turns == 3 and snapshot.status == "interrupted"
    assert snapshot.output == last.output and snapshot.error == last.error
    assert snapshot.context_state == last.context_state
    assert snapshot.last_input_tokens == 99
    assert snapshot.started_at == 1767261599.5 and snapshot.updated_at == 1767261607.75
    assert snapshot.pending_handoff == "writer" and snapshot.agent_name == "researcher"


@checkpoint_case()
async def test_a_large_batch_keeps_its_order(
    make: MakeCheckpointer,
) -> None:
    """One multi-row append keeps entry order."""
    batch = [say(f"step {i}") for i in range(300)]
    async with opened(make()) as cp:
        await cp.append("big", batch[:1], RunHead(agent_name="a"))
        await cp.append("big", batch[1:], RunHead(agent_name="a", turns=300))
        snapshot = await cp.load("big")
    assert snapshot is not None and snapshot.entries == batch


@checkpoint_case()
async def test_head_only_append_changes_the_head_and_adds_no_entries(
    make: MakeCheckpointer,
) -> None:
    """The runner's head-only writes (handoff pending, finalization) must not add entries."""
    async with opened(make()) as cp:
        await cp.append("r", a_run("1"), RunHead(agent_name="a", turns=1))
        await cp.append("r", [], RunHead(agent_name="b", turns=2, status="completed", output="x"))
        snapshot = await cp.load("r")
    assert snapshot is not None
    assert snapshot.entries == a_run("1")
    assert (snapshot.agent_name, snapshot.turns, snapshot.status, snapshot.output) == (
        "b",
        2,
        "completed",
        "x",
    )


@checkpoint_case()
async def test_a_head_only_first_append_creates_an_empty_run(
    make: MakeCheckpointer,
) -> None:
    """A run may exist with a head and no entries yet."""
    async with opened(make()) as cp:
        await cp.append("r", [], RunHead(agent_name="a"))
        snapshot = await cp.load("r")
    assert snapshot is not None and snapshot.entries == [] and snapshot.agent_name == "a"


@checkpoint_case()
async def test_stored_entries_are_never_rewritten(
    make: MakeCheckpointer,
) -> None:
    """Appending the same entries again adds them again; nothing earlier changes or merges."""
    async with opened(make()) as cp:
        await cp.append("r", [user("q"), call("c1")], RunHead(agent_name="a"))
        await cp.append("r", [call("c1"), result("c1", "second")], RunHead(agent_name="a"))
        snapshot = await cp.load("r")
        assert snapshot is not None
        assert snapshot.entries == [user("q"), call("c1"), call("c1"), result("c1", "second")]
        # A loaded snapshot is the caller's: changing it changes nothing stored.
        snapshot.entries.clear()
        snapshot.context_state["leak"] = True
        again = await cp.load("r")
    assert again is not None
    assert again.entries == [user("q"), call("c1"), call("c1"), result("c1", "second")]
    assert again.context_state == {}


@checkpoint_case()
async def test_the_stored_head_is_not_aliased(
    make: MakeCheckpointer,
) -> None:
    """The runner mutates one RunHead in place; what was stored must not follow it."""
    head = full_head()
    expected = head.model_copy(deep=True)
    async with opened(make()) as cp:
        await cp.append("r", a_run("1"), head)
        head.turns = 99
        head.status = "completed"
        head.usage.input_tokens = 1
        context, output = head.context_state["context"], head.output
        assert isinstance(context, dict) and isinstance(output, dict)
        context["version"] = 4
        answer = output["answer"]
        assert isinstance(answer, list)
        answer.append("mutated")
        snapshot = await cp.load("r")
    assert snapshot is not None and snapshot.head == expected


@checkpoint_case()
async def test_runs_are_kept_apart(make: MakeCheckpointer) -> None:
    """Concurrent runs never see each other's entries or heads."""
    async with opened(make()) as cp:
        await asyncio.gather(
            *(
                cp.append(f"r{i}", a_run(str(i)), RunHead(agent_name=f"a{i}", turns=i))
                for i in range(8)
            )
        )
        for i in range(8):
            snapshot = await cp.load(f"r{i}")
            assert snapshot is not None
            assert (snapshot.entries, snapshot.agent_name, snapshot.turns) == (
                a_run(str(i)),
                f"a{i}",
                i,
            )


@checkpoint_case()
async def test_concurrent_appends_to_one_run_lose_nothing(
    make: MakeCheckpointer,
) -> None:
    """Positions are reserved atomically: every batch lands whole and none overwrite another."""
    async with opened(make()) as cp:
        await cp.append("r", [user("start")], RunHead(agent_name="a"))
        await asyncio.gather(
            *(cp.append("r", a_run(str(i)), RunHead(agent_name="a", turns=i)) for i in range(10))
        )
        snapshot = await cp.load("r")
    assert snapshot is not None
    assert snapshot.entries[0] == user("start") and len(snapshot.entries) == 41
    batches = [snapshot.entries[1 + 4 * k : 5 + 4 * k] for k in range(10)]
    questions = [batch[0] for batch in batches]
    assert sorted(questions, key=str) == sorted((user(f"q {i}") for i in range(10)), key=str)
    for batch, question in zip(batches, questions, strict=True):
        assert isinstance(question, InputEntry) and isinstance(question.content, str)
        assert batch == a_run(question.content.removeprefix("q "))


@checkpoint_case()
async def test_unknown_run_loads_none(make: MakeCheckpointer) -> None:
    """None, not an empty snapshot, tells the runner to start fresh."""
    async with opened(make()) as cp:
        assert await cp.load("nobody") is None
        await cp.append("somebody", [user("q")], RunHead(agent_name="a"))
        assert await cp.load("nobody") is None


@checkpoint_case()
async def test_delete_removes_only_that_run_and_unknown_is_a_no_op(
    make: MakeCheckpointer,
) -> None:
    """Deleting is idempotent and scoped to one run; the id can be reused afterwards."""
    async with opened(make()) as cp:
        await cp.append("gone", a_run("g"), RunHead(agent_name="a", turns=5))
        await cp.append("kept", a_run("k"), RunHead(agent_name="a"))
        await cp.delete("gone")
        await cp.delete("gone")
        await cp.delete("never-existed")
        assert await cp.load("gone") is None
        kept = await cp.load("kept")
        assert kept is not None and kept.entries == a_run("k")
        assert await listed(cp) in (["kept"], None)
        # A deleted id is free again: a new run under it starts from nothing.
        await cp.append("gone", [user("again")], RunHead(agent_name="b"))
        again = await cp.load("gone")
    assert again is not None
    assert again.entries == [user("again")] and again.turns == 0 and again.agent_name == "b"


# -- list_runs ------------------------------------------------------------------------------------


@checkpoint_case()
async def test_list_runs_by_latest_update_with_status_limit_and_offset(
    make: MakeCheckpointer,
) -> None:
    """An operator finds interrupted runs, newest activity first, page by page."""
    async with opened(make()) as cp:
        statuses = {"r1": "running", "r2": "interrupted", "r3": "completed", "r4": "interrupted"}
        for run_id, status in statuses.items():
            await cp.append(run_id, a_run(run_id), RunHead(agent_name="a", status=status))
            await asyncio.sleep(0.01)
        # A head-only refresh of r2 makes it the most recently updated run.
        await cp.append(
            "r2", [], RunHead(agent_name="b", status="interrupted", turns=4, started_at=12.5)
        )
        runs = await cp.list_runs()
        assert [r.run_id for r in runs] == ["r2", "r4", "r3", "r1"]
        assert [r.run_id for r in await cp.list_runs(status="interrupted")] == ["r2", "r4"]
        assert [r.run_id for r in await cp.list_runs(status="completed")] == ["r3"]
        assert await cp.list_runs(status="failed") == []
        assert [r.run_id for r in await cp.list_runs(limit=2)] == ["r2", "r4"]
        assert [r.run_id for r in await cp.list_runs(limit=2, offset=1)] == ["r4", "r3"]
        assert [r.run_id for r in await cp.list_runs(status="interrupted", offset=1)] == ["r4"]
        assert await cp.list_runs(offset=4) == []
    top = runs[0]
    assert (top.status, top.agent_name, top.turns, top.entry_count, top.started_at) == (
        "interrupted",
        "b",
        4,
        4,
        12.5,
    )
    assert top.updated_at.tzinfo is not None
    assert all(a.updated_at >= b.updated_at for a, b in itertools.pairwise(runs))
    assert abs((datetime.now(UTC) - top.updated_at).total_seconds()) < 60


BAD_LISTINGS: list[dict[str, Any]] = [
    {"status": "paused"},
    {"status": ""},
    {"limit": 0},
    {"limit": -1},
    {"limit": True},
    {"limit": "10"},
    {"limit": 2.0},
    {"offset": -1},
    {"offset": None},
    {"offset": False},
]


@checkpoint_case()
async def test_list_runs_refuses_bad_arguments(
    make: MakeCheckpointer,
) -> None:
    """Bad paging or status is a UserError (a ValueError), not an empty or wrong page."""
    async with opened(make()) as cp:
        await cp.append("r", [user("q")], RunHead(agent_name="a"))
        for arguments in BAD_LISTINGS:
            with raises(UserError) as raised:
                await cp.list_runs(**arguments)
            assert isinstance(raised.value, ValueError), arguments
            field = next(iter(arguments))
            assert field in str(raised.value), arguments


# -- bad input: a clear error, and nothing stored -------------------------------------------------


@checkpoint_case(
    params=(
        "entries",
        [
            [{"type": "input", "role": "user", "content": "a dict, not an entry"}],
            ["text"],
            [None],
            [user("fine"), 42],
        ],
    ),
)
async def test_non_entries_are_refused_and_nothing_stored(
    make: MakeCheckpointer, entries: list[Any]
) -> None:
    """A batch with a non-entry is refused whole: no partial batch, no head change."""
    async with opened(make()) as cp:
        with raises(UserError, match=r"entries\[\d\]"):
            await cp.append("new", entries, RunHead(agent_name="a"))
        assert await cp.load("new") is None
        await cp.append("old", [user("q")], RunHead(agent_name="a"))
        with raises(UserError):
            await cp.append("old", entries, RunHead(agent_name="changed", turns=9))
        old = await cp.load("old")
    assert old is not None and old.entries == [user("q")] and old.agent_name == "a"


@checkpoint_case(
    params=(
        "head",
        [
            None,
            {"agent_name": "a"},
            "a",
            RunSnapshot(run_id="r", agent_name="a"),
        ],
    ),
    ids=["none", "dict", "str", "snapshot"],
)
async def test_a_head_that_is_not_a_run_head_is_refused(make: MakeCheckpointer, head: Any) -> None:
    """Only a RunHead is a head (a snapshot is not); nothing is stored otherwise."""
    async with opened(make()) as cp:
        with raises(UserError, match="head"):
            await cp.append("r", [user("q")], head)
        assert await cp.load("r") is None
        assert await listed(cp) in ([], None)


@checkpoint_case(params=("run_id", ["", None, 7, "x" * 256]))
async def test_bad_run_ids_are_refused(make: MakeCheckpointer, run_id: Any) -> None:
    """run_id is the global key: empty, non-string or over-long ids are refused everywhere."""
    async with opened(make()) as cp:
        with raises(UserError, match="run_id"):
            await cp.append(run_id, [user("q")], RunHead(agent_name="a"))
        with raises(UserError, match="run_id"):
            await cp.load(run_id)
        with raises(UserError, match="run_id"):
            await cp.delete(run_id)
        assert await listed(cp) in ([], None)
