"""Hostile input on every backend, property-based (issue 18's permanent suite).

Generated calls of the session API (forks included), the checkpoint API (tool
effects and run leases included) and the Raw Log API, with ids of any
code point (lone surrogates, NUL, trailing spaces, case variants, 256 and
more characters, wrong types), JSON values (integers past 64 bits, NaN and
infinities, nesting around the 200-level limit, non-string keys), counts at
and past every bound, and arguments of the wrong type, run on each backend
(memory, SQLite in both journals, PostgreSQL through asyncpg and psycopg,
MariaDB) beside a reference store fed the same calls: the in-memory stores for
sessions and checkpoints (with the outcomes a SQL store's ``run_effect`` records
beside it: the in-memory one refuses that call), a SQLite file for the Raw Log
(which has no in-memory store). Asserted, for every call:

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
import functools
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

from backends import ALL_KINDS, SQL_KINDS, SQLITE_KINDS, migrated_server_database
from helpers import examples
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
    RunLease,
    SQLCheckpointer,
    SQLiteSessionStorage,
    SQLSession,
    SQLSessionStorage,
    ToolCallEntry,
    ToolResultEntry,
    UserError,
)

EXAMPLES = settings(
    max_examples=examples(40),
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
            server = migrated_server_database("mariadb" if kind == "mariadb" else "postgres")
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

# Every code point, lone surrogates (drawn often: they are 2,048 of 1.1 million) and
# NUL included. Joined from lists: ``st.text`` drops surrogates its alphabet draws.
ANY_CHAR = st.one_of(
    st.characters(exclude_categories=()), st.sampled_from("\ud800\udbff\udc00\udfff")
)
ANY_TEXT = st.lists(ANY_CHAR, max_size=12).map("".join)
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
    st.lists(ANY_CHAR, min_size=1, max_size=8).map("".join),
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


# -- tool effects ---------------------------------------------------------------------------


def _result(call_id: Any, output: str, raw: Any) -> ToolResultEntry:
    """The outcome ``run_effect`` records; a plain one when pydantic refuses the values."""
    try:
        return ToolResultEntry(call_id=call_id, output=output, raw=raw)
    except ValueError:
        return ToolResultEntry(call_id="c", output="plain")


EFFECT_STEPS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "record_intent": st.tuples(st.just("record_intent"), IDS, CALL_IDS, IDS),
    "tool_effects": st.tuples(st.just("tool_effects"), IDS),
    "run_effect": st.tuples(
        st.just("run_effect"), IDS, CALL_IDS, IDS, st.builds(_result, CALL_IDS, ANY_TEXT, JSON)
    ),
    "delete": st.tuples(st.just("delete"), IDS),
}
EFFECT_OPS = st.lists(weighted(EFFECT_STEPS, record_intent=3, run_effect=3), min_size=1, max_size=4)


def effects_of(effects: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """tool_effects' answer without its clock."""
    return {call_id: (e.tool_name, e.outcome) for call_id, e in effects.items()}


class EffectReference:
    """The in-memory checkpointer, plus the outcomes ``run_effect`` records: the memory
    store refuses ``run_effect`` (no database to share a transaction with), a SQL store
    runs the work and records its outcome (the first intent's tool name kept)."""

    def __init__(self, transactional: bool) -> None:
        self.store = InMemoryCheckpointer()
        self.transactional = transactional
        self.outcomes: dict[tuple[str, str], ToolResultEntry] = {}

    async def call(self, op: tuple[Any, ...]) -> Any:
        name, run_id, *args = op
        if name == "run_effect":
            call_id, tool_name, result = args
            if not self.transactional:
                return await self.store.run_effect(
                    run_id, call_id, tool_name, lambda _: None, lambda _: result
                )
            # An outcome is recorded as an entry: refused as appending it would be.
            await InMemoryCheckpointer().append("x", [result], RunHead(agent_name="a"))
            await self.store.record_intent(run_id, call_id, tool_name)
            self.outcomes[run_id, call_id] = result
            return result.output
        if name == "delete":
            await self.store.delete(run_id)
            self.outcomes = {k: v for k, v in self.outcomes.items() if k[0] != run_id}
            return None
        if name == "tool_effects":
            return effects_of(await self.effects(run_id))
        return await getattr(self.store, name)(run_id, *args)

    async def effects(self, run_id: str) -> dict[str, Any]:
        effects = await self.store.tool_effects(run_id)
        for call_id, effect in effects.items():
            outcome = self.outcomes.get((run_id, call_id))
            if outcome is not None:
                effects[call_id] = effect.model_copy(update={"outcome": outcome})
        return effects


def effect_call(store: Any, op: tuple[Any, ...]) -> Callable[[], Awaitable[Any]]:
    name, run_id, *args = op
    if name == "run_effect":
        call_id, tool_name, result = args
        return lambda: store.run_effect(
            run_id, call_id, tool_name, lambda _conn: result.output, lambda _value: result
        )
    if name == "tool_effects":

        async def listed() -> Any:
            return effects_of(await store.tool_effects(run_id))

        return listed
    return lambda: getattr(store, name)(run_id, *args)


async def play_effects(
    ours: Any, reference: EffectReference, ops: list[tuple[Any, ...]], canary: list[int]
) -> None:
    for op in ops:
        run_id = op[1]
        before = effects_of(await ours.tool_effects(run_id)) if readable(run_id) else None
        got = await outcome(effect_call(ours, op))
        expected = await outcome(functools.partial(reference.call, op))
        assert got == expected, op
        if readable(run_id):
            after = effects_of(await ours.tool_effects(run_id))
            assert after == effects_of(await reference.effects(run_id)), op
            if got[0] == "refused":
                assert after == before, op
        canary[0] += 1
        call = f"canary-{canary[0]}"
        await ours.record_intent("canary", call, "tool")
        assert (await ours.tool_effects("canary"))[call].tool_name == "tool"


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_tool_effects(kind: str) -> None:
    with database(kind) as (runner, db):
        ours: Any = InMemoryCheckpointer() if db is None else SQLCheckpointer(db)
        reference = EffectReference(transactional=db is not None)
        canary = [0]

        @EXAMPLES
        @given(EFFECT_OPS)
        def check(ops: list[tuple[Any, ...]]) -> None:
            runner.run(play_effects(ours, reference, ops, canary))

        check()


# -- run leases -----------------------------------------------------------------------------

# Long enough never to expire during a test (expiry is each store's own clock), or refused.
TTLS = st.one_of(
    st.sampled_from([3600, 86_400.5, 365 * 24 * 3600.0]),
    st.sampled_from([3600, 86_400.5, 365 * 24 * 3600.0]),
    st.sampled_from([0, -1, 365 * 24 * 3600.0 + 1, math.nan, math.inf, True, "30", None]),
    FLOATS,
)


def _forged(run_id: Any, token: Any, lease_id: Any, ttl: Any) -> Any:
    """A lease no store handed out (or not a lease at all, when pydantic refuses)."""
    try:
        return RunLease(
            run_id=run_id, token=token, lease_id=lease_id, holder="h", ttl=ttl, expires_at=NOW
        )
    except ValueError:
        return {"run_id": run_id}


# A lease is named by its index among those taken so far (each store's own, paired), or
# forged; "write" is a checkpoint append fenced by it.
LEASE_USED = st.one_of(
    st.integers(0, 7),
    st.integers(0, 7),
    st.builds(
        _forged,
        IDS,
        st.one_of(st.integers(1, 3), INTS),
        st.one_of(st.just("0" * 32), ANY_TEXT),
        TTLS,
    ),
    st.sampled_from([None, "lease"]),
)
LEASE_STEPS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "acquire": st.tuples(st.just("acquire"), IDS, TTLS),
    "renew": st.tuples(st.just("renew"), LEASE_USED),
    "release": st.tuples(st.just("release"), LEASE_USED),
    "write": st.tuples(st.just("write"), LEASE_USED, st.one_of(st.none(), st.none(), IDS)),
}
LEASE_OPS = st.lists(weighted(LEASE_STEPS, acquire=3, release=2), min_size=1, max_size=4)


def lease_view(value: Any) -> Any:
    """A lease without what each store makes up (its id, its expiry)."""
    if isinstance(value, RunLease):
        return (value.run_id, value.token, value.holder, value.ttl)
    return value


def lease_call(
    store: Any, taken: list[Any], op: tuple[Any, ...]
) -> tuple[Any, Callable[[], Awaitable[Any]]]:
    """The run the call names (or None) and the call, with this store's own leases."""
    name, *args = op
    if name == "acquire":
        run_id, ttl = args
        return run_id, lambda: store.acquire_lease(run_id, ttl=ttl)
    used = args[0]
    lease = taken[used % len(taken)] if isinstance(used, int) and taken else used
    named = lease.run_id if isinstance(lease, RunLease) else None
    if name == "renew":
        return named, lambda: store.renew_lease(lease)
    if name == "release":
        return named, lambda: store.release_lease(lease)
    run_id = named if args[1] is None else args[1]  # mostly the lease's own run
    head = RunHead(agent_name="a", turns=len(taken), updated_at=0.0)
    return run_id, lambda: store.append(run_id, [], head, lease=lease)


async def play_leases(
    ours: Any,
    reference: InMemoryCheckpointer,
    taken: tuple[list[Any], list[Any]],
    ops: list[tuple[Any, ...]],
) -> None:
    for op in ops:
        run_id, ours_call = lease_call(ours, taken[0], op)
        _, reference_call = lease_call(reference, taken[1], op)
        before = await ours.load(run_id) if readable(run_id) else None
        got = await outcome(ours_call)
        expected = await outcome(reference_call)
        assert (got[0], lease_view(got[1])) == (expected[0], lease_view(expected[1])), op
        if got[0] == "ok" and op[0] == "acquire":
            taken[0].append(got[1])
            taken[1].append(expected[1])
        if readable(run_id):
            after = await ours.load(run_id)
            assert after == await reference.load(run_id), op
            if got[0] == "refused":
                assert after == before, op
        # The canary: a lease taken and given back on the same store.
        lease = await ours.acquire_lease("canary", ttl=3600)
        await ours.release_lease(lease)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_leases(kind: str) -> None:
    with database(kind) as (runner, db):
        ours: Any = InMemoryCheckpointer() if db is None else SQLCheckpointer(db)
        reference = InMemoryCheckpointer()
        taken: tuple[list[Any], list[Any]] = ([], [])

        @EXAMPLES
        @given(LEASE_OPS)
        def check(ops: list[tuple[Any, ...]]) -> None:
            runner.run(play_leases(ours, reference, taken, ops))

        check()


# -- session forks --------------------------------------------------------------------------

# Appends that are accepted, so that forks have entries to take.
PLAIN = st.builds(InputEntry, role=st.just("user"), content=st.text(max_size=3))
FORK_STEPS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    **SESSION_STEPS,
    "seed": st.tuples(
        st.just("append"),
        st.sampled_from(VARIANTS),
        st.lists(PLAIN, min_size=1, max_size=3),
        st.sampled_from(VARIANTS),
        st.none(),
    ),
    "fork": st.tuples(st.just("fork"), IDS, IDS, COUNTS),
    # A fork that can be accepted: a known origin, a new id, a count within it.
    "branch": st.tuples(
        st.just("fork"),
        st.sampled_from(VARIANTS),
        st.from_regex(r"f-[a-z0-9]{5}", fullmatch=True),
        st.integers(0, 4),
    ),
    "fork_origin": st.tuples(st.just("fork_origin"), IDS),
}
FORK_OPS = st.lists(
    weighted(FORK_STEPS, seed=4, fork=2, branch=4, fork_origin=2), min_size=1, max_size=4
)


def fork_call(store: Any, op: tuple[Any, ...]) -> Callable[[], Awaitable[Any]]:
    if op[0] == "fork":
        _, sid, new_sid, keep = op
        return lambda: store.fork(sid, new_sid, keep_entries=keep)
    return session_call(store, op)


async def session_state(store: Any, sids: list[str]) -> list[Any]:
    return [(await store.segments(sid), await store.fork_origin(sid)) for sid in sids]


async def play_forks(
    ours: Any, reference: InMemorySession, ops: list[tuple[Any, ...]], canary: list[int]
) -> None:
    for op in ops:
        named = [op[1], op[2]] if op[0] == "fork" else [op[1]]
        sids = [sid for sid in named if readable(sid)]
        before = await session_state(ours, sids)
        got = await outcome(fork_call(ours, op))
        expected = await outcome(fork_call(reference, op))
        assert got == expected, op
        after = await session_state(ours, sids)
        assert after == await session_state(reference, sids), op
        for sid in sids:
            assert await ours.load(sid) == await reference.load(sid), op
        if got[0] == "refused":
            assert after == before, op
        canary[0] += 1
        run = f"canary-{canary[0]}"
        assert await ours.append("canary", [InputEntry(role="user", content=run)], run_id=run)
        assert await ours.fork_origin("canary") is None


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_session_forks(kind: str) -> None:
    with database(kind) as (runner, db):
        ours: Any = InMemorySession() if db is None else SQLSession(db)
        reference = InMemorySession()
        canary = [0]
        for store in (ours, reference):  # origins to fork: each variant id, two runs
            for sid in VARIANTS:
                for run in ("r1", "r2"):
                    entries = [InputEntry(role="user", content=f"{sid}/{run}/{i}") for i in (1, 2)]
                    runner.run(store.append(sid, entries, run_id=run))

        @EXAMPLES
        @given(FORK_OPS)
        def check(ops: list[tuple[Any, ...]]) -> None:
            runner.run(play_forks(ours, reference, ops, canary))

        check()


# -- regressions the suite found ------------------------------------------------------------


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_a_forged_lease_is_refused_before_any_sql(kind: str) -> None:
    """A lease whose ids, token or ttl no store hands out reached the driver unchecked
    (raw ``UnicodeEncodeError``, ``OverflowError``, ``ValueError`` on the SQL stores,
    ``RunOwnershipLost`` in memory); now ``UserError`` everywhere, the real lease intact."""

    async def play(store: Any) -> None:
        lease = await store.acquire_lease("r", ttl=3600)
        forged = [
            {"run_id": "\ud800"},
            {"run_id": "r\x00"},
            {"run_id": "r" * 256},
            {"lease_id": ""},
            {"lease_id": "\udfff"},
            {"token": 2**64},
            {"token": 0},
            {"ttl": math.nan},
            {"ttl": math.inf},
            {"ttl": 9.2e15},
        ]
        for change in forged:
            bad = lease.model_copy(update=change)
            head = RunHead(agent_name="a")
            for call in (
                functools.partial(store.renew_lease, bad),
                functools.partial(store.release_lease, bad),
                functools.partial(store.append, bad.run_id, [], head, lease=bad),
            ):
                assert await outcome(call) == ("refused", "UserError"), change
        assert (await store.renew_lease(lease)).token == lease.token
        await store.release_lease(lease)

    with database(kind) as (runner, db):
        runner.run(play(InMemoryCheckpointer() if db is None else SQLCheckpointer(db)))


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_tool_effects_refuses_a_bad_run_id_on_every_backend(kind: str) -> None:
    """The in-memory store answered ``{}`` where the SQL stores refuse."""

    async def play(store: Any) -> None:
        for run_id in ["", None, "r\x00", "\ud800", "r" * 256]:
            listed = functools.partial(store.tool_effects, run_id)
            assert await outcome(listed) == ("refused", "UserError")
        assert await store.tool_effects("r") == {}

    with database(kind) as (runner, db):
        runner.run(play(InMemoryCheckpointer() if db is None else SQLCheckpointer(db)))


@pytest.mark.parametrize("kind", SQL_KINDS)
def test_an_effect_outcome_that_would_not_read_back_is_refused(kind: str) -> None:
    """``run_effect`` stored NaN as null and nesting no read could parse; such an
    outcome is now refused as an appended entry is, and nothing is recorded."""

    async def play(store: SQLCheckpointer) -> None:
        bad: list[Any] = [
            ToolResultEntry(call_id="c", output="x", raw=math.nan),
            ToolResultEntry(call_id="c", output="x", raw={"k": -math.inf}),
            ToolResultEntry(call_id="c", output="x", raw=nested(201)),
            ToolResultEntry(call_id="c", output="\ud800"),
            "not an entry",
        ]
        for result in bad:
            made = functools.partial(lambda _v, entry: entry, entry=result)
            refused = await outcome(
                functools.partial(store.run_effect, "r", "c", "t", lambda _conn: 1, made)
            )
            assert refused == ("refused", "UserError"), result
            assert await store.tool_effects("r") == {}
        good = ToolResultEntry(call_id="c", output="x", raw={"n": 2**63 - 1})
        assert await store.run_effect("r", "c", "t", lambda _conn: 1, lambda _v: good) == 1
        assert (await store.tool_effects("r"))["c"].outcome == good

    with database(kind) as (runner, db):
        assert db is not None
        runner.run(play(SQLCheckpointer(db)))
