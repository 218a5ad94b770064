"""The session contract on every backend (memory, SQLite, SQLite WAL, PostgreSQL through
asyncpg and psycopg, MariaDB).

The store-agnostic cases are shipped as ``lovia_store.testing`` (a third party's store runs
them with one import); ``TestSessionContract`` runs them over conftest's backend registry.
What needs this repository (lovia's fixture file, a database to reopen) stays here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from backends import LOVIA_MANIFEST, Backend
from helpers import a_run
from lovia_store import InMemorySession, Segment, SQLSession, entry_from_dict, entry_to_dict
from lovia_store.testing import SessionContract

MANIFEST = LOVIA_MANIFEST


class TestSessionContract(SessionContract):
    """Every shipped session case, on every backend."""

    @pytest.fixture
    def make_session(self, backend: Backend) -> Callable[[], InMemorySession | SQLSession]:
        return backend.session


def rich_runs() -> list[tuple[str, list[Any], dict[str, Any] | None]]:
    """Every run of the lovia fixture: all entry types, parts, unicode, odd meta."""
    return [
        (run["run_id"], [entry_from_dict(e) for e in run["entries"]], run["meta"])
        for session in MANIFEST["sessions"]
        for run in session["runs"]
    ]


async def test_round_trips_every_entry_shape_and_meta(backend: Backend) -> None:
    runs = rich_runs()
    async with backend.session() as store:
        for run_id, entries, meta in runs:
            assert await store.append("s", entries, run_id=run_id, meta=meta) == run_id
        segments = await store.segments("s")
        assert [s.run_id for s in segments] == [r[0] for r in runs]
        for segment, (_, entries, meta) in zip(segments, runs, strict=True):
            assert [entry_to_dict(e) for e in segment.entries] == [
                entry_to_dict(e) for e in entries
            ]
            assert segment.meta == meta
        flat = await store.load("s")
        assert flat == [e for _, entries, _ in runs for e in entries]


async def test_survives_reopening(sql_backend: Backend) -> None:
    async with sql_backend.session() as store:
        await store.append("s", a_run("1"), run_id="r1", meta={"k": [1, 2]})
    async with sql_backend.session() as store:
        assert await store.segments("s") == [Segment("r1", a_run("1"), {"k": [1, 2]})]
