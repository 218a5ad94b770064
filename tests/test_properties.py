"""Hostile input on every backend, property-based (issue 18's permanent suite).

Generated calls of the session, checkpoint and Raw Log APIs, with ids of any
code point (lone surrogates, NUL, trailing spaces, case variants, 256 and
more characters, wrong types), JSON values (integers past 64 bits, NaN and
infinities, nesting around the 200-level limit, non-string keys), counts at
and past every bound, and arguments of the wrong type, run on each backend
(memory, SQLite in both journals, PostgreSQL through asyncpg and psycopg,
MariaDB) beside a reference store fed the same calls: the in-memory stores for
sessions and checkpoints, a SQLite file for the Raw Log (which has no
in-memory store). Asserted, for every call:

- only ``LoviaStoreError`` subclasses escape, and both stores answer alike
  (the same value, or the same refusal class);
- a refused call leaves the rows it names unchanged (read before and after);
- an accepted value reads back equal to what was given and to the reference;
- after any call the next ordinary call on the same store succeeds (the D1
  canary: one bad call must not break a pooled connection);
- ids that differ only by trailing spaces or case stay apart (the reference
  compares them exactly; the ids are drawn mostly from a set of such variants).

Bounded for CI: derandomized, a few dozen examples per test and backend, files
in memory-backed storage where there is some.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from conftest import ALL_KINDS, SQL_KINDS, SQLITE_KINDS, fresh_server_database
from lovia_store import (
    AssistantTextEntry,
    CompactedMessage,
    Database,
    InMemoryCheckpointer,
    InMemorySession,
    InputEntry,
    LoviaStoreError,
    MessageTiming,
    ReasoningEntry,
    RunHead,
    SQLCheckpointer,
    SQLiteSessionStorage,
    SQLSession,
    SQLSessionStorage,
    ToolCallEntry,
    ToolResultEntry,
    UserError,
)

EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
FILES = "/dev/shm" if Path("/dev/shm").is_dir() else None


@contextlib.contextmanager
def database(kind: str) -> Iterator[tuple[asyncio.Runner, Database | None]]:
    """One event loop and one database of ``kind`` (None for memory) for a whole test."""
    with asyncio.Runner() as runner, contextlib.ExitStack() as cleanup:
        if kind == "memory":
            yield runner, None
            return
        if kind in SQLITE_KINDS:
            folder = cleanup.enter_context(tempfile.TemporaryDirectory(dir=FILES))
            db = Database(str(Path(folder) / "store.sqlite3"), wal=kind == "sqlite_wal")
        else:
            server = fresh_server_database("mariadb" if kind == "mariadb" else "postgres")
            url = runner.run(server.__aenter__())
            cleanup.callback(lambda: runner.run(server.__aexit__(None, None, None)))
            if kind == "postgres_psycopg":
                url = make_url(url).set(drivername="postgresql+psycopg")
                url = url.render_as_string(hide_password=False)
            db = Database(url)
        cleanup.callback(lambda: runner.run(db.close()))
        yield runner, db


def weighted(choices: dict[str, st.SearchStrategy[Any]], **weights: int) -> st.SearchStrategy[Any]:
    """One of ``choices``, each drawn ``weights[name]`` times as often as one without
    (hypothesis draws the branches of ``one_of`` alike)."""
    names = [name for name in choices for _ in range(weights.get(name, 1))]
    return st.sampled_from(names).flatmap(choices.__getitem__)


# -- strategies -----------------------------------------------------------------------------

# Every code point, lone surrogates and NUL included.
ANY_CHAR = st.characters(exclude_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=12)
# Ids that differ only by trailing spaces, case or a look-alike: each must stay apart.
VARIANTS = ["a", "a ", "a  ", " a", "A", "a\t", "ä", "a\u0308", "ss", "SS", "ß", "İ", "i"]
BAD_IDS: list[Any] = [
    "",
    None,
    7,
    b"a",
    "a\x00",
    "\ud800",
    "a\udfff",
    "x" * 255,
    "x" * 256,
    "y" * 5000,
]
IDS = st.one_of(
    st.sampled_from(VARIANTS),
    st.sampled_from(VARIANTS),
    st.sampled_from(BAD_IDS),
    st.text(ANY_CHAR, min_size=1, max_size=8),
)
COUNTS = st.one_of(
    st.integers(-2, 6),
    st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]),
    st.sampled_from([True, 1.5, "3", None]),
)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308]),
)
INTS = st.one_of(
    st.integers(-(2**80), 2**80),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30]),
)
LEAVES = st.one_of(st.none(), st.booleans(), INTS, FLOATS, FLOATS, ANY_TEXT)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = {"k": value} if depth % 2 else [value]
    return value


JSON = st.one_of(
    st.recursive(
        LEAVES,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
        max_leaves=6,
    ),
    st.sampled_from([198, 199, 200, 201, 202]).map(nested),
)
OBJECTS = st.one_of(
    st.dictionaries(ANY_TEXT, JSON, max_size=3),
    st.sampled_from([{1: 2}, {"k": object()}, {"k": {1, 2}}, [1], "x", 3]),
    st.sampled_from([200, 201, 10_000]).map(lambda depth: {"k": nested(depth - 1)}),
)


def _entry(kind: str, text: str, call_id: Any, value: Any) -> Any:
    """An entry built from generated values; pydantic refuses some at construction
    (the caller's mistake, before any store sees it): then a plain one."""
    try:
        if kind == "input":
            return InputEntry(role="user", content=text)
        if kind == "assistant":
            return AssistantTextEntry(
                content=text, id=call_id if isinstance(call_id, str) else None
            )
        if kind == "reasoning":
            return ReasoningEntry(content=text, metadata=value if isinstance(value, dict) else {})
        if kind == "call":
            return ToolCallEntry(call_id=call_id, name=text or "f", arguments=text)
        return ToolResultEntry(call_id=call_id, output=text, raw=value)
    except ValueError:
        return InputEntry(role="user", content="plain")


CALL_IDS = st.one_of(st.sampled_from(VARIANTS), IDS)
ENTRY = weighted(
    {
        "input": st.builds(_entry, st.just("input"), ANY_TEXT, st.none(), st.none()),
        "assistant": st.builds(_entry, st.just("assistant"), ANY_TEXT, CALL_IDS, st.none()),
        "reasoning": st.builds(_entry, st.just("reasoning"), ANY_TEXT, st.none(), OBJECTS),
        "call": st.builds(_entry, st.just("call"), ANY_TEXT, CALL_IDS, st.none()),
        "result": st.builds(_entry, st.just("result"), ANY_TEXT, CALL_IDS, JSON),
    },
    reasoning=2,
    result=3,
)
ENTRIES = st.one_of(
    st.lists(ENTRY, min_size=1, max_size=3),
    st.lists(ENTRY, max_size=3),
    st.sampled_from([None, "abc", 5, [{"type": "input", "role": "user", "content": "x"}]]),
)


def _head(agent: Any, turns: Any, output: Any, state: Any, started: Any, status: str) -> Any:
    try:
        return RunHead(
            agent_name=agent,
            turns=turns,
            output=output,
            context_state=state if isinstance(state, dict) else {},
            started_at=started,
            status=status,  # type: ignore[arg-type]
        )
    except ValueError:
        return RunHead(agent_name="a")


HEADS = weighted(
    {
        "head": st.builds(
            _head,
            st.one_of(ANY_TEXT, st.sampled_from(VARIANTS)),
            INTS,
            JSON,
            OBJECTS,
            st.one_of(st.none(), FLOATS),
            st.sampled_from(["running", "completed", "failed", "interrupted"]),
        ),
        "other": st.sampled_from([None, {"agent_name": "a"}, "head"]),
    },
    head=4,
)


# -- shared checks --------------------------------------------------------------------------


async def outcome(call: Callable[[], Awaitable[Any]]) -> tuple[str, Any]:
    """("ok", value) or ("refused", error class); anything but our errors fails the test."""
    try:
        return "ok", await call()
    except LoviaStoreError as exc:
        return "refused", type(exc).__name__
    except BaseException as exc:
        pytest.fail(f"{type(exc).__name__} escaped: {exc!r}")


def readable(value: Any) -> bool:
    """An id a store can be asked about (the others are refused by every call)."""
    try:
        return (
            isinstance(value, str)
            and 0 < len(value) <= 255
            and "\x00" not in value
            and bool(value.encode())
        )
    except UnicodeEncodeError:
        return False


# -- sessions -------------------------------------------------------------------------------

APPEND = st.tuples(st.just("append"), IDS, ENTRIES, IDS, st.one_of(st.none(), OBJECTS))
SESSION_STEPS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "append": APPEND,
    "load": st.tuples(st.just("load"), IDS),
    "segments": st.tuples(st.just("segments"), IDS),
    "clear": st.tuples(st.just("clear"), IDS),
    "trim": st.tuples(st.just("trim"), IDS, COUNTS, COUNTS),
    "rewind": st.tuples(st.just("rewind"), IDS, COUNTS),
}
SESSION_OPS = st.lists(weighted(SESSION_STEPS, append=4, trim=2, rewind=2), min_size=1, max_size=4)


def session_call(store: Any, op: tuple[Any, ...]) -> Callable[[], Awaitable[Any]]:
    name, sid, *args = op
    if name == "append":
        entries, run_id, meta = args
        return lambda: store.append(sid, entries, run_id=run_id, meta=meta)
    if name == "trim":
        return lambda: store.trim_tool_results(sid, keep_chars=args[0], keep_runs=args[1])
    if name == "rewind":
        return lambda: store.rewind(sid, keep_entries=args[0])
    return lambda: getattr(store, name)(sid)


async def play_sessions(
    ours: Any, reference: InMemorySession, ops: list[tuple[Any, ...]], canary: list[int]
) -> None:
    for op in ops:
        sid = op[1]
        before = await ours.segments(sid) if readable(sid) else None
        got = await outcome(session_call(ours, op))
        expected = await outcome(session_call(reference, op))
        assert got == expected, op
        if readable(sid):
            after = await ours.segments(sid)
            assert after == await reference.segments(sid), op
            assert await ours.load(sid) == await reference.load(sid), op
            if got[0] == "refused":
                assert after == before, op
        # The canary: an ordinary call right after, on the same store.
        canary[0] += 1
        run = f"canary-{canary[0]}"
        assert await ours.append("canary", [InputEntry(role="user", content=run)], run_id=run)
        assert (await ours.load("canary"))[-1] == InputEntry(role="user", content=run)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_sessions(kind: str) -> None:
    with database(kind) as (runner, db):
        ours: Any = InMemorySession() if db is None else SQLSession(db)
        reference = InMemorySession()
        canary = [0]

        @EXAMPLES
        @given(SESSION_OPS)
        def check(ops: list[tuple[Any, ...]]) -> None:
            runner.run(play_sessions(ours, reference, ops, canary))

        check()


# -- checkpoints ----------------------------------------------------------------------------

STATUSES = st.sampled_from([None, "running", "completed", "bogus", 3])
CHECKPOINT_APPEND = st.tuples(st.just("append"), IDS, ENTRIES, HEADS)
CHECKPOINT_STEPS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "append": CHECKPOINT_APPEND,
    "load": st.tuples(st.just("load"), IDS),
    "delete": st.tuples(st.just("delete"), IDS),
    "list_runs": st.tuples(
        st.just("list_runs"), STATUSES, st.one_of(st.just(10_000), COUNTS), COUNTS
    ),
}
CHECKPOINT_OPS = st.lists(weighted(CHECKPOINT_STEPS, append=4), min_size=1, max_size=4)


def runs_of(summaries: list[Any]) -> list[tuple[Any, ...]]:
    """list_runs' answer without its clock: what both stores must agree on."""
    rows = [
        (s.run_id, s.status, s.agent_name, s.turns, s.entry_count, s.started_at) for s in summaries
    ]
    return sorted(rows, key=repr)


def checkpoint_call(store: Any, op: tuple[Any, ...]) -> Callable[[], Awaitable[Any]]:
    name, *args = op
    if name == "list_runs":
        status, limit, offset = args
        return lambda: store.list_runs(status=status, limit=limit, offset=offset)
    if name == "append":
        return lambda: store.append(*args)
    return lambda: getattr(store, name)(args[0])


async def play_checkpoints(
    ours: Any, reference: InMemoryCheckpointer, ops: list[tuple[Any, ...]], canary: list[int]
) -> None:
    for op in ops:
        run_id = op[1]
        if op[0] == "list_runs":
            got = await outcome(checkpoint_call(ours, op))
            expected = await outcome(checkpoint_call(reference, op))
            assert got[0] == expected[0] and (got[0] == "ok" or got == expected), op
            if got[0] == "ok":
                _, _, limit, offset = op
                if offset == 0 and limit == 10_000:  # the whole list: equal as sets
                    assert runs_of(got[1]) == runs_of(expected[1]), op
                else:  # the same page size; the order follows each store's clock
                    assert len(got[1]) == len(expected[1]), op
            continue
        before = await ours.load(run_id) if readable(run_id) else None
        got = await outcome(checkpoint_call(ours, op))
        expected = await outcome(checkpoint_call(reference, op))
        assert got == expected, op
        if readable(run_id):
            after = await ours.load(run_id)
            assert after == await reference.load(run_id), op
            if got[0] == "refused":
                assert after == before, op
        canary[0] += 1
        await ours.append("canary", [], RunHead(agent_name="a", turns=canary[0]))
        snapshot = await ours.load("canary")
        assert snapshot is not None and snapshot.turns == canary[0]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_checkpoints(kind: str) -> None:
    with database(kind) as (runner, db):
        ours: Any = InMemoryCheckpointer() if db is None else SQLCheckpointer(db)
        reference = InMemoryCheckpointer()
        canary = [0]

        @EXAMPLES
        @given(CHECKPOINT_OPS)
        def check(ops: list[tuple[Any, ...]]) -> None:
            runner.run(play_checkpoints(ours, reference, ops, canary))

        check()


# -- the Raw Log ----------------------------------------------------------------------------

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _timing(duration: Any) -> Any:
    try:
        return MessageTiming(started_at=NOW, completed_at=NOW, duration_ns=duration)
    except ValueError:
        return "not a timing"


DISPLAY = st.one_of(
    st.none(),
    ANY_TEXT,
    st.sampled_from(["t", " t ", "a\x00b", "\ud800", "x" * 200, "x" * 201, "", 5]),
)
MESSAGES = st.one_of(ENTRY, ENTRY, st.sampled_from([None, "hi", {"type": "input"}]))
TIMINGS = st.one_of(
    st.none(), st.builds(_timing, st.one_of(st.sampled_from([0, 2**63 - 1, 2**63, 2**70]), INTS))
)
STORAGE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), IDS, DISPLAY, DISPLAY, COUNTS),
        st.tuples(
            st.just("append"),
            IDS,
            IDS,
            MESSAGES,
            st.one_of(st.none(), OBJECTS),
            st.one_of(st.none(), OBJECTS),
            TIMINGS,
            DISPLAY,
        ),
        st.tuples(st.just("list"), IDS, COUNTS, COUNTS),
        st.tuples(st.just("snapshot"), IDS, ANY_TEXT, COUNTS, COUNTS),
    ),
    min_size=1,
    max_size=4,
)


def storage_call(store: SQLSessionStorage, op: tuple[Any, ...]) -> Callable[[], Awaitable[Any]]:
    name, sid, *args = op
    if name == "create":
        title, agent, session_type = args
        return lambda: store.create_session(
            session_id=sid, title=title, agent_name=agent, session_type=session_type
        )
    if name == "append":
        request, message, metadata, tags, timing, title = args
        return lambda: store.append(
            sid, request, message, timing=timing, title=title, metadata=metadata, tags=tags
        )
    if name == "list":
        return lambda: store.list_raw_messages(sid, limit=args[0], offset=args[1])
    summary, through, expected = args
    return lambda: store.snapshot(sid, CompactedMessage(content=summary), through, expected)


def projected(value: Any) -> Any:
    """A Raw Log answer without what each store makes up (ids, clocks)."""
    if isinstance(value, list):
        return [projected(item) for item in value]
    if hasattr(value, "model_dump"):
        fields = value.model_dump(exclude={"id", "created_at", "updated_at"})
        return {k: v for k, v in fields.items() if not k.endswith("_at")}
    return value


async def raw_state(store: SQLSessionStorage, sid: Any) -> Any:
    return projected(await store.get_session(sid)), projected(await store.list_raw_messages(sid))


async def play_storage(
    ours: SQLSessionStorage, reference: SQLSessionStorage, ops: list[tuple[Any, ...]]
) -> None:
    for op in ops:
        sid = op[1]
        before = await raw_state(ours, sid) if readable(sid) else None
        got = await outcome(storage_call(ours, op))
        expected = await outcome(storage_call(reference, op))
        assert (got[0], projected(got[1])) == (expected[0], projected(expected[1])), op
        if readable(sid):
            after = await raw_state(ours, sid)
            assert after == await raw_state(reference, sid), op
            if got[0] == "refused":
                assert after == before, op
            elif op[0] == "append":  # read back exactly as given
                _, _, request, message, metadata, tags, _, _ = op
                [record] = await ours.list_raw_messages(sid, after_sequence=got[1] - 1, limit=1)
                assert (record.request_id, record.message) == (request, message), op
                assert (record.metadata, record.tags) == (metadata or {}, tags or {}), op
        # The canary: an ordinary append and read right after, on the same store.
        sequence = await ours.append("canary", "r", InputEntry(role="user", content="ok"))
        page = await ours.list_raw_messages("canary", after_sequence=sequence - 1)
        assert [record.sequence for record in page] == [sequence]


@pytest.mark.parametrize("kind", SQL_KINDS)
def test_raw_log(kind: str) -> None:
    with database(kind) as (runner, db), tempfile.TemporaryDirectory(dir=FILES) as folder:
        assert db is not None
        ours = SQLSessionStorage(db)
        reference = SQLiteSessionStorage(Path(folder) / "reference.sqlite3")

        @EXAMPLES
        @given(STORAGE_OPS)
        def check(ops: list[tuple[Any, ...]]) -> None:
            runner.run(play_storage(ours, reference, ops))

        try:
            check()
        finally:
            runner.run(reference.close())


def test_the_suite_would_see_a_raw_exception() -> None:
    """``outcome`` fails on anything but our errors (a guard on the guard)."""

    async def raw() -> None:
        raise TypeError("raw")

    async def ours() -> None:
        raise UserError("ours")

    assert asyncio.run(outcome(ours)) == ("refused", "UserError")
    with pytest.raises(pytest.fail.Exception, match="TypeError escaped"):
        asyncio.run(outcome(raw))
