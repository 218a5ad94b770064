"""``Prepared`` refuses, when it is built, the statements it could not run as compiled once.

Its results carry no column types and its SQL is compiled once per dialect, so a
selected or returned column whose type converts results (a timestamp: ``str`` on
SQLite, ``datetime`` on PostgreSQL) and an expanding ``IN`` are refused by the
constructor, which for a module constant is at import. The package's own
prepared statements all pass: ``test_golden_sql`` imports every module and
builds every per-dialect statement.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    bindparam,
    column,
    delete,
    select,
    text,
    update,
)

from lovia_store.db.prepared import NotPreparableError, Prepared, built
from lovia_store.db.tables import messages, run_heads, sessions
from lovia_store.db.types import UTCDateTime
from lovia_store.errors import LoviaStoreError

m = messages.c

RESULT_TYPED: dict[str, Any] = {
    "a timestamp column": select(m.sequence, m.created_at).where(m.session_id == bindparam("sid")),
    "a timestamp returned": update(sessions)
    .where(sessions.c.session_id == bindparam("sid"))
    .values(message_count=1)
    .returning(sessions.c.updated_at),
    "a timestamp from a CTE": select(select(run_heads.c.updated_at).cte("heads").c.updated_at),
    "a typed text column": text("SELECT at FROM t").columns(column("at", UTCDateTime())),
    "a plain DateTime": select(column("at", DateTime())),
    "a boolean (an integer on SQLite)": select(column("flag", Boolean())),
    "a decimal": select(column("price", Numeric(10, 2))),
}

EXPANDING: dict[str, Any] = {
    "in_ a list": select(m.sequence).where(m.sequence.in_([1, 2, 3])),
    "in_ an expanding bind": delete(messages).where(
        m.sequence.in_(bindparam("seqs", expanding=True))
    ),
    "an expanding bind in text": text("SELECT 1 WHERE 1 IN :ids").bindparams(
        bindparam("ids", expanding=True)
    ),
    "not_in a list": update(messages).where(m.sequence.not_in([4])).values(entry_json="{}"),
    "in a CTE": select(m.sequence).add_cte(
        delete(messages).where(m.sequence.in_([1, 2])).cte("gone")
    ),
    "in a subquery": select(m.sequence).where(
        m.sequence == select(m.sequence).where(m.sequence.in_([1, 2])).scalar_subquery()
    ),
}


@pytest.mark.parametrize("name", sorted(RESULT_TYPED))
def test_a_result_typed_column_is_refused_when_built(name: str) -> None:
    before = len(built())
    with pytest.raises(NotPreparableError, match="needs result processing") as caught:
        Prepared(RESULT_TYPED[name])
    assert "cannot be prepared" in str(caught.value)
    assert isinstance(caught.value, LoviaStoreError) and isinstance(caught.value, TypeError)
    assert len(built()) == before  # a refused statement is not registered


@pytest.mark.parametrize("name", sorted(EXPANDING))
def test_an_expanding_bind_is_refused_when_built(name: str) -> None:
    with pytest.raises(NotPreparableError, match="expanding bind"):
        Prepared(EXPANDING[name])


def test_columns_read_as_the_driver_gives_them_are_accepted() -> None:
    """Integers, strings, texts and ids (which add no result processing) pass,
    as do statements returning nothing and untyped text."""
    table = Table(
        "t",
        MetaData(),
        Column("n", BigInteger()),
        Column("s", String(20)),
        Column("doc", Text()),
        Column("at", UTCDateTime()),
    )
    accepted = [
        select(table.c.n, table.c.s, table.c.doc, m.session_id, m.run_id).where(
            table.c.at < bindparam("before", type_=UTCDateTime())  # a typed *parameter* is fine
        ),
        table.insert().values(n=bindparam("n"), at=bindparam("at")),
        update(table).values(at=bindparam("at")).returning(table.c.n),
        text("BEGIN IMMEDIATE"),
    ]
    for statement in accepted:
        prepared = Prepared(statement)
        assert prepared.statement is statement
        assert prepared.origin == __name__
        assert prepared in built()


def test_a_module_constant_that_cannot_be_prepared_fails_its_import(tmp_path: Any) -> None:
    """At import, not at its first execution: a module holding one does not load."""
    (tmp_path / "bad_statements.py").write_text(
        "from sqlalchemy import select\n"
        "from lovia_store.db.prepared import Prepared\n"
        "from lovia_store.db.tables import sessions\n"
        "_CREATED = Prepared(select(sessions.c.created_at))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", "import bad_statements"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == 1
    assert "NotPreparableError" in child.stderr and "'lovia_sessions.created_at'" in child.stderr


def _words_printed_by(script: str, tmp_path: Any) -> list[str]:
    """Run ``script`` in a fresh interpreter (which dialects are prepared is a
    process's state), with ``tmp_path`` as its argument; what it printed, split."""
    child = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout.split()


PER_DIALECT_CHILD = """
import asyncio, sys
from sqlalchemy import select
from lovia_store import SQLiteSession
from lovia_store.db.prepared import NotPreparableError, Prepared, per_dialect
from lovia_store.db.tables import sessions

built = []
per_dialect(lambda name: built.append(("before", name)))

async def main():
    session = SQLiteSession(sys.argv[1] + "/a.db")
    try:
        assert built == [], built  # nothing is built before a Database opens
        await session.load("s")  # the first use checks the schema: the store opens
        assert built == [("before", "sqlite")], built
        per_dialect(lambda name: built.append(("after", name)))  # a module imported later
        assert built[-1] == ("after", "sqlite"), built
        await session.load("s")
        assert len(built) == 2, built  # once per dialect
        try:
            per_dialect(lambda name: Prepared(select(sessions.c.created_at)))
        except NotPreparableError:
            print("refused")
    finally:
        await session.close()

asyncio.run(main())
"""


def test_per_dialect_statements_are_built_when_a_database_opens(tmp_path: Any) -> None:
    """Not at a process's first write (``per_dialect``)."""
    assert _words_printed_by(PER_DIALECT_CHILD, tmp_path) == ["refused"]


REFUSED_AT_OPEN_CHILD = """
import asyncio, sys
from sqlalchemy import select
from lovia_store import SQLiteSession
from lovia_store.db.prepared import NotPreparableError, Prepared, per_dialect
from lovia_store.db.tables import sessions

per_dialect(lambda name: Prepared(select(sessions.c.created_at)))  # registered: not built yet

async def main():
    session = SQLiteSession(sys.argv[1] + "/a.db")
    try:
        for _ in range(2):  # refused at every first use, never half-open
            try:
                await session.load("s")
            except NotPreparableError as exc:
                print("refused", "'lovia_sessions.created_at'" in str(exc))
    finally:
        await session.close()

asyncio.run(main())
"""


def test_a_per_dialect_statement_that_cannot_be_prepared_fails_at_open(tmp_path: Any) -> None:
    printed = _words_printed_by(REFUSED_AT_OPEN_CHILD, tmp_path)
    assert printed == ["refused", "True", "refused", "True"]
