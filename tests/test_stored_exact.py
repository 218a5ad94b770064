"""Every store that writes documents reads back exactly what it was given, whatever the
codec's options, property-based (issue 33).

Tool outputs, inputs, metas, heads, outcomes, Raw Log metadata, tags and summaries are
drawn from long strings at and around the compression thresholds (64 and the default
2,048) with every JSON escape (quotes, backslashes, control characters, U+2028,
non-BMP), repeated in one document and across documents, in nested lists and as
object keys, beside integers no double holds. Sessions (appends, trims, rewinds,
forks), checkpoints (steps, tool effects' outcomes) and the Raw Log (messages,
snapshots) on a Database that compresses at the default threshold, at the lowest, or
also encrypts, each beside the in-memory store fed the same calls (the Raw Log beside
what it was given). After each example every reference to a shared value is counted
and every stored session's counters agree. On SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends import migrated_server_database
from helpers import examples
from lovia_store import (
    AssistantTextEntry,
    CompactedMessage,
    Database,
    InMemoryCheckpointer,
    InMemorySession,
    InputEntry,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    ToolCallEntry,
    ToolResultEntry,
)
from lovia_store.db.encryption import generate_encryption_key
from lovia_store.lifecycle import counter_mismatches
from stored_support import assert_counts_true

KEY = generate_encryption_key()
FORMS: dict[str, dict[str, Any]] = {
    "default": {},
    "lowest": {"compression_threshold": 64},
    "encrypted": {"compression_threshold": 64, "encryption_keys": [KEY]},
    "encrypted-default": {"encryption_keys": [KEY]},
}
"""How the Database under test stores documents, by name."""
KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mysql),
]
EXAMPLES = settings(
    max_examples=examples(40),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
AROUND = (62, 63, 64, 65, 66, 2045, 2046, 2047, 2048, 2049, 2050)
TRICKY = '"\\\n\t\x00\x01\x1f\x7f/\u00e9\u2028\ufeff\U0001f600ab '


@st.composite
def long_strings(draw: st.DrawFn) -> str:
    size = draw(st.sampled_from(AROUND))
    piece = draw(st.text(st.sampled_from(TRICKY), min_size=1, max_size=size))
    return (piece * (size // len(piece) + 1))[:size]


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    """A few long strings, and the JSON values built of them, for one example."""
    pool = draw(st.lists(long_strings(), min_size=1, max_size=3))
    strings = st.sampled_from(pool) | st.text(st.sampled_from(TRICKY), max_size=5)
    leaves = strings | st.none() | st.sampled_from([2**64, -(2**63) - 1, 10**400, 0.1, -2.5e300])
    keys = st.sampled_from(pool) | st.sampled_from(["k", "é", "k\u2028"])
    values = st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
        max_leaves=8,
    )
    tags = st.dictionaries(keys.filter(str.strip), values)  # a tag's key holds a character
    return {"strings": strings, "values": values, "objects": tags}


def run_of(draw: st.DrawFn, world: dict[str, Any], n: int) -> list[Any]:
    text, value = world["strings"], world["values"]
    return [
        InputEntry(role="user", content=draw(text)),
        ToolCallEntry(call_id=f"c{n}", name="read", arguments='{"path": "a"}'),
        ToolResultEntry(call_id=f"c{n}", name="read", output=draw(text), raw=draw(value)),
        AssistantTextEntry(content=draw(text)),
    ]


@st.composite
def session_calls(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    world = draw(worlds())
    calls: list[tuple[Any, ...]] = []
    sessions = ["s"]
    for n in range(draw(st.integers(1, 4))):
        sid = draw(st.sampled_from(sessions))
        calls.append(("append", sid, run_of(draw, world, n), f"r{n}", draw(world["objects"])))
        step = draw(st.sampled_from(["trim", "rewind", "fork", "none"]))
        if step == "trim":
            keep = draw(st.sampled_from([0, 10, 63, 64, 65, 2047, 2048, 5000]))
            calls.append(("trim", sid, keep, draw(st.sampled_from([0, 1]))))
        elif step == "rewind":
            calls.append(("rewind", sid, draw(st.integers(0, 4))))
        elif step == "fork":
            calls.append(("fork", sid, f"f{n}", draw(st.integers(0, 4))))
            sessions.append(f"f{n}")
    return calls


async def play_sessions(ours: SQLSession, calls: list[tuple[Any, ...]]) -> None:
    reference = InMemorySession()
    seen = set()
    for name, sid, *args in calls:
        seen.add(sid)
        outcomes = []
        for store in (ours, reference):
            try:
                if name == "append":
                    entries, run_id, meta = args
                    outcomes.append(await store.append(sid, entries, run_id=run_id, meta=meta))
                elif name == "trim":
                    outcomes.append(
                        await store.trim_tool_results(sid, keep_chars=args[0], keep_runs=args[1])
                    )
                elif name == "rewind":
                    outcomes.append(await store.rewind(sid, keep_entries=args[0]))
                else:
                    seen.add(args[0])
                    outcomes.append(await store.fork(sid, args[0], keep_entries=args[1]))
            except Exception as error:  # a rewind or fork past the end: both refuse
                outcomes.append(type(error))
        assert outcomes[0] == outcomes[1], name
        for each in sorted(seen):
            assert await ours.load(each) == await reference.load(each), (name, each)
            assert await ours.segments(each) == await reference.segments(each), (name, each)


@st.composite
def checkpoint_calls(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    world = draw(worlds())
    text, value = world["strings"], world["values"]
    calls: list[tuple[Any, ...]] = []
    for n in range(draw(st.integers(1, 3))):
        head = RunHead(
            agent_name="agent",
            status=draw(st.sampled_from(["running", "completed"])),
            output=draw(value),
            context_state=draw(world["objects"]),
            updated_at=float(n),
        )
        run = draw(st.sampled_from(["run-a", "run-b"]))
        calls.append(("append", run, run_of(draw, world, n)[2:], head))
        outcome = ToolResultEntry(call_id=f"x{n}", output=draw(text), raw=draw(value))
        calls.append(("effect", run, f"x{n}", outcome))
    return calls


async def play_checkpoints(ours: SQLCheckpointer, calls: list[tuple[Any, ...]]) -> None:
    reference = InMemoryCheckpointer()
    outcomes: dict[str, dict[str, ToolResultEntry]] = {}
    for name, run, *args in calls:
        if name == "append":
            for store in (ours, reference):
                await store.append(run, args[0], args[1])
            assert await ours.load(run) == await reference.load(run)
        else:
            call, outcome = args
            await ours.run_effect(run, call, "tool", lambda _conn: None, lambda _v, o=outcome: o)
            outcomes.setdefault(run, {})[call] = outcome
            effects = await ours.tool_effects(run)
            assert {c: e.outcome for c, e in effects.items()} == outcomes[run]
    listed = [(r.run_id, r.status, r.entry_count) for r in await ours.list_runs()]
    assert listed == [(r.run_id, r.status, r.entry_count) for r in await reference.list_runs()]


@st.composite
def raw_log_calls(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    world = draw(worlds())
    text = world["strings"]
    calls: list[tuple[Any, ...]] = [
        (
            "append",
            f"q{n}",
            run_of(draw, world, n)[2],
            draw(world["objects"]),
            draw(world["objects"]),
        )
        for n in range(draw(st.integers(1, 3)))
    ]
    calls.append(("snapshot", CompactedMessage(content=draw(text))))
    return calls


async def play_raw_log(ours: SQLSessionStorage, calls: list[tuple[Any, ...]]) -> None:
    given = []
    for name, *args in calls:
        if name == "append":
            request, message, metadata, tags = args
            await ours.append("z", request, message, metadata=metadata, tags=tags)
            given.append((message, metadata, tags))
        else:
            await ours.snapshot("z", args[0], 1, expected_version=0)
            view = await ours.load("z")
            assert view.snapshot is not None and view.snapshot.compacted_message == args[0]
    records = await ours.list_raw_messages("z")
    assert [(r.message, r.metadata, r.tags) for r in records] == given


@contextlib.contextmanager
def databases(kind: str) -> Iterator[tuple[asyncio.Runner, dict[str, Database]]]:
    """One database of ``kind``, and a Database on it in each of ``FORMS``."""
    with asyncio.Runner() as runner, contextlib.ExitStack() as cleanup:
        if kind == "sqlite":
            folder = cleanup.enter_context(tempfile.TemporaryDirectory())
            url = f"sqlite+aiosqlite:///{Path(folder) / 'store.sqlite3'}"
        else:
            server = migrated_server_database(kind)
            url = runner.run(server.__aenter__())
            cleanup.callback(lambda: runner.run(server.__aexit__(None, None, None)))
        opened = {name: Database(url, **options) for name, options in FORMS.items()}
        for db in opened.values():
            cleanup.callback(lambda db=db: runner.run(db.close()))
        yield runner, opened


PLAYS = {
    "sessions": (session_calls(), lambda db, tenant: SQLSession(db, tenant=tenant), play_sessions),
    "checkpoints": (
        checkpoint_calls(),
        lambda db, tenant: SQLCheckpointer(db, tenant=tenant),
        play_checkpoints,
    ),
    "raw_log": (
        raw_log_calls(),
        lambda db, tenant: SQLSessionStorage(db, tenant=tenant),
        play_raw_log,
    ),
}


@pytest.mark.parametrize("family", sorted(PLAYS))
@pytest.mark.parametrize("kind", KINDS)
def test_every_store_reads_back_exactly_whatever_the_codec(kind: str, family: str) -> None:
    calls, store_of, play = PLAYS[family]
    tenants = (f"t{n}" for n in itertools.count())  # each example starts empty
    with databases(kind) as (runner, opened):

        @EXAMPLES
        @given(form=st.sampled_from(sorted(FORMS)), drawn=calls)
        def check(form: str, drawn: list[tuple[Any, ...]]) -> None:
            db = opened[form]
            runner.run(play(store_of(db, next(tenants)), drawn))
            runner.run(assert_counts_true(db))
            assert runner.run(counter_mismatches(db, all_tenants=True)) == []

        check()
