"""The session contract, part three: ``fork`` and ``fork_origin``.

lovia-store's, not the ``Session`` protocol's: a store without them leaves these
cases out (``without=("fork", "fork_origin")``). A fork is checked against
``rewind``: the new session holds what the origin would after a rewind to the
same count, and the origin is untouched.
"""

from __future__ import annotations

from typing import Any

from lovia_store import ForkOrigin, Segment
from lovia_store.entries import TranscriptEntry
from lovia_store.errors import UserError

from ._cases import a_run, call, opened, raises, result, say, user
from .sessions import MakeSession, session_case

__all__: list[str] = []


async def _fill(store: Any, session_id: str) -> None:
    """Runs with meta, a run without entries, tool round trips: 15 entries."""
    await store.append(session_id, [], run_id="first", meta={"m": 0})
    await store.append(session_id, a_run("1"), run_id="r1", meta={"m": 1})
    await store.append(session_id, [], run_id="empty", meta={"e": 1})
    await store.append(
        session_id,
        [user("q 2"), call("a"), call("b"), result("b"), result("a"), say("a 2")],
        run_id="r2",
        meta={"m": 2},
    )
    await store.append(session_id, a_run("3"), run_id="r3")
    await store.append(session_id, [user("last")], run_id="r4")


@session_case()
async def test_fork_holds_what_a_rewind_would_keep_at_every_count(make: MakeSession) -> None:
    async with opened(make()) as store:
        await _fill(store, "s")
        origin = await store.segments("s")
        total = len(await store.load("s"))
        for keep in range(total + 1):
            held = await store.fork("s", f"f{keep}", keep_entries=keep)
            await _fill(store, f"w{keep}")
            await store.rewind(f"w{keep}", keep_entries=keep)
            expected = await store.segments(f"w{keep}")
            assert await store.segments(f"f{keep}") == expected, keep
            assert held == len(await store.load(f"f{keep}")) == len(await store.load(f"w{keep}"))
            assert await store.fork_origin(f"f{keep}") == ForkOrigin("s", keep)
        assert await store.segments("s") == origin
        assert await store.fork_origin("s") is None


@session_case()
async def test_fork_inside_a_run_keeps_its_id_and_drops_its_meta(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        await store.append("s", a_run("2"), run_id="r2", meta={"m": 2})
        assert await store.fork("s", "f", keep_entries=7) == 7
        assert await store.segments("f") == [
            Segment("r1", a_run("1"), {"m": 1}),
            Segment("r2", a_run("2")[:3], None),
        ]
        assert await store.load("s") == a_run("1") + a_run("2")
        # The cut run's id is the fork's: appending it again there is the no-op.
        await store.append("f", [say("other")], run_id="r2")
        assert await store.load("f") == a_run("1") + a_run("2")[:3]


@session_case()
async def test_fork_at_a_tool_call_drops_the_dangling_call(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.fork("s", "f", keep_entries=6) == 5
        assert await store.load("f") == [*a_run("1"), user("q 2")]
        assert await store.fork_origin("f") == ForkOrigin("s", 6)


@session_case()
async def test_fork_and_origin_then_grow_apart(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1")
        await store.append("s", a_run("2"), run_id="r2")
        assert await store.fork("s", "f", keep_entries=4) == 4
        await store.append("f", a_run("2b"), run_id="r2")  # free again in the fork
        await store.append("s", [user("more")], run_id="r3")
        assert await store.load("f") == a_run("1") + a_run("2b")
        assert await store.load("s") == [*a_run("1"), *a_run("2"), user("more")]
        # A fork of a fork names its own origin.
        assert await store.fork("f", "ff", keep_entries=8) == 8
        assert await store.fork_origin("ff") == ForkOrigin("f", 8)
        assert await store.load("ff") == await store.load("f")
        await store.clear("f")
        assert await store.fork_origin("f") is None
        assert await store.load("ff") == a_run("1") + a_run("2b")


@session_case()
async def test_fork_of_everything_and_of_nothing(make: MakeSession) -> None:
    async with opened(make()) as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        await store.append("s", [], run_id="empty", meta={"e": 1})
        assert await store.fork("s", "all", keep_entries=4) == 4
        assert await store.segments("all") == await store.segments("s")
        assert await store.fork("s", "none", keep_entries=0) == 0
        assert await store.segments("none") == []
        assert await store.fork_origin("none") == ForkOrigin("s", 0)
        await store.append("none", [user("fresh")], run_id="r1")
        assert await store.load("none") == [user("fresh")]


@session_case()
async def test_fork_refusals_change_nothing(make: MakeSession) -> None:
    entries: list[TranscriptEntry] = a_run("1")
    async with opened(make()) as store:
        await store.append("s", entries, run_id="r1")
        await store.append("taken", [user("mine")], run_id="t")
        with raises(UserError, match="'nobody'"):
            await store.fork("nobody", "f", keep_entries=0)
        with raises(UserError, match="already exists"):
            await store.fork("s", "taken", keep_entries=2)
        with raises(UserError, match="already exists"):
            await store.fork("s", "s", keep_entries=2)
        with raises(UserError, match="keep_entries"):
            await store.fork("s", "f", keep_entries=5)
        for bad in (-1, 1.5, True, "2"):
            with raises(UserError, match="keep_entries"):
                await store.fork("s", "f", keep_entries=bad)
        with raises(UserError, match="new_session_id"):
            await store.fork("s", "f\x00", keep_entries=1)
        with raises(UserError, match="session_id"):
            await store.fork("s\x00", "f", keep_entries=1)
        assert await store.load("s") == entries
        assert await store.load("taken") == [user("mine")]
        assert await store.segments("f") == []
        assert await store.fork_origin("f") is None
        assert await store.fork_origin("taken") is None
