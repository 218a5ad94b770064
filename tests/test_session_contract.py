"""The lovia session contract, run on every backend (memory, SQLite, SQLite WAL, PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conftest import LEGACY, Backend
from helpers import a_run, call, result, say, user
from lovia_store import (
    Segment,
    Session,
    ToolResultEntry,
    UserError,
    entry_from_dict,
    entry_to_dict,
)

MANIFEST = json.loads((LEGACY / "lovia-0.9.119.manifest.json").read_text())


def rich_runs() -> list[tuple[str, list[Any], dict[str, Any] | None]]:
    """Every run of the lovia fixture: all entry types, parts, unicode, odd meta."""
    return [
        (run["run_id"], [entry_from_dict(e) for e in run["entries"]], run["meta"])
        for session in MANIFEST["sessions"]
        for run in session["runs"]
    ]


async def test_is_a_session(backend: Backend) -> None:
    async with backend.session() as store:
        assert isinstance(store, Session)


async def test_round_trips_every_entry_shape_and_meta(backend: Backend) -> None:
    runs = rich_runs()
    async with backend.session() as store:
        for run_id, entries, meta in runs:
            assert await store.append("s", entries, run_id=run_id, meta=meta) == run_id
        segments = await store.segments("s")
        assert [s.run_id for s in segments] == [r[0] for r in runs]
        for segment, (_, entries, meta) in zip(segments, runs, strict=True):
            assert [entry_to_dict(e) for e in segment.entries] == [
                entry_to_dict(e) for e in entries
            ]
            assert segment.meta == meta
        flat = await store.load("s")
        assert flat == [e for _, entries, _ in runs for e in entries]


async def test_survives_reopening(sql_backend: Backend) -> None:
    async with sql_backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"k": [1, 2]})
    async with sql_backend.session() as store:
        assert await store.segments("s") == [Segment("r1", a_run("1"), {"k": [1, 2]})]


async def test_append_is_idempotent_by_run_id(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"v": 1})
        again = await store.append("s", a_run("other"), run_id="r1", meta={"v": 2})
        assert again == "r1"
        assert await store.segments("s") == [Segment("r1", a_run("1"), {"v": 1})]


async def test_same_run_id_in_two_sessions_is_two_runs(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("a", a_run("a"), run_id="r")
        await store.append("b", a_run("b"), run_id="r")
        assert await store.load("a") == a_run("a")
        assert await store.load("b") == a_run("b")


async def test_generates_a_run_id_when_omitted(backend: Backend) -> None:
    async with backend.session() as store:
        first = await store.append("s", a_run("1"))
        second = await store.append("s", a_run("2"))
        assert first != second and len(first) >= 16
        assert [s.run_id for s in await store.segments("s")] == [first, second]


async def test_keeps_run_order_and_separates_sessions(backend: Backend) -> None:
    async with backend.session() as store:
        for i in range(5):
            await store.append("a", a_run(f"a{i}"), run_id=f"a{i}")
            await store.append("b", [user(f"b{i}")], run_id=f"b{i}")
        assert [s.run_id for s in await store.segments("a")] == [f"a{i}" for i in range(5)]
        assert await store.load("b") == [user(f"b{i}") for i in range(5)]


async def test_meta_is_stored_verbatim_and_never_aliased(backend: Backend) -> None:
    meta: dict[str, Any] = {"timing": {"started_at": 1.5, "finished_at": 2.25}, "n": [1, {}]}
    async with backend.session() as store:
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


async def test_unknown_session_is_empty(backend: Backend) -> None:
    async with backend.session() as store:
        assert await store.load("nobody") == []
        assert await store.segments("nobody") == []
        assert await store.rewind("nobody", keep_entries=0) == 0
        assert await store.trim_tool_results("nobody") == 0


async def test_empty_run_is_a_segment(backend: Backend) -> None:
    async with backend.session() as store:
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


async def test_clear(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("keep", a_run("k"), run_id="k")
        await store.clear("s")
        await store.clear("never-existed")
        assert await store.load("s") == []
        assert await store.load("keep") == a_run("k")
        await store.append("s", a_run("2"), run_id="r1")
        assert await store.segments("s") == [Segment("r1", a_run("2"), None)]


async def test_concurrent_appends_in_one_loop_lose_nothing(backend: Backend) -> None:
    async with backend.session() as store:
        await asyncio.gather(*(store.append("s", a_run(str(i)), run_id=f"r{i}") for i in range(20)))
        await asyncio.gather(*(store.append("s", a_run("dup"), run_id=f"r{i}") for i in range(20)))
        segments = await store.segments("s")
        assert sorted(s.run_id for s in segments) == sorted(f"r{i}" for i in range(20))
        for segment in segments:
            assert segment.entries == a_run(segment.run_id[1:])


# -- bad input: a clear error, and nothing written ---------------------------------------------


@pytest.mark.parametrize(
    "meta",
    [
        {"bad": {1, 2}},
        {"nan": float("nan")},
        {1: "non-string key"},
        ["not", "an", "object"],
        {"obj": object()},
    ],
)
async def test_non_json_meta_is_refused_and_nothing_written(backend: Backend, meta: Any) -> None:
    async with backend.session() as store:
        with pytest.raises(UserError, match="meta"):
            await store.append("s", a_run("1"), run_id="r1", meta=meta)
        assert await store.segments("s") == []


@pytest.mark.parametrize(
    "entries",
    [
        [{"type": "input", "role": "user", "content": "a dict, not an entry"}],
        ["text"],
        [None],
    ],
)
async def test_wrong_entry_types_are_refused(backend: Backend, entries: list[Any]) -> None:
    async with backend.session() as store:
        with pytest.raises(UserError, match=r"entries\[0\]"):
            await store.append("s", entries, run_id="r1")
        assert await store.load("s") == []


@pytest.mark.parametrize("session_id", ["", None, 5, "x" * 256])
async def test_bad_session_ids_are_refused(backend: Backend, session_id: Any) -> None:
    async with backend.session() as store:
        with pytest.raises(UserError, match="session_id"):
            await store.append(session_id, a_run("1"))
        with pytest.raises(UserError):
            await store.load(session_id)


async def test_bad_run_id_is_refused(backend: Backend) -> None:
    async with backend.session() as store:
        with pytest.raises(UserError, match="run_id"):
            await store.append("s", a_run("1"), run_id="")
        assert await store.load("s") == []


@pytest.mark.parametrize(
    ("keep_chars", "keep_runs"),
    [(-1, 1), (400, -1), ("10", 1), (1.5, 1), (True, 1), (2**63, 1), (400, 2**63)],
)
async def test_bad_trim_arguments(backend: Backend, keep_chars: Any, keep_runs: Any) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1", output="x" * 5000), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        with pytest.raises(ValueError):
            await store.trim_tool_results("s", keep_chars=keep_chars, keep_runs=keep_runs)
        assert await store.load("s") == a_run("1", output="x" * 5000) + a_run("2")


@pytest.mark.parametrize("keep_entries", [-1, "3", None, 2**63])
async def test_bad_rewind_arguments(backend: Backend, keep_entries: Any) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1")
        with pytest.raises(ValueError):
            await store.rewind("s", keep_entries=keep_entries)
        assert await store.load("s") == a_run("1")


async def test_counts_up_to_the_largest_bigint_mean_keep_everything(backend: Backend) -> None:
    largest = 2**63 - 1
    async with backend.session() as store:
        await store.append("s", a_run("1", output="x" * 5000), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.trim_tool_results("s", keep_chars=largest, keep_runs=largest) == 0
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=largest) == 0
        assert await store.rewind("s", keep_entries=largest) == 0
        assert await store.load("s") == a_run("1", output="x" * 5000) + a_run("2")


# -- trim_tool_results ----------------------------------------------------------------------------


async def test_trim_truncates_old_outputs_and_keeps_structure(backend: Backend) -> None:
    big = "y" * 3000
    async with backend.session() as store:
        await store.append("s", a_run("1", output=big), run_id="r1", meta={"m": 1})
        await store.append(
            "s",
            [call("e"), result("e", big).model_copy(update={"is_error": True, "raw": {"a": 1}})],
            run_id="r2",
        )
        await store.append("s", a_run("3", output=big), run_id="r3")
        assert await store.trim_tool_results("s", keep_chars=100, keep_runs=1) == 2
        segments = await store.segments("s")
        assert [s.run_id for s in segments] == ["r1", "r2", "r3"]
        assert segments[0].meta == {"m": 1}
        old = segments[0].entries[2]
        assert old.type == "tool_result" and old.call_id == "c-1"
        assert old.output.startswith("y" * 100) and "3,000" not in old.output
        assert old.output.endswith("archived to a result store]")
        assert len(old.output) < 400
        errored = segments[1].entries[1]
        assert errored.type == "tool_result"
        assert errored.is_error is True and errored.raw is None
        assert [e.type for e in segments[0].entries] == [e.type for e in a_run("1")]
        assert segments[2].entries == a_run("3", output=big)  # the last run stays verbatim
        # A second trim finds nothing left to do.
        assert await store.trim_tool_results("s", keep_chars=100, keep_runs=1) == 0
        assert await store.segments("s") == segments


async def test_trim_skips_outputs_it_would_not_shrink(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1", output="z" * 450), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.trim_tool_results("s", keep_chars=400, keep_runs=1) == 0
        assert await store.load("s") == a_run("1", output="z" * 450) + a_run("2")


async def test_trim_counts_characters_not_bytes(backend: Backend) -> None:
    # 300 characters, 900 bytes in UTF-8: within keep_chars, so it stays.
    wide = "数" * 300
    # Ends like an already-trimmed output but in other letters: it is not one.
    shouting = "w" * 2000 + "ARCHIVED TO A RESULT STORE]"
    async with backend.session() as store:
        await store.append("s", a_run("1", output=wide), run_id="r1")
        await store.append("s", a_run("2", output=shouting), run_id="r2")
        await store.append("s", a_run("3"), run_id="r3")
        assert await store.trim_tool_results("s", keep_chars=400, keep_runs=1) == 1
        entries = await store.load("s")
        assert entries[:4] == a_run("1", output=wide)
        assert entries[6].output.startswith("w" * 400)
        assert entries[6].output.endswith("archived to a result store]")


async def test_trim_keep_runs_zero_trims_every_run(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1", output="q" * 2000), run_id="r1")
        await store.append("s", a_run("2", output="q" * 2000), run_id="r2")
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=0) == 2
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=5) == 0


# -- rewind ---------------------------------------------------------------------------------------


async def test_rewind_inside_a_run_truncates_it_and_drops_its_meta(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        await store.append("s", a_run("2"), run_id="r2", meta={"m": 2})
        await store.append("s", a_run("3"), run_id="r3", meta={"m": 3})
        # Keep r1 and the first three entries of r2: question, call, result.
        assert await store.rewind("s", keep_entries=7) == 5
        assert await store.segments("s") == [
            Segment("r1", a_run("1"), {"m": 1}),
            Segment("r2", a_run("2")[:3], None),
        ]


async def test_rewind_drops_a_dangling_tool_call_at_the_cut(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2", meta={"m": 2})
        # The cut falls between r2's call and its result.
        assert await store.rewind("s", keep_entries=6) == 3
        assert await store.segments("s") == [
            Segment("r1", a_run("1"), None),
            Segment("r2", [user("q 2")], None),
        ]
        assert await store.load("s") == [*a_run("1"), user("q 2")]


async def test_rewind_that_leaves_only_a_dangling_call_drops_the_run(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", [call("x"), result("x"), say("done")], run_id="r2")
        assert await store.rewind("s", keep_entries=5) == 3
        assert await store.segments("s") == [Segment("r1", a_run("1"), None)]


async def test_rewind_on_a_run_boundary_keeps_whole_runs(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.rewind("s", keep_entries=4) == 4
        assert await store.segments("s") == [Segment("r1", a_run("1"), {"m": 1})]
        # The rewound run id is free again: re-running it appends a new segment.
        await store.append("s", a_run("2b"), run_id="r2")
        assert [s.run_id for s in await store.segments("s")] == ["r1", "r2"]
        assert await store.load("s") == a_run("1") + a_run("2b")


async def test_rewind_to_zero_empties_and_past_the_end_is_a_no_op(backend: Backend) -> None:
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        assert await store.rewind("s", keep_entries=4) == 0
        assert await store.rewind("s", keep_entries=400) == 0
        assert await store.segments("s") == [Segment("r1", a_run("1"), {"m": 1})]
        assert await store.rewind("s", keep_entries=0) == 4
        assert await store.load("s") == []
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.load("s") == a_run("2")


async def test_megabytes_and_every_emoji_round_trip(backend: Backend) -> None:
    """Long text columns hold megabytes; utf8mb4 everywhere keeps astral characters."""
    text = "👩‍👩‍👧‍👦 🇨🇭 𝄞 漢字 é " * 10
    huge = "x" * 5_000_000
    entries = [user(text), call("big"), result("big", huge), say(text)]
    async with backend.session() as store:
        await store.append("s", entries, run_id="r", meta={"emoji": "🦄", "🔑": text})
    async with backend.session() as store:
        if not backend.durable:
            await store.append("s", entries, run_id="r", meta={"emoji": "🦄", "🔑": text})
        assert await store.load("s") == entries
        assert await store.segments("s") == [Segment("r", entries, {"emoji": "🦄", "🔑": text})]


async def test_ids_are_compared_exactly(backend: Backend) -> None:
    """Case and accents matter in ids (MySQL's default collations would fold them)."""
    async with backend.session() as store:
        for session_id in ("anna", "Anna", "ANNA", "änna"):
            await store.append(session_id, [user(session_id)], run_id="r")
        await store.append("anna", [user("second")], run_id="R")
        assert await store.load("Anna") == [user("Anna")]
        assert await store.load("änna") == [user("änna")]
        assert [s.run_id for s in await store.segments("anna")] == ["r", "R"]


# Found by the differential tests against lovia's own stores (test_lovia_differential.py).


async def test_runs_without_entries_count_for_trim_s_keep_runs(backend: Backend) -> None:
    """lovia counts every run, one without entries too: it is the last run here."""
    old = [call("c1"), result("c1", "x" * 1_000)]
    async with backend.session() as store:
        await store.append("s", old, run_id="r1")
        await store.append("s", [], run_id="empty", meta={"m": 1})
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=1) == 1
        await store.append("s", [], run_id="empty 2")
        await store.append("s", [user("q")], run_id="r2")
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=3) == 0


async def test_a_run_without_entries_keeps_its_place_after_a_rewind(backend: Backend) -> None:
    """A rewind leaves the sequences it removed unused; segments are placed by sequence."""
    async with backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.rewind("s", keep_entries=4) == 4
        await store.append("s", [], run_id="empty")
        await store.append("s", [user("after")], run_id="r3")
        assert [s.run_id for s in await store.segments("s")] == ["r1", "empty", "r3"]


async def test_a_run_without_entries_at_the_cut_stays(backend: Backend) -> None:
    """As in lovia: the cut falls after the kept entries, so an empty run right there
    (and one before everything, when nothing is kept) is before it."""
    async with backend.session() as store:
        await store.append("s", [], run_id="first", meta={"m": 0})
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", [], run_id="empty", meta={"m": 1})
        await store.append("s", a_run("2"), run_id="r2")
        await store.append("s", [], run_id="last")
        assert await store.rewind("s", keep_entries=4) == 4
        assert [s.run_id for s in await store.segments("s")] == ["first", "r1", "empty"]
        assert await store.rewind("s", keep_entries=0) == 4
        assert await store.segments("s") == [Segment("first", [], {"m": 0})]


async def test_trim_is_not_fooled_by_the_marker_outside_the_output(backend: Backend) -> None:
    """Only an output that ends with the marker is already trimmed."""
    marked = result("c1", "x" * 1_000, raw={"note": "archived to a result store]"})
    async with backend.session() as store:
        await store.append("s", [call("c1"), marked], run_id="r1")
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=0) == 1
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=0) == 0
        trimmed = (await store.load("s"))[1]
        assert isinstance(trimmed, ToolResultEntry) and trimmed.raw is None
        assert trimmed.output.startswith("x" * 10 + "\n[... 990 chars trimmed")


@pytest.mark.parametrize("run_id", ["r\x00", "x" * 256])
async def test_ids_no_backend_can_store_are_refused(backend: Backend, run_id: str) -> None:
    """PostgreSQL's text holds no NUL: refused everywhere, before any SQL."""
    async with backend.session() as store:
        with pytest.raises(UserError, match="run_id"):
            await store.append("s", a_run("1"), run_id=run_id)
        with pytest.raises(UserError, match="session_id"):
            await store.append(run_id, a_run("1"), run_id="r1")
        assert await store.load("s") == []


@pytest.mark.parametrize("call_id", ["c\x00", "c" * 256])
async def test_call_ids_no_backend_can_store_are_refused(backend: Backend, call_id: str) -> None:
    """A session row keeps the call id in an id column (255 characters, no NUL)."""
    async with backend.session() as store:
        with pytest.raises(UserError, match=r"entries\[1\]\.call_id"):
            await store.append("s", [user("q"), call(call_id)], run_id="r1")
        assert await store.segments("s") == []
