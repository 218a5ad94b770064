"""Fixtures and hooks; what tests import lives in ``backends.py`` and ``helpers.py``.

Each backend case carries its backend's marker (``-m mariadb`` runs every MariaDB
case; docs/testing.md lists them). ``LOVIA_TEST_TIER=full`` (CI sets it) runs every
test; without it, the tests marked ``slow`` (real processes killed mid-write, wheels
built, other projects' suites, a browser) are deselected, so a contributor's run
takes minutes.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from backends import (
    ALL_KINDS,
    CLUSTER_KINDS,
    COMPRESSED_KINDS,
    LEGACY,
    SERVER_KINDS,
    SQL_KINDS,
    Backend,
    _backend,
    drop_shared_databases,
    fresh_server_database,
)
from divergences import DIVERGENCES, mark_divergences
from helpers import FULL_TIER

BACKEND_MARKERS = {
    "memory": ("memory",),
    "sqlite": ("sqlite",),
    "sqlite_wal": ("sqlite_wal",),
    "sqlite_compressed": ("sqlite",),
    "postgres": ("postgres",),
    "postgres_psycopg": ("postgres", "psycopg"),
    "mariadb": ("mariadb", "mysql"),
    "mysql": ("mariadb", "mysql"),
    "pgbouncer": ("postgres", "pgbouncer"),
    "pgbouncer_psycopg": ("postgres", "psycopg", "pgbouncer"),
    "galera": ("mariadb", "mysql", "galera"),
    "postgres_serializable": ("postgres",),
}
"""The markers a case gets for each backend kind among its parameters."""

FIXTURE_MARKERS = {"pg_url": ("postgres",), "mysql_url": ("mariadb", "mysql")}
"""The markers a test gets for a server fixture it uses."""

THROUGH_THE_POOLER = {
    "test_session_contract.py",
    "test_checkpoint_contract.py",
    "test_lease_contract.py",
    "test_storage_raw_log.py",
    "test_storage_sessions.py",
    "test_storage_paging.py",
    "test_concurrency.py",
    "test_effects.py",
    "test_tenants.py",
    "test_tenant_checkpoints.py",
    "test_tenant_raw_log.py",
}
"""The suites whose backend cases also run through a transaction pooler and on a Galera
node (CLUSTER_KINDS): sessions, checkpoints, leases and effects, the Raw Log, processes
appending at once, and tenants kept apart by each."""


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mysql),
    ]
)
async def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """One empty database on each SQL engine: a new SQLite file, or a fresh database
    on the PostgreSQL or MariaDB server (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'store.sqlite3'}"
        return
    async with fresh_server_database(request.param) as created:
        yield created


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    async with fresh_server_database("postgres") as url:
        yield url


@pytest.fixture(params=ALL_KINDS + CLUSTER_KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Every backend, memory included."""
    async for value in _backend(request.param, tmp_path):
        yield value


@pytest.fixture(params=SQL_KINDS + CLUSTER_KINDS)
async def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Every SQL backend."""
    async for value in _backend(request.param, tmp_path):
        yield value


@pytest.fixture(params=SERVER_KINDS + CLUSTER_KINDS)
async def server_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Every server backend (PostgreSQL, MariaDB)."""
    async for value in _backend(request.param, tmp_path):
        yield value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each divergence tests/divergences.py declares is a strict xfail: it must still fail.
    Each case gets its backends' markers; outside the full tier, slow tests are deselected.
    A test marked ``default_tier_on(kind, ...)`` is ``slow`` on every other backend: the
    default tier runs it on those kinds, the full tier on all."""
    mark_divergences(items, DIVERGENCES)
    for item in items:
        kinds: list[str] = []
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            kinds += [v for v in callspec.params.values() if isinstance(v, str)]
        names = {m.name for m in item.iter_markers()}
        kinds += [n for n in ("mysql", "mariadb") if n in names]
        markers = {m for kind in kinds for m in BACKEND_MARKERS.get(kind, ())}
        markers |= {
            m for f in getattr(item, "fixturenames", ()) for m in FIXTURE_MARKERS.get(f, ())
        }
        for marker in sorted(markers - names):
            item.add_marker(getattr(pytest.mark, marker))
        only = item.get_closest_marker("default_tier_on")
        if only is not None and not set(kinds) & set(only.args):
            item.add_marker(pytest.mark.slow)
    kept = [
        item
        for item in items
        if (FULL_TIER or item.get_closest_marker("slow") is None)
        and (item.path.name in THROUGH_THE_POOLER or not _pooled_case(item))
    ]
    if len(kept) < len(items):
        chosen = set(kept)
        config.hook.pytest_deselected(items=[i for i in items if i not in chosen])
    cache = getattr(config, "cache", None)
    seconds = cache.get(SECONDS_KEY, {}) if cache is not None else {}
    items[:] = heaviest_files_first(kept, seconds)


SECONDS_KEY = f"lovia/file_seconds/{'full' if FULL_TIER else 'default'}"
"""Where pytest's cache keeps the seconds each file's tests took in the last run of this tier."""
_seconds: dict[str, float] = {}


def heaviest_files_first(
    items: list[pytest.Item], seconds: dict[str, float] | None = None
) -> list[pytest.Item]:
    """Files the last run of this tier timed, longest first (``seconds``, from pytest's
    cache); before them the files it did not time: those holding slow tests first, then
    by number of tests. Each file's tests in their order. xdist (``--dist loadfile
    --no-loadscope-reorder``) hands files out in this order, so long files (lovia's
    suite, the wheels, the kill matrices, the migrations beside a host's) start early
    instead of keeping one worker busy while the other idles at the end."""
    timed = seconds or {}
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(_file(item.nodeid), []).append(item)

    def weight(name: str) -> tuple[int, float]:
        if name in timed:
            return (1, -timed[name])
        tests = by_file[name]
        slow = sum(1 for t in tests if t.get_closest_marker("slow") is not None)
        return (0, -(slow * len(items) + len(tests)))

    return [item for name in sorted(by_file, key=weight) for item in by_file[name]]


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each file's seconds (in the process that directs the run, every file's)."""
    _seconds[_file(report.nodeid)] = _seconds.get(_file(report.nodeid), 0.0) + report.duration


def _pooled_case(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    kept = (*CLUSTER_KINDS, *COMPRESSED_KINDS)
    return callspec is not None and any(v in kept for v in callspec.params.values())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop the databases the server backends shared; where the run is directed, keep
    each file's seconds for the next run's order."""
    asyncio.run(drop_shared_databases())
    cache = getattr(session.config, "cache", None)
    if cache is not None and _seconds and not hasattr(session.config, "workerinput"):
        timed = cache.get(SECONDS_KEY, {})
        timed.update({name: round(value, 2) for name, value in _seconds.items()})
        cache.set(SECONDS_KEY, timed)


@pytest.fixture
def legacy_copy(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a legacy fixture into a writable folder (shared/ is read-only in CI)."""

    def copy(name: str) -> Path:
        source = LEGACY / name
        if not source.exists():
            pytest.fail(f"legacy fixture {source} is missing (set LOVIA_LEGACY_FIXTURES)")
        target = tmp_path / name
        shutil.copyfile(source, target)
        return target

    return copy
