"""``storage.sync()``: the Raw Log API from plain functions and loop-less threads; the default file.

These tests are plain functions on purpose: no event loop is running in them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import SQLITE_KINDS, create_pg_database, drop_pg_database
from helpers import say, user
from lovia_store import (
    CompactedMessage,
    SnapshotConflictError,
    SQLiteSessionStorage,
    SQLSessionStorage,
    SyncRuntime,
    SyncSessionStorage,
    Usage,
    UserError,
)
from lovia_store.sessions.raw_log import default_path


@pytest.fixture(params=[*SQLITE_KINDS, "postgres"])
def make_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A factory of storages on one fresh database of each SQL kind."""
    if request.param == "postgres":
        url = asyncio.run(create_pg_database())
        yield lambda: SQLSessionStorage(url)
        asyncio.run(drop_pg_database(url))
    else:
        path = tmp_path / "sync.sqlite3"
        yield lambda: SQLiteSessionStorage(path, wal=request.param == "sqlite_wal")


def converse(view: SyncSessionStorage) -> None:
    assert view.append("s", "r1", user("hi"), title="Sync") == 1
    assert view.append("s", "r1", say("hello"), usage=Usage(input_tokens=3)) == 2
    snap = view.snapshot("s", CompactedMessage(content="greeted"), 1, 0)
    assert snap.version == 1


def test_a_plain_function_uses_the_storage(make_storage: Any) -> None:
    storage = make_storage()
    with storage.sync() as view:
        converse(view)
        assert view.count_messages("s") == 2
        assert view.get_session("s").title == "Sync"
        assert [s.session_id for s in view.list_sessions()] == ["s"]
        assert [r.sequence for r in view.list_raw_messages("s", offset=1)] == [2]
        loaded = view.load("s")
        assert loaded.messages == [CompactedMessage(content="greeted"), say("hello")]
        with pytest.raises(ValueError, match="usage"):
            view.append("s", "r1", user("no"), usage=Usage())
        with pytest.raises(SnapshotConflictError):
            view.snapshot("s", CompactedMessage(content="late"), 2, 0)
        assert view.update_session("s", agent_name="bot").agent_name == "bot"
        assert view.create_session(session_id="t").session_id == "t"
        assert view.delete_session("t") is True
        view.close()
    assert view.runtime.closed


def test_the_storage_works_again_on_another_loop_after_the_view(make_storage: Any) -> None:
    storage = make_storage()
    with storage.sync() as view:
        converse(view)

    async def later() -> int:
        async with storage:
            await storage.append("s", "r2", user("from asyncio.run"))
            return await storage.count_messages("s")

    assert asyncio.run(later()) == 3


def test_a_thread_without_a_loop_uses_the_storage(make_storage: Any) -> None:
    storage = make_storage()
    outcome: dict[str, Any] = {}

    def worker() -> None:
        try:
            with pytest.raises(RuntimeError):
                asyncio.get_running_loop()
            with storage.sync() as view:
                converse(view)
                outcome["count"] = view.count_messages("s")
                view.close()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(60)
    assert "error" not in outcome, outcome
    assert outcome["count"] == 2


def test_a_shared_runtime_is_reused_and_left_running(make_storage: Any) -> None:
    storage = make_storage()
    with SyncRuntime() as runtime:
        with storage.sync(runtime=runtime) as first:
            converse(first)
            loop_thread = first.runtime
        assert not runtime.closed
        with storage.sync(runtime=runtime) as second:
            assert second.runtime is loop_thread
            assert second.count_messages("s") == 2
        # The runtime still serves plain calls, on the same loop as before.
        assert runtime.call(storage.count_messages, "s") == 2
        runtime.call(storage.close)
    assert runtime.closed
    with pytest.raises(RuntimeError, match="closed"):
        runtime.call(storage.count_messages, "s")
    with pytest.raises(RuntimeError, match="closed"), storage.sync(runtime=runtime):
        pass


def test_the_runtime_refuses_to_block_its_own_loop(tmp_path: Path) -> None:
    storage = SQLiteSessionStorage(tmp_path / "own.sqlite3")
    with SyncRuntime() as runtime:

        async def reenter() -> int:
            return runtime.call(storage.count_messages, "s")

        with pytest.raises(RuntimeError, match="own loop"):
            runtime.call(reenter)
        runtime.call(storage.close)


def test_closing_waits_for_a_write_its_caller_abandoned(tmp_path: Path) -> None:
    storage = SQLiteSessionStorage(tmp_path / "abandoned.sqlite3")
    runtime = SyncRuntime()
    assert runtime.call(storage.append, "s", "r", user("first")) == 1

    async def abandon() -> None:
        task = asyncio.ensure_future(storage.append("s", "r", user("mid-flight")))
        await asyncio.sleep(0)  # the write is under way in a task of its own
        task.cancel()

    runtime.call(abandon)
    runtime.close()

    async def count() -> int:
        async with storage:
            return await storage.count_messages("s")

    assert asyncio.run(count()) == 2


# -- the default location -------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.mark.parametrize("factory", [SQLiteSessionStorage, SQLSessionStorage])
def test_the_default_file_is_in_the_home_folder(home: Path, factory: Any) -> None:
    assert default_path() == home / ".lovia-store" / "sessions.sqlite3"
    assert not (home / ".lovia-store").exists()
    storage = factory()
    assert (home / ".lovia-store").is_dir()  # created at construction
    assert str(home / ".lovia-store" / "sessions.sqlite3") in storage.database.url
    with storage.sync() as view:
        view.append("s", "r", user("stored at home"))
        view.close()
    assert (home / ".lovia-store" / "sessions.sqlite3").stat().st_size > 0
    with SQLiteSessionStorage(home / ".lovia-store" / "sessions.sqlite3").sync() as again:
        assert again.count_messages("s") == 1
        again.close()


def test_an_explicit_path_creates_its_own_folder_not_a_tree(tmp_path: Path) -> None:
    target = tmp_path / "a" / "store.sqlite3"
    SQLiteSessionStorage(target)
    assert target.parent.is_dir()
    with pytest.raises(UserError, match="does not exist"):  # a mistyped path (issue 16)
        SQLiteSessionStorage(tmp_path / "x" / "y" / "store.sqlite3")
    assert not (tmp_path / "x").exists()
