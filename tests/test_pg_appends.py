"""PostgreSQL's append: one statement, whose unique violation on the run key is the
idempotent no-op."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.util import await_only

from helpers import a_run
from lovia_store import Database, SQLSession

pytestmark = pytest.mark.postgres


async def test_a_replay_racing_a_clear_is_still_a_no_op(pg_url: str) -> None:
    """The replay's violation names the run key, so it is the no-op even when a
    ``clear()`` of the session lands between the violation and any look-up."""
    async with Database(pg_url) as db:
        store = SQLSession(db)
        await store.append("s", a_run("1"), run_id="r1")
        cleared: list[str] = []

        def clear_right_after(context: Any) -> None:
            if isinstance(context.sqlalchemy_exception, IntegrityError) and not cleared:
                driver = context.connection.connection.driver_connection
                await_only(driver.execute("DELETE FROM lovia_session_runs"))
                cleared.append(str(context.original_exception))

        event.listen(db.engine.sync_engine, "handle_error", clear_right_after)
        assert await store.append("s", a_run("again"), run_id="r1") == "r1"
        assert cleared and "pk_lovia_session_runs" in cleared[0]
        assert await store.load("s") == a_run("1")


async def test_a_replay_is_a_no_op_where_the_driver_names_no_constraint(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the driver names no constraint (or another one), the run is looked
    up: found, the append is the no-op."""
    from lovia_store.sessions import log

    monkeypatch.setattr(log, "violated_constraint", lambda exc: None)
    async with Database(pg_url) as db:
        store = SQLSession(db)
        await store.append("s", a_run("1"), run_id="r1")
        assert await store.append("s", a_run("again"), run_id="r1") == "r1"
        assert await store.load("s") == a_run("1")
