"""A pytest plugin for lovia's own test suite: lovia-store's stores in place of lovia's.

``run_lovia_suite.sh`` loads it (``-p lovia_swap``) into a run of the tests
lovia's sdist ships. Before any of lovia's test modules is imported it puts
``lovia_store.integrations.lovia``'s session and checkpointer wherever lovia
exports its own, so ``from lovia.stores import SQLiteSession`` in a test, and
``ChatStore.sqlite()`` / ``ChatStore.in_memory()`` in lovia's web UI, build
ours. lovia's in-memory stores are swapped too: most of its runner and
checkpoint tests use them, and they would otherwise test nothing of ours.

``LOVIA_SUITE_BACKEND`` picks where the data goes:

- ``sqlite``: the path a test gives (``:memory:`` included); an in-memory
  store gets a copy of a freshly migrated file of its own.
- ``postgres`` / ``mariadb``: the path is only a name. The first store a test
  opens on a path gets a fresh database on the server
  (``LOVIA_TEST_POSTGRES_URL`` / ``LOVIA_TEST_MYSQL_URL``), later stores on the
  same path share it (lovia's tests reopen files to prove durability), and
  ``:memory:`` or an in-memory store always gets a database of its own. After
  the test its databases are emptied (schema kept) for later tests, and all
  are dropped at the end of the run.

``LOVIA_SUITE_EXPECTED`` names the list of tests that cannot run as they are
(``lovia_expected.py`` says what the two kinds mean): a ``private`` one runs as
a strict xfail, so one that starts to pass fails the run too; a ``timing`` one
runs on lovia's own in-memory stores. An id the list names that the selected
files do not hold is an error.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import lovia
import lovia.stores
import lovia.stores.checkpointer
import lovia.stores.session
import lovia.web.store
import pytest
from lovia_expected import Expected, ListError, read_expected
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lovia_store.db import tables
from lovia_store.integrations import lovia as ours

T = TypeVar("T")

BACKEND = os.environ.get("LOVIA_SUITE_BACKEND", "sqlite")
BACKENDS = ("sqlite", "postgres", "mariadb")
if BACKEND not in BACKENDS:
    raise pytest.UsageError(f"LOVIA_SUITE_BACKEND={BACKEND!r}: expected one of {BACKENDS}")
_URL = {"postgres": "LOVIA_TEST_POSTGRES_URL", "mariadb": "LOVIA_TEST_MYSQL_URL"}.get(BACKEND)
if _URL is not None and not os.environ.get(_URL):
    # Without it every store would skip its test: a run that proves nothing.
    raise pytest.UsageError(f"LOVIA_SUITE_BACKEND={BACKEND} needs {_URL}")


def _load_servers() -> Any:
    """Our test suite's database helpers (create and drop a fresh server database)."""
    path = Path(__file__).resolve().parents[1] / "backends.py"
    if str(path.parent) not in sys.path:  # it may import its siblings;
        sys.path.append(str(path.parent))  # appended, so lovia's own test modules win
    spec = importlib.util.spec_from_file_location("lovia_store_test_servers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class _AdminLoop:
    """An event loop of its own, in a thread: stores are built in sync code
    (``__init__``, often inside a test's running loop), while databases are
    created, migrated and emptied with async drivers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()


async def _migrate(target: str) -> None:
    """Bring ``target`` to our schema's head, as any store's first use would."""
    store = ours.SQLSession(target)
    try:
        await store.load("lovia-suite")
    finally:
        await store.close()


class _ServerDatabases:
    """Fresh databases on the server, migrated once and reused by later tests.

    Creating and migrating a database costs 0.2-0.3 s, and lovia's tests open
    several stores each; a database goes back to the pool emptied of every
    row (its schema version kept), which is what a fresh one holds.
    """

    def __init__(self, admin: _AdminLoop) -> None:
        self._admin = admin
        self._servers = _load_servers()
        self._free: list[str] = []
        self._all: list[str] = []
        self._engines: dict[str, AsyncEngine] = {}

    def take(self) -> str:
        if self._free:
            return self._free.pop()
        create = (
            self._servers.create_pg_database
            if BACKEND == "postgres"
            else self._servers.create_mysql_database
        )
        url: str = self._admin.run(create())
        self._all.append(url)
        self._admin.run(_migrate(url))
        return url

    async def _empty(self, url: str) -> None:
        engine = self._engines.get(url)
        if engine is None:
            engine = self._engines[url] = create_async_engine(url)
        async with engine.begin() as conn:
            for table in reversed(tables.metadata.sorted_tables):
                if table is not tables.schema_versions:
                    await conn.execute(table.delete())

    def give_back(self, urls: list[str]) -> None:
        for url in urls:
            self._admin.run(self._empty(url))
            self._free.append(url)

    def drop_all(self) -> None:
        drop = (
            self._servers.drop_pg_database
            if BACKEND == "postgres"
            else self._servers.drop_mysql_database
        )
        for url in self._all:
            engine = self._engines.pop(url, None)
            if engine is not None:
                self._admin.run(engine.dispose())
            self._admin.run(drop(url))
        self._all.clear()
        self._free.clear()


class _Places:
    """Where this test's stores keep their data, and what to clean up after it."""

    def __init__(self) -> None:
        self._admin: _AdminLoop | None = None
        self._servers: _ServerDatabases | None = None
        self._scratch: Path | None = None
        self._template: Path | None = None
        self._by_path: dict[str, str] = {}
        self._taken: list[str] = []
        self._copies: list[Path] = []
        self.opened: list[Any] = []
        self.count = 0  # stores opened in the whole run

    @property
    def admin(self) -> _AdminLoop:
        if self._admin is None:
            self._admin = _AdminLoop()
        return self._admin

    def _sqlite_copy(self) -> str:
        """A migrated SQLite file of its own (a copy of one migrated once: 5 ms, not 50)."""
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="lovia-suite-"))
        if self._template is None:
            template = self._scratch / "template.sqlite3"
            self.admin.run(_migrate(os.fspath(template)))
            self._template = template
        copy = self._scratch / f"store{len(self._copies)}.sqlite3"
        shutil.copyfile(self._template, copy)
        self._copies.append(copy)
        return os.fspath(copy)

    def _server(self) -> str:
        if self._servers is None:
            self._servers = _ServerDatabases(self.admin)
        url = self._servers.take()
        self._taken.append(url)
        return url

    def target(self, path: str | os.PathLike[str] | None, wal: bool) -> tuple[str, bool]:
        """The target and WAL flag for a store lovia's test opened on ``path``
        (None for one of lovia's in-memory stores)."""
        if BACKEND == "sqlite":
            if path is None:
                return self._sqlite_copy(), False
            return os.fspath(path), wal
        if path is None or os.fspath(path) == ":memory:":
            return self._server(), False
        key = os.path.abspath(os.fspath(path))
        if key not in self._by_path:
            self._by_path[key] = self._server()
        return self._by_path[key], False

    async def clean(self) -> None:
        """Close every store the test opened, then empty its databases for the next test."""
        opened, self.opened = self.opened, []
        for store in opened:
            await store.close()
        taken, self._taken = self._taken, []
        self._by_path.clear()
        if self._servers is not None:
            self._servers.give_back(taken)
        for copy in self._copies:
            copy.unlink(missing_ok=True)
        self._copies.clear()

    def finish(self) -> None:
        if self._servers is not None:
            self._servers.drop_all()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


PLACES = _Places()


def _open_session(store: ours.SQLSession, path: Any, wal: bool) -> None:
    target, wal = PLACES.target(path, wal)
    if BACKEND == "sqlite":
        ours.SQLiteSession.__init__(store, target, wal=wal)  # type: ignore[arg-type]
    else:
        ours.SQLSession.__init__(store, target)
    PLACES.opened.append(store)
    PLACES.count += 1


def _open_checkpointer(store: ours.SQLCheckpointer, path: Any, wal: bool) -> None:
    target, wal = PLACES.target(path, wal)
    if BACKEND == "sqlite":
        ours.SQLiteCheckpointer.__init__(store, target, wal=wal)  # type: ignore[arg-type]
    else:
        ours.SQLCheckpointer.__init__(store, target)
    PLACES.opened.append(store)
    PLACES.count += 1


class SQLiteSession(ours.SQLiteSession):
    """lovia's ``SQLiteSession(path, *, wal=False)``, on this run's backend."""

    def __init__(self, path: str | os.PathLike[str], *, wal: bool = False) -> None:
        _open_session(self, path, wal)


class InMemorySession(ours.SQLiteSession):
    """lovia's ``InMemorySession()``: a private database of its own."""

    def __init__(self) -> None:
        _open_session(self, None, False)


class SQLiteCheckpointer(ours.SQLiteCheckpointer):
    """lovia's ``SQLiteCheckpointer(path, *, wal=False)``, on this run's backend."""

    def __init__(self, path: str | os.PathLike[str], *, wal: bool = False) -> None:
        _open_checkpointer(self, path, wal)


class InMemoryCheckpointer(ours.SQLiteCheckpointer):
    """lovia's ``InMemoryCheckpointer()``: a private database of its own."""

    def __init__(self) -> None:
        _open_checkpointer(self, None, False)


SWAPS: dict[str, type] = {
    "SQLiteSession": SQLiteSession,
    "InMemorySession": InMemorySession,
    "SQLiteCheckpointer": SQLiteCheckpointer,
    "InMemoryCheckpointer": InMemoryCheckpointer,
}
ORIGINALS: dict[str, type] = {name: getattr(lovia.stores, name) for name in SWAPS}
IN_MEMORY = ("InMemorySession", "InMemoryCheckpointer")


def _rebind(replacements: dict[type, type], extra: tuple[Any, ...] = ()) -> None:
    """Replace classes by identity in every loaded lovia module (and ``extra``)."""
    lovia_modules = [
        module
        for name, module in list(sys.modules.items())
        if module is not None and (name == "lovia" or name.startswith("lovia."))
    ]
    for module in (*lovia_modules, *extra):
        for name, value in list(vars(module).items()):
            replacement = replacements.get(value) if isinstance(value, type) else None
            if replacement is not None:
                setattr(module, name, replacement)


TO_OURS = {ORIGINALS[name]: SWAPS[name] for name in SWAPS}
# At import, before lovia's test modules bind the names.
_rebind(TO_OURS)
assert lovia.SQLiteSession is SQLiteSession and lovia.web.store.InMemorySession is InMemorySession


def _expected(config: pytest.Config) -> dict[str, Expected]:
    path = os.environ.get("LOVIA_SUITE_EXPECTED")
    if not path:
        return {}
    try:
        return read_expected(Path(path), BACKEND)
    except ListError as exc:
        raise pytest.UsageError(str(exc)) from None


_TIMING = pytest.StashKey[bool]()

HANG_BOUND_STRETCH = 10
"""How much longer lovia's tests wait in ``asyncio.wait_for``: every one of their calls
is a bound on a hang (3-5 s, written for its in-memory stores), none expects a timeout.
On a server, on a loaded two-core machine, a run can take longer and still be right;
a hang still fails, later."""


class _StretchedAsyncio:
    """``asyncio`` as lovia's test modules see it, with ``wait_for``'s bound stretched."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def wait_for(awaitable: Any, timeout: float | None) -> Any:  # noqa: ASYNC109
        stretched = None if timeout is None else timeout * HANG_BOUND_STRETCH
        return await asyncio.wait_for(awaitable, stretched)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Stretch the hang bounds of every module of lovia's tests (and their conftests)."""
    tests = str(session.config.rootpath)
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None) or ""
        if source.startswith(tests) and getattr(module, "asyncio", None) is asyncio:
            module.asyncio = _StretchedAsyncio()
            STRETCHED.append(module.__name__)


STRETCHED: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    expected = _expected(config)
    for item in items:
        entry = expected.pop(item.nodeid, None)
        if entry is None:
            continue
        if entry.kind == "private":
            item.add_marker(pytest.mark.xfail(reason=entry.reason, strict=True))
        else:
            item.stash[_TIMING] = True
    selected = {item.nodeid.split("::")[0] for item in items}
    # An id in a file this run selected that matched nothing: renamed or gone.
    stale = [nodeid for nodeid in expected if nodeid.split("::")[0] in selected]
    if stale:
        raise pytest.UsageError(f"listed in LOVIA_SUITE_EXPECTED but not tests: {stale}")


def _module_of(item: pytest.Item) -> tuple[Any, ...]:
    module = getattr(item, "module", None)
    return () if module is None else (module,)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A lovia module imported during collection (or lazily) binds the names too.
    _rebind(TO_OURS)
    if item.stash.get(_TIMING, False):
        back = {SWAPS[name]: ORIGINALS[name] for name in IN_MEMORY}
        _rebind(back, _module_of(item))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    if item.stash.get(_TIMING, False):
        _rebind(TO_OURS, _module_of(item))


@pytest.fixture(autouse=True)
async def _lovia_store_places() -> AsyncIterator[None]:
    yield
    await PLACES.clean()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    PLACES.finish()


def pytest_report_header(config: pytest.Config) -> str:
    return f"lovia's stores swapped for lovia-store's, backend: {BACKEND}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # What tests/test_lovia_suite.py reads to know the swap took effect.
    terminalreporter.write_line(f"lovia-store stores opened: {PLACES.count} on {BACKEND}")
    terminalreporter.write_line(f"hang bounds stretched in {len(STRETCHED)} test modules")
