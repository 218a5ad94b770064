"""The session contract, part two: ``trim_tool_results`` and ``rewind``.

Both are lovia-store's, not the ``Session`` protocol's: a store without them leaves
these cases out (``without=("trim_tool_results", "rewind")``).
"""

from __future__ import annotations

from lovia_store.entries import ToolResultEntry, TranscriptEntry
from lovia_store.errors import UserError
from lovia_store.sessions.contract import Segment

from ._cases import a_run, call, opened, raises, result, say, user
from .sessions import SESSION_CASES, MakeSession, session_case

__all__ = ["SESSION_CASES"]


# -- trim_tool_results ----------------------------------------------------------------------------


@session_case()
async def test_trim_truncates_old_outputs_and_keeps_structure(make: MakeSession) -> None:
    big = "y" * 3000
    async with opened(make()) as store:
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


@session_case()
async def test_trim_skips_outputs_it_would_not_shrink(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1", output="z" * 450), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.trim_tool_results("s", keep_chars=400, keep_runs=1) == 0
        assert await store.load("s") == a_run("1", output="z" * 450) + a_run("2")


@session_case()
async def test_trim_counts_characters_not_bytes(make: MakeSession) -> None:
    # 300 characters, 900 bytes in UTF-8: within keep_chars, so it stays.
    wide = "数" * 300
    # Ends like an already-trimmed output but in other letters: it is not one.
    shouting = "w" * 2000 + "ARCHIVED TO A RESULT STORE]"
    async with opened(make()) as store:
        await store.append("s", a_run("1", output=wide), run_id="r1")
        await store.append("s", a_run("2", output=shouting), run_id="r2")
        await store.append("s", a_run("3"), run_id="r3")
        assert await store.trim_tool_results("s", keep_chars=400, keep_runs=1) == 1
        entries = await store.load("s")
        assert entries[:4] == a_run("1", output=wide)
        assert entries[6].output.startswith("w" * 400)
        assert entries[6].output.endswith("archived to a result store]")


@session_case()
async def test_trim_keep_runs_zero_trims_every_run(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1", output="q" * 2000), run_id="r1")
        await store.append("s", a_run("2", output="q" * 2000), run_id="r2")
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=0) == 2
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=5) == 0


# -- rewind ---------------------------------------------------------------------------------------


@session_case()
async def test_rewind_inside_a_run_truncates_it_and_drops_its_meta(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        await store.append("s", a_run("2"), run_id="r2", meta={"m": 2})
        await store.append("s", a_run("3"), run_id="r3", meta={"m": 3})
        # Keep r1 and the first three entries of r2: question, call, result.
        assert await store.rewind("s", keep_entries=7) == 5
        assert await store.segments("s") == [
            Segment("r1", a_run("1"), {"m": 1}),
            Segment("r2", a_run("2")[:3], None),
        ]


@session_case()
async def test_rewind_drops_a_dangling_tool_call_at_the_cut(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2", meta={"m": 2})
        # The cut falls between r2's call and its result.
        assert await store.rewind("s", keep_entries=6) == 3
        assert await store.segments("s") == [
            Segment("r1", a_run("1"), None),
            Segment("r2", [user("q 2")], None),
        ]
        assert await store.load("s") == [*a_run("1"), user("q 2")]


@session_case()
async def test_rewind_that_leaves_only_a_dangling_call_drops_the_run(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", [call("x"), result("x"), say("done")], run_id="r2")
        assert await store.rewind("s", keep_entries=5) == 3
        assert await store.segments("s") == [Segment("r1", a_run("1"), None)]


@session_case()
async def test_rewind_on_a_run_boundary_keeps_whole_runs(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.rewind("s", keep_entries=4) == 4
        assert await store.segments("s") == [Segment("r1", a_run("1"), {"m": 1})]
        # The rewound run id is free again: re-running it appends a new segment.
        await store.append("s", a_run("2b"), run_id="r2")
        assert [s.run_id for s in await store.segments("s")] == ["r1", "r2"]
        assert await store.load("s") == a_run("1") + a_run("2b")


@session_case()
async def test_rewind_to_zero_empties_and_past_the_end_is_a_no_op(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        assert await store.rewind("s", keep_entries=4) == 0
        assert await store.rewind("s", keep_entries=400) == 0
        assert await store.segments("s") == [Segment("r1", a_run("1"), {"m": 1})]
        assert await store.rewind("s", keep_entries=0) == 4
        assert await store.load("s") == []
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.load("s") == a_run("2")


@session_case()
async def test_megabytes_and_every_emoji_round_trip(make: MakeSession) -> None:
    """Long text columns hold megabytes; utf8mb4 everywhere keeps astral characters."""
    text = "👩‍👩‍👧‍👦 🇨🇭 𝄞 漢字 é " * 10
    huge = "x" * 5_000_000
    entries: list[TranscriptEntry] = [user(text), call("big"), result("big", huge), say(text)]
    async with opened(make()) as store:
        await store.append("s", entries, run_id="r", meta={"emoji": "🦄", "🔑": text})
        assert await store.load("s") == entries
        assert await store.segments("s") == [Segment("r", entries, {"emoji": "🦄", "🔑": text})]


@session_case()
async def test_ids_are_compared_exactly(make: MakeSession) -> None:
    """Case and accents matter in ids (MySQL's default collations would fold them)."""
    async with opened(make()) as store:
        for session_id in ("anna", "Anna", "ANNA", "änna"):
            await store.append(session_id, [user(session_id)], run_id="r")
        await store.append("anna", [user("second")], run_id="R")
        assert await store.load("Anna") == [user("Anna")]
        assert await store.load("änna") == [user("änna")]
        assert [s.run_id for s in await store.segments("anna")] == ["r", "R"]


# Found by the differential tests against lovia's own stores (test_lovia_differential.py).


@session_case()
async def test_runs_without_entries_count_for_trim_s_keep_runs(make: MakeSession) -> None:
    """lovia counts every run, one without entries too: it is the last run here."""
    old = [call("c1"), result("c1", "x" * 1_000)]
    async with opened(make()) as store:
        await store.append("s", old, run_id="r1")
        await store.append("s", [], run_id="empty", meta={"m": 1})
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=1) == 1
        await store.append("s", [], run_id="empty 2")
        await store.append("s", [user("q")], run_id="r2")
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=3) == 0


@session_case()
async def test_a_run_without_entries_keeps_its_place_after_a_rewind(make: MakeSession) -> None:
    """A rewind leaves the sequences it removed unused; segments are placed by sequence."""
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.rewind("s", keep_entries=4) == 4
        await store.append("s", [], run_id="empty")
        await store.append("s", [user("after")], run_id="r3")
        assert [s.run_id for s in await store.segments("s")] == ["r1", "empty", "r3"]


@session_case()
async def test_a_run_without_entries_at_the_cut_stays(make: MakeSession) -> None:
    """As in lovia: the cut falls after the kept entries, so an empty run right there
    (and one before everything, when nothing is kept) is before it."""
    async with opened(make()) as store:
        await store.append("s", [], run_id="first", meta={"m": 0})
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", [], run_id="empty", meta={"m": 1})
        await store.append("s", a_run("2"), run_id="r2")
        await store.append("s", [], run_id="last")
        assert await store.rewind("s", keep_entries=4) == 4
        assert [s.run_id for s in await store.segments("s")] == ["first", "r1", "empty"]
        assert await store.rewind("s", keep_entries=0) == 4
        assert await store.segments("s") == [Segment("first", [], {"m": 0})]


@session_case()
async def test_trim_is_not_fooled_by_the_marker_outside_the_output(make: MakeSession) -> None:
    """Only an output that ends with the marker is already trimmed."""
    marked = result("c1", "x" * 1_000, raw={"note": "archived to a result store]"})
    async with opened(make()) as store:
        await store.append("s", [call("c1"), marked], run_id="r1")
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=0) == 1
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=0) == 0
        trimmed = (await store.load("s"))[1]
        assert isinstance(trimmed, ToolResultEntry) and trimmed.raw is None
        assert trimmed.output.startswith("x" * 10 + "\n[... 990 chars trimmed")


@session_case(params=("run_id", ["r\x00", "x" * 256]))
async def test_ids_no_backend_can_store_are_refused(make: MakeSession, run_id: str) -> None:
    """PostgreSQL's text holds no NUL: refused everywhere, before any SQL."""
    async with opened(make()) as store:
        with raises(UserError, match="run_id"):
            await store.append("s", a_run("1"), run_id=run_id)
        with raises(UserError, match="session_id"):
            await store.append(run_id, a_run("1"), run_id="r1")
        assert await store.load("s") == []


@session_case(params=("call_id", ["c\x00", "c" * 256]))
async def test_call_ids_no_backend_can_store_are_refused(make: MakeSession, call_id: str) -> None:
    """A session row keeps the call id in an id column (255 characters, no NUL)."""
    async with opened(make()) as store:
        with raises(UserError, match=r"entries\[1\]\.call_id"):
            await store.append("s", [user("q"), call(call_id)], run_id="r1")
        assert await store.segments("s") == []


# The fork cases register themselves in SESSION_CASES too (they check fork against rewind).
from . import session_forks  # noqa: E402, F401
