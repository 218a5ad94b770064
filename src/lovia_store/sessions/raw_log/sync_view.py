"""Blocking use of the async storage: one background event loop per ``SyncRuntime``.

A runtime owns a thread that runs one event loop; every blocking call is
submitted to that loop and waited for, so the storage's connections always
live on one loop, whichever thread calls. ``storage.sync()`` makes a view
with its own runtime and stops it on exit; ``storage.sync(runtime=r)``
reuses ``r`` and leaves its shutdown to the caller. Either way, before a
runtime's loop stops, the databases used on it release that loop's
connections (``Database.dispose_loop``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from ...db.database import Database
from .storage import SQLSessionStorage

__all__ = ["SyncRuntime", "SyncSessionStorage"]

P = ParamSpec("P")
T = TypeVar("T")

_GRACE = 30.0
"""Seconds a closing runtime waits for work still running on its loop."""


class SyncRuntime:
    """A background thread running one event loop, for blocking calls into async code.

    Any thread may call ``call``; calls from the loop's own thread are refused
    (they would deadlock). ``close`` lets work still running on the loop
    finish, runs the registered cleanups, then stops and joins the thread;
    calling it again does nothing. Also a context manager.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._closed = False
        self._cleanups: dict[int, Callable[[], Awaitable[None]]] = {}
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name="lovia-store-sync", daemon=True
        )
        self._thread.start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(ready.set)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _submit(self, work: Callable[[], Awaitable[T]]) -> Future[T]:
        if threading.get_ident() == self._thread.ident:
            raise RuntimeError(
                "a blocking call cannot run on the SyncRuntime's own loop; await it instead"
            )

        async def run() -> T:
            return await work()

        with self._lock:
            if self._closed:
                raise RuntimeError("this SyncRuntime is closed")
            return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def call(self, function: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``function(*args, **kwargs)`` on the loop and return its result (or raise)."""
        future = self._submit(lambda: function(*args, **kwargs))
        try:
            return future.result()
        except BaseException:
            future.cancel()  # KeyboardInterrupt while waiting: stop the call too
            raise

    def at_close(self, key: object, cleanup: Callable[[], Awaitable[None]]) -> None:
        """Run ``cleanup`` on the loop before it stops (once per ``key``)."""
        with self._lock:
            if not self._closed:
                self._cleanups.setdefault(id(key), cleanup)

    def close(self) -> None:
        if threading.get_ident() == self._thread.ident:
            raise RuntimeError("a SyncRuntime cannot be closed from its own loop")
        with self._lock:
            if self._closed:
                return
            self._closed = True
            cleanups = list(self._cleanups.values())
            self._cleanups.clear()
        try:
            asyncio.run_coroutine_threadsafe(_finish(cleanups), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    def __enter__(self) -> Self:
        if self._closed:
            raise RuntimeError("this SyncRuntime is closed")
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


async def _finish(cleanups: list[Callable[[], Awaitable[None]]]) -> None:
    current = asyncio.current_task()
    # Writes run in shielded tasks that outlive a cancelled caller: give them
    # time to end (commit or roll back) before the loop goes; cancel the rest.
    pending = {task for task in asyncio.all_tasks() if task is not current}
    if pending:
        _, late = await asyncio.wait(pending, timeout=_GRACE)
        for task in late:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    errors = []
    for cleanup in cleanups:
        try:
            await cleanup()
        except Exception as error:  # one failed cleanup must not keep the others from running
            errors.append(error)
    loop = asyncio.get_running_loop()
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()
    if errors:
        raise errors[0]


async def release_loop(database: Database) -> None:
    """Let ``database`` drop the connections it opened on the running loop."""
    await database.dispose_loop()


def _blocking(
    method: Callable[Concatenate[SQLSessionStorage, P], Awaitable[T]],
) -> Callable[Concatenate[SyncSessionStorage, P], T]:
    """A storage method, made blocking with the same parameters."""

    def call(self: SyncSessionStorage, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.runtime.call(method, self.storage, *args, **kwargs)

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class SyncSessionStorage:
    """The blocking view ``SQLSessionStorage.sync()`` returns: the same methods, not awaited.

    Use it as a context manager. Leaving it stops the runtime it created (a
    runtime passed in is left running); it does not close the storage, whose
    ``close`` is available here as a blocking method too.
    """

    def __init__(self, storage: SQLSessionStorage, *, runtime: SyncRuntime | None = None) -> None:
        self.storage = storage
        self.runtime = SyncRuntime() if runtime is None else runtime
        self._owns_runtime = runtime is None
        database = storage.database
        self.runtime.at_close(database, lambda: release_loop(database))

    create_session = _blocking(SQLSessionStorage.create_session)
    get_session = _blocking(SQLSessionStorage.get_session)
    update_session = _blocking(SQLSessionStorage.update_session)
    delete_session = _blocking(SQLSessionStorage.delete_session)
    list_sessions = _blocking(SQLSessionStorage.list_sessions)
    count_messages = _blocking(SQLSessionStorage.count_messages)
    list_raw_messages = _blocking(SQLSessionStorage.list_raw_messages)
    load = _blocking(SQLSessionStorage.load)
    append = _blocking(SQLSessionStorage.append)
    snapshot = _blocking(SQLSessionStorage.snapshot)
    close = _blocking(SQLSessionStorage.close)

    def __enter__(self) -> Self:
        if self.runtime.closed:
            raise RuntimeError("the runtime of this view is closed")
        return self

    def __exit__(self, *_exc: Any) -> None:
        if self._owns_runtime:
            self.runtime.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.storage!r})"
