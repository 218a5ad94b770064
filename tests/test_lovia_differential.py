"""Differential tests: the same operations on lovia's real stores and on ours.

Hypothesis generates sequences of lovia's own operations (appends with and
without run ids, re-appends, trims, rewinds, clears; checkpoint steps with
entries and head-only, loads, deletes) and plays each on lovia 0.9.119's
``SQLiteSession``/``SQLiteCheckpointer`` (a fresh file per example) and on the
integration's stores on every SQL backend (one database per test, fresh ids
per example). Every return value must be equal, and so must the whole
``segments()``/``load()`` (or the stored run) after every step, compared as
canonical JSON so that ``1``, ``1.0`` and ``True`` stay apart.

Where lovia-store refuses what lovia accepts (docs/lovia.md, "Where
lovia-store differs"), the refusal is asserted here, with nothing stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import lovia.stores
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from lovia.checkpointer import RunHead, RunSnapshot
from lovia.messages import Usage
from lovia.session import Segment
from lovia.transcript import (
    AssistantTextEntry,
    InputEntry,
    ReasoningEntry,
    ToolCallEntry,
    ToolResultEntry,
    entry_from_dict,
    entry_to_dict,
)
from sqlalchemy.engine import make_url

import lovia_store
import lovia_strategies as gen
from backends import SQL_KINDS, SQLITE_KINDS, migrated_server_database
from helpers import examples
from lovia_store import Database, UserError
from lovia_store.integrations.lovia import SQLCheckpointer, SQLSession

T = TypeVar("T")
HEX32 = re.compile(r"[0-9a-f]{32}")
LOVIA_ENTRIES = (InputEntry, AssistantTextEntry, ReasoningEntry, ToolCallEntry, ToolResultEntry)
# Derandomized: CI replays the same examples every run.
EXAMPLES = settings(
    max_examples=examples(60),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

pytestmark = pytest.mark.parametrize("kind", SQL_KINDS)
# Both sides' SQLite files live in memory-backed storage where there is some:
# what is compared is behaviour, and a shared machine's fsyncs would take
# most of the time budget.
FILES = "/dev/shm" if Path("/dev/shm").is_dir() else None


@contextlib.contextmanager
def database(kind: str) -> Iterator[tuple[asyncio.Runner, Database]]:
    """One event loop and one database of ``kind`` for the whole test, dropped after."""
    with asyncio.Runner() as runner, contextlib.ExitStack() as cleanup:
        if kind in SQLITE_KINDS:
            folder = cleanup.enter_context(tempfile.TemporaryDirectory(dir=FILES))
            target = str(Path(folder) / "ours.sqlite3")
            db = Database(target, wal=kind == "sqlite_wal")
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


def canonical(value: Any) -> str:
    """Type-exact JSON: ``1``, ``1.0`` and ``True`` differ, key order does not."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)


def entry_dicts(entries: Sequence[object]) -> list[Any]:
    for entry in entries:
        assert isinstance(entry, LOVIA_ENTRIES), f"{type(entry)} is not lovia's"
    return [entry_to_dict(entry) for entry in entries]  # type: ignore[arg-type]


def segments_json(segments: Sequence[object], run_ids: dict[str, str]) -> str:
    """Segments as canonical JSON, our generated run ids replaced by lovia's."""
    out = []
    for segment in segments:
        assert isinstance(segment, Segment), f"{type(segment)} is not lovia's Segment"
        run_id = run_ids.get(segment.run_id, segment.run_id)
        out.append([run_id, entry_dicts(segment.entries), segment.meta])
    return canonical(out)


async def outcome(call: Awaitable[T], *, ours: bool) -> tuple[str, T | None]:
    """The call's value, or that it raised ValueError (ours: a UserError, one of those)."""
    try:
        return "returned", await call
    except ValueError as exc:
        assert not ours or isinstance(exc, UserError), repr(exc)
        return "ValueError", None


async def same_sessions(
    theirs: lovia.stores.SQLiteSession, ours: SQLSession, sids: list[str], ids: dict[str, str]
) -> None:
    for sid in sids:
        expected = segments_json(await theirs.segments(sid), {})
        assert segments_json(await ours.segments(sid), ids) == expected, sid
        flat = canonical(entry_dicts(await ours.load(sid)))
        assert flat == canonical(entry_dicts(await theirs.load(sid))), sid


async def append_both(
    theirs: lovia.stores.SQLiteSession,
    ours: SQLSession,
    sid: str,
    batch: list[Any],
    run_ids: tuple[str | None, str | None],
    meta: dict[str, Any] | None,
    ids: dict[str, str],
) -> tuple[str, str]:
    """Append on both; an omitted run id is a fresh 32-hex id on each side, mapped."""
    theirs_id = await theirs.append(sid, batch, run_id=run_ids[0], meta=meta)
    ours_id = await ours.append(sid, batch, run_id=run_ids[1], meta=meta)
    if run_ids[1] is None:
        assert HEX32.fullmatch(theirs_id) and HEX32.fullmatch(ours_id), (theirs_id, ours_id)
        ids[ours_id] = theirs_id
    else:
        assert (theirs_id, ours_id) == run_ids
    return theirs_id, ours_id


async def play_sessions(ours: SQLSession, ops: list[tuple[Any, ...]]) -> None:
    prefix = uuid.uuid4().hex[:12]
    sids = [f"{prefix}-a", f"{prefix}-🦀 b"]
    ids: dict[str, str] = {}  # our generated run id -> lovia's
    appended: list[tuple[int, str, str]] = []  # (session, lovia's run id, ours)
    with tempfile.TemporaryDirectory(dir=FILES) as folder:
        theirs = lovia.stores.SQLiteSession(Path(folder) / "lovia.sqlite3")
        for op in ops:
            kind, which = op[0], op[1]
            sid = sids[which]
            if kind == "append":
                _, _, batch, choice, meta = op
                chosen: tuple[str | None, str | None] = (choice, choice)
                if isinstance(choice, int):  # re-append an earlier run of this session
                    earlier = [(t, o) for s, t, o in appended if s == which]
                    chosen = earlier[-1 - choice % len(earlier)] if earlier else (None, None)
                before = len(await theirs.segments(sid))
                done = await append_both(theirs, ours, sid, batch, chosen, meta, ids)
                appended.append((which, *done))
                stored = len(await theirs.segments(sid)) > before
                event(f"append: {'stored' if stored else 'a no-op'}, {len(batch)} entries")
            elif kind == "trim":
                _, _, keep_chars, keep_runs = op
                args = {"keep_chars": keep_chars, "keep_runs": keep_runs}
                expected = await outcome(theirs.trim_tool_results(sid, **args), ours=False)
                assert await outcome(ours.trim_tool_results(sid, **args), ours=True) == expected
                event(f"trim: {'refused' if expected[1] is None else min(expected[1], 2)}")
            elif kind == "rewind":
                total = len(await theirs.load(sid))
                keep = op[2] if op[2] < 0 else op[2] % (total + 2)
                expected = await outcome(theirs.rewind(sid, keep_entries=keep), ours=False)
                assert await outcome(ours.rewind(sid, keep_entries=keep), ours=True) == expected
                event(f"rewind: {'refused' if expected[1] is None else min(expected[1], 2)}")
            else:
                assert await theirs.clear(sid) is None and await ours.clear(sid) is None
            await same_sessions(theirs, ours, [sid], ids)
        await same_sessions(theirs, ours, sids, ids)  # neither reached into the other


def known(cases: list[Any]) -> Callable[[T], T]:
    """Hypothesis explicit examples, one per case."""

    def apply(test: T) -> T:
        for case in reversed(cases):
            test = example(case)(test)  # type: ignore[arg-type]
        return test

    return apply


def test_sessions_match_lovia(kind: str) -> None:
    with database(kind) as (runner, db):
        ours = SQLSession(db)

        @EXAMPLES
        @given(gen.session_ops)
        @known(gen.SESSION_CASES)
        def check(ops: list[tuple[Any, ...]]) -> None:
            runner.run(play_sessions(ours, ops))

        check()


async def rewind_every_cut(ours: SQLSession, history: list[tuple[Any, ...]]) -> None:
    """Each cut from 0 to past the end, on a fresh copy of the same history."""
    total = sum(len(batch) for batch, _, _ in history)
    with tempfile.TemporaryDirectory(dir=FILES) as folder:
        theirs = lovia.stores.SQLiteSession(Path(folder) / "lovia.sqlite3")
        for cut in range(total + 2):
            sid = f"{uuid.uuid4().hex[:12]}-cut-{cut}"
            ids: dict[str, str] = {}
            for index, (batch, given_id, meta) in enumerate(history):
                run_id = f"run {index}" if given_id else None
                await append_both(theirs, ours, sid, batch, (run_id, run_id), meta, ids)
            removed = await theirs.rewind(sid, keep_entries=cut)
            assert await ours.rewind(sid, keep_entries=cut) == removed, cut
            await same_sessions(theirs, ours, [sid], ids)


def test_rewind_at_every_cut_matches_lovia(kind: str) -> None:
    with database(kind) as (runner, db):
        ours = SQLSession(db)

        @settings(EXAMPLES, max_examples=examples(20))
        @given(gen.history)
        def check(history: list[tuple[Any, ...]]) -> None:
            runner.run(rewind_every_cut(ours, history))

        check()


def snapshot_json(snapshot: object | None) -> str:
    if snapshot is None:
        return canonical(None)
    assert isinstance(snapshot, RunSnapshot), f"{type(snapshot)} is not lovia's RunSnapshot"
    assert isinstance(snapshot.usage, Usage) and snapshot.usage.clone() == snapshot.usage
    entry_dicts(snapshot.entries)  # lovia's own entry classes
    return canonical(snapshot.to_dict())


async def stored_run(observer: lovia_store.SQLCheckpointer, run_id: str) -> str:
    """What our tables hold for the run, read without a lease, as lovia's snapshot."""
    stored = await observer.load_documents(run_id)
    if stored is None:
        return snapshot_json(None)
    head_json, documents = stored
    entries = [entry_from_dict(json.loads(document)) for document in documents]
    head = RunHead.from_dict(json.loads(head_json))
    return snapshot_json(RunSnapshot.from_parts(run_id, entries, head))


async def play_checkpoints(db: Database, ops: list[tuple[Any, ...]]) -> None:
    prefix = uuid.uuid4().hex[:12]
    runs = [f"{prefix}-{i}" for i in range(2)]
    observer = lovia_store.SQLCheckpointer(db)
    with tempfile.TemporaryDirectory(dir=FILES) as folder:
        theirs = lovia.stores.SQLiteCheckpointer(Path(folder) / "lovia.sqlite3")
        async with SQLCheckpointer(db) as ours:  # leases on, the default ttl
            for op in ops:
                kind, run_id = op[0], runs[op[1]]
                if kind == "append":
                    _, _, batch, head = op
                    known = await theirs.load(run_id) is not None
                    event(
                        f"step: {'more' if known else 'first'}, {head.status}, {len(batch)} entries"
                    )
                    assert await theirs.append(run_id, batch, head) is None
                    assert await ours.append(run_id, batch, head) is None
                elif kind == "load":
                    found = await theirs.load(run_id)
                    event(f"load: {'None' if found is None else found.status}")
                    assert snapshot_json(await ours.load(run_id)) == snapshot_json(found)
                else:
                    event(f"delete: {'stored' if await theirs.load(run_id) else 'absent'}")
                    assert await theirs.delete(run_id) is None
                    assert await ours.delete(run_id) is None
                expected = snapshot_json(await theirs.load(run_id))
                assert await stored_run(observer, run_id) == expected
            for each in runs:  # neither reached into the other
                assert await stored_run(observer, each) == snapshot_json(await theirs.load(each))


def test_checkpoints_match_lovia(kind: str) -> None:
    with database(kind) as (runner, db):

        @settings(EXAMPLES, max_examples=examples(40))
        @given(gen.checkpoint_ops)
        @known(gen.CHECKPOINT_CASES)
        def check(ops: list[tuple[Any, ...]]) -> None:
            runner.run(play_checkpoints(db, ops))

        check()


# -- where lovia-store differs (docs/lovia.md): lovia accepts, we refuse -------------
NAN = float("nan")
QUESTION = [InputEntry("user", "q")]
# (session id, entries, run id, meta, what the refusal names)
REFUSED_APPENDS = {
    "an empty run id": ("s", QUESTION, "", None, "run_id"),
    "an empty session id": ("", QUESTION, "r", None, "session_id"),
    "NUL in a run id": ("s", QUESTION, "r\x00", None, "run_id"),
    "NUL in a session id": ("s\x00", QUESTION, "r", None, "session_id"),
    "a run id of 256 characters": ("s", QUESTION, "r" * 256, None, "run_id"),
    "a call id of 256 characters": (
        "s",
        [ToolCallEntry("c" * 256, "t", "{}")],
        "r",
        None,
        "call_id",
    ),
    "NUL in a call id": ("s", [ToolCallEntry("c\x00", "t", "{}")], "r", None, "call_id"),
    "NaN in meta": ("s", QUESTION, "r", {"score": NAN}, "meta"),
    "infinity in meta": ("s", QUESTION, "r", {"score": [float("inf")]}, "meta"),
    "a key in meta that is not a string": ("s", QUESTION, "r", {1: "one"}, "meta"),
    "NaN in reasoning metadata": (
        "s",
        [ReasoningEntry("r", metadata={"x": NAN})],
        "r",
        None,
        "entries",
    ),
}


async def refused(call: Awaitable[object], named: str, case: str) -> None:
    with pytest.raises(UserError, match=named):
        await call
        pytest.fail(f"{case}: accepted")


def test_appends_lovia_accepts_and_we_refuse(kind: str) -> None:
    async def play(ours: SQLSession) -> None:
        for case, (sid, batch, run_id, meta, named) in REFUSED_APPENDS.items():
            with tempfile.TemporaryDirectory(dir=FILES) as folder:
                theirs = lovia.stores.SQLiteSession(Path(folder) / "lovia.sqlite3")
                assert await theirs.append(sid, batch, run_id=run_id, meta=meta) == run_id
                assert len(await theirs.segments(sid)) == 1, case
            sid = sid and f"{uuid.uuid4().hex[:12]}-{sid}"
            await refused(ours.append(sid, batch, run_id=run_id, meta=meta), named, case)
            if named != "session_id":
                assert await ours.segments(sid) == [], case  # nothing was stored

    with database(kind) as (runner, db):
        runner.run(play(SQLSession(db)))


REFUSED_STEPS = {
    "an empty run id": ("", [], gen.a_head("running"), "run_id"),
    "NUL in a run id": ("r\x00", [], gen.a_head("running"), "run_id"),
    "NaN as the head's started_at": ("r", [], gen.a_head("running", started_at=NAN), "head"),
    "NaN in an entry": (
        "r",
        [ReasoningEntry("r", metadata={"x": NAN})],
        gen.a_head("running"),
        "entries",
    ),
}


def test_checkpoint_steps_lovia_accepts_and_we_refuse(kind: str) -> None:
    async def play(db: Database) -> None:
        for case, (run_id, batch, head, named) in REFUSED_STEPS.items():
            with tempfile.TemporaryDirectory(dir=FILES) as folder:
                theirs = lovia.stores.SQLiteCheckpointer(Path(folder) / "lovia.sqlite3")
                await theirs.append(run_id, batch, head)
                assert await theirs.load(run_id) is not None, case
            async with SQLCheckpointer(db) as ours:
                await refused(ours.append(run_id, batch, head), named, case)
        assert await lovia_store.SQLCheckpointer(db).list_runs() == []  # nothing was stored

    with database(kind) as (runner, db):
        runner.run(play(db))
