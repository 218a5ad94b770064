"""A failed statement's values (conversation content) never reach a traceback or a log (D17).

SQLAlchemy's errors print the bound parameters unless ``hide_parameters``; the
typed error chains the driver error, so ``logger.exception()`` wrote them out.
"""

from __future__ import annotations

import io
import logging
import traceback
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from backends import SQLITE_KINDS, Backend
from lovia_store import ConflictError, Database, InputEntry, LoviaStoreError, SQLSession
from lovia_store.db.tables import messages

SECRET = "the-users-secret-words-7Hq"


def duplicate_the_first_message(conn: Connection) -> None:
    """Insert the stored row again, verbatim: every column, the document included, is
    a bound value of the refused statement."""
    row = conn.execute(select(messages).order_by(messages.c.sequence)).mappings().first()
    assert row is not None
    conn.execute(messages.insert(), dict(row))


@pytest.fixture
def log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("tests.hidden_values")
    logger.addHandler(handler)
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def assert_never_shown(error: LoviaStoreError, log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = log
    try:
        raise error
    except LoviaStoreError:
        logger.exception("the append failed")
    shown = {
        "traceback": "".join(traceback.format_exception(error)),
        "log": stream.getvalue(),
        "message": str(error),
    }
    assert type(error).__name__ in shown["log"]  # the failure itself is there
    for where, text_ in shown.items():
        assert SECRET not in text_, where


async def refused_duplicate(db: Database) -> LoviaStoreError:
    await SQLSession(db).append("s", [InputEntry(role="user", content=SECRET)], run_id="r1")
    with pytest.raises(ConflictError) as caught:
        await db.write(duplicate_the_first_message)
    return caught.value


async def test_a_refused_statements_values_stay_out_of_tracebacks_and_logs(
    sql_backend: Backend, log: tuple[logging.Logger, io.StringIO]
) -> None:
    assert sql_backend.target is not None
    async with Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal") as db:
        assert_never_shown(await refused_duplicate(db), log)


async def test_on_a_callers_engine_too(
    sql_backend: Backend, log: tuple[logging.Logger, io.StringIO]
) -> None:
    """The caller's engine shows parameters (SQLAlchemy's default); the errors
    lovia-store raises for its own statements still do not."""
    assert sql_backend.target is not None
    target = sql_backend.target
    if sql_backend.kind in SQLITE_KINDS:
        target = f"sqlite+aiosqlite:///{target}"
    engine = create_async_engine(target)
    assert engine.sync_engine.hide_parameters is False
    try:
        async with Database(engine) as db:
            assert_never_shown(await refused_duplicate(db), log)
    finally:
        await engine.dispose()


async def test_a_value_asyncpg_refuses_is_not_quoted(
    pg_url: str, log: tuple[logging.Logger, io.StringIO]
) -> None:
    """asyncpg quotes the first 40 characters of an argument it cannot encode."""
    async with Database(pg_url) as db:
        with pytest.raises(LoviaStoreError) as caught:
            await db.read(
                lambda conn: conn.execute(text("SELECT CAST(:v AS INTEGER)"), {"v": SECRET})
            )
        assert "(value hidden)" in str(caught.value)
        assert "cannot be interpreted as an integer" in str(caught.value)  # the reason stays
        assert_never_shown(caught.value, log)


def test_showing_parameters_is_the_callers_choice(pg_url: str) -> None:
    url = make_url(pg_url).render_as_string(hide_password=False)
    assert Database(url).engine.sync_engine.hide_parameters is True
    assert Database(url, hide_parameters=False).engine.sync_engine.hide_parameters is False
