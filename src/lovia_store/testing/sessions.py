"""The session contract, part one: append, load, segments, clear, and bad input refused.

Store-agnostic: every case takes ``make``, a zero-argument callable opening a new store.
A store of a tenant of its own is an empty store: ``make`` may open each one on a shared
database under a new tenant (``SQLSession(db, tenant=...)``) instead of a new database.
``SESSION_CASES`` (in :mod:`lovia_store.testing.session_edits`) holds these and the trim
and rewind cases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from lovia_store.errors import UserError
from lovia_store.sessions.contract import Segment, Session

from ._cases import Case, a_run, case, every_shape, opened, raises, user

MakeSession = Callable[[], Any]
SESSION_CASES: list[Case] = []
session_case = partial(case, SESSION_CASES)


@session_case()
async def test_round_trips_every_entry_shape(make: MakeSession) -> None:
    """Every entry type and content part comes back equal, in order, with its meta."""
    entries = every_shape()
    meta: dict[str, Any] = {"timing": {"started_at": 1.5}, "ünï": ["🦄", None, True, 2.25]}
    async with opened(make()) as store:
        assert await store.append("s", entries[:3], run_id="r1", meta=meta) == "r1"
        assert await store.append("s", entries[3:], run_id="r2") == "r2"
        assert await store.segments("s") == [
            Segment("r1", entries[:3], meta),
            Segment("r2", entries[3:], None),
        ]
        assert await store.load("s") == entries


@session_case()
async def test_is_a_session(make: MakeSession) -> None:
    async with opened(make()) as store:
        assert isinstance(store, Session)


@session_case()
async def test_append_is_idempotent_by_run_id(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"v": 1})
        again = await store.append("s", a_run("other"), run_id="r1", meta={"v": 2})
        assert again == "r1"
        assert await store.segments("s") == [Segment("r1", a_run("1"), {"v": 1})]


@session_case()
async def test_same_run_id_in_two_sessions_is_two_runs(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("a", a_run("a"), run_id="r")
        await store.append("b", a_run("b"), run_id="r")
        assert await store.load("a") == a_run("a")
        assert await store.load("b") == a_run("b")


@session_case()
async def test_generates_a_run_id_when_omitted(make: MakeSession) -> None:
    async with opened(make()) as store:
        first = await store.append("s", a_run("1"))
        second = await store.append("s", a_run("2"))
        assert first != second and len(first) >= 16
        assert [s.run_id for s in await store.segments("s")] == [first, second]


@session_case()
async def test_keeps_run_order_and_separates_sessions(make: MakeSession) -> None:
    async with opened(make()) as store:
        for i in range(5):
            await store.append("a", a_run(f"a{i}"), run_id=f"a{i}")
            await store.append("b", [user(f"b{i}")], run_id=f"b{i}")
        assert [s.run_id for s in await store.segments("a")] == [f"a{i}" for i in range(5)]
        assert await store.load("b") == [user(f"b{i}") for i in range(5)]


@session_case()
async def test_meta_is_stored_verbatim_and_never_aliased(make: MakeSession) -> None:
    meta: dict[str, Any] = {"timing": {"started_at": 1.5, "finished_at": 2.25}, "n": [1, {}]}
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1", meta=meta)
        meta["timing"]["started_at"] = 99
        meta["n"].append("x")
        read = (await store.segments("s"))[0].meta
        assert read == {"timing": {"started_at": 1.5, "finished_at": 2.25}, "n": [1, {}]}
        assert read is not None
        read["n"].append("mutated")
        assert (await store.segments("s"))[0].meta == {
            "timing": {"started_at": 1.5, "finished_at": 2.25},
            "n": [1, {}],
        }


@session_case()
async def test_unknown_session_is_empty(make: MakeSession) -> None:
    async with opened(make()) as store:
        assert await store.load("nobody") == []
        assert await store.segments("nobody") == []
        assert await store.rewind("nobody", keep_entries=0) == 0
        assert await store.trim_tool_results("nobody") == 0


@session_case()
async def test_empty_run_is_a_segment(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", [], run_id="empty", meta={"m": 1})
        await store.append("s", [user("after")], run_id="r2")
        segments = await store.segments("s")
        assert [(s.run_id, len(s.entries)) for s in segments] == [
            ("r1", 4),
            ("empty", 0),
            ("r2", 1),
        ]
        assert segments[1].meta == {"m": 1}


@session_case()
async def test_clear(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("keep", a_run("k"), run_id="k")
        await store.clear("s")
        await store.clear("never-existed")
        assert await store.load("s") == []
        assert await store.load("keep") == a_run("k")
        await store.append("s", a_run("2"), run_id="r1")
        assert await store.segments("s") == [Segment("r1", a_run("2"), None)]


@session_case()
async def test_concurrent_appends_in_one_loop_lose_nothing(make: MakeSession) -> None:
    async with opened(make()) as store:
        await asyncio.gather(*(store.append("s", a_run(str(i)), run_id=f"r{i}") for i in range(20)))
        await asyncio.gather(*(store.append("s", a_run("dup"), run_id=f"r{i}") for i in range(20)))
        segments = await store.segments("s")
        assert sorted(s.run_id for s in segments) == sorted(f"r{i}" for i in range(20))
        for segment in segments:
            assert segment.entries == a_run(segment.run_id[1:])


# -- bad input: a clear error, and nothing written ---------------------------------------------


@session_case(
    params=(
        "meta",
        [
            {"bad": {1, 2}},
            {"nan": float("nan")},
            {1: "non-string key"},
            ["not", "an", "object"],
            {"obj": object()},
        ],
    ),
)
async def test_non_json_meta_is_refused_and_nothing_written(make: MakeSession, meta: Any) -> None:
    async with opened(make()) as store:
        with raises(UserError, match="meta"):
            await store.append("s", a_run("1"), run_id="r1", meta=meta)
        assert await store.segments("s") == []


@session_case(
    params=(
        "entries",
        [
            [{"type": "input", "role": "user", "content": "a dict, not an entry"}],
            ["text"],
            [None],
        ],
    ),
)
async def test_wrong_entry_types_are_refused(make: MakeSession, entries: list[Any]) -> None:
    async with opened(make()) as store:
        with raises(UserError, match=r"entries\[0\]"):
            await store.append("s", entries, run_id="r1")
        assert await store.load("s") == []


@session_case(params=("session_id", ["", None, 5, "x" * 256]))
async def test_bad_session_ids_are_refused(make: MakeSession, session_id: Any) -> None:
    async with opened(make()) as store:
        with raises(UserError, match="session_id"):
            await store.append(session_id, a_run("1"))
        with raises(UserError):
            await store.load(session_id)


@session_case()
async def test_bad_run_id_is_refused(make: MakeSession) -> None:
    async with opened(make()) as store:
        with raises(UserError, match="run_id"):
            await store.append("s", a_run("1"), run_id="")
        assert await store.load("s") == []


@session_case(
    params=(
        "keep_chars, keep_runs",
        [(-1, 1), (400, -1), ("10", 1), (1.5, 1), (True, 1), (2**63, 1), (400, 2**63)],
    ),
)
async def test_bad_trim_arguments(make: MakeSession, keep_chars: Any, keep_runs: Any) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1", output="x" * 5000), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        with raises(ValueError):
            await store.trim_tool_results("s", keep_chars=keep_chars, keep_runs=keep_runs)
        assert await store.load("s") == a_run("1", output="x" * 5000) + a_run("2")


@session_case(params=("keep_entries", [-1, "3", None, 2**63]))
async def test_bad_rewind_arguments(make: MakeSession, keep_entries: Any) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1")
        with raises(ValueError):
            await store.rewind("s", keep_entries=keep_entries)
        assert await store.load("s") == a_run("1")


@session_case()
async def test_counts_up_to_the_largest_bigint_mean_keep_everything(make: MakeSession) -> None:
    largest = 2**63 - 1
    async with opened(make()) as store:
        await store.append("s", a_run("1", output="x" * 5000), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.trim_tool_results("s", keep_chars=largest, keep_runs=largest) == 0
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=largest) == 0
        assert await store.rewind("s", keep_entries=largest) == 0
        assert await store.load("s") == a_run("1", output="x" * 5000) + a_run("2")
