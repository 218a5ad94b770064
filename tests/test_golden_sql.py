"""Golden SQL: every hot statement, rendered per dialect, checked into tests/golden_sql/.

A change to a statement shows up in review as a change to these files. The
statements are found, not listed: every module-level ``Prepared`` and Core
statement (``Executable``) of the modules under ``lovia_store.sessions`` and
``lovia_store.checkpoints`` (and ``lovia_store.db.dialect``), plus the builders
that take a dialect (``BUILDERS``). Each file holds one family
(``family_of``), each statement under a comment naming it (``module:NAME``),
sorted by name; a statement its caller runs only where a capability allows
(``RUNS_WHERE``) is a comment elsewhere. A statement run as ``Prepared`` says so
(``(prepared)`` after its name), and every ``Prepared`` the package builds is
rendered here (``test_every_prepared_statement_is_rendered``). Compiled without literal binds: bind
names show (``:name``, the ``named`` paramstyle; the drivers' own placeholders
differ only in that), and values the statement itself holds (``limit(1)``,
``== "tool_result"``) follow on a ``-- values:`` line. Nothing connects to a
database (one test runs the insert-if-absent writes on SQLite).

After changing a statement on purpose::

    python tests/test_golden_sql.py --update
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy.dialects.mysql import asyncmy
from sqlalchemy.dialects.postgresql import asyncpg
from sqlalchemy.dialects.sqlite import pysqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Executable
from sqlalchemy.sql.functions import FunctionElement

from helpers import user
from lovia_store import SQLiteCheckpointer, SQLiteSession
from lovia_store.checkpoints import sql as checkpoints_sql
from lovia_store.checkpoints import sql_steps
from lovia_store.db import dialect as db_dialect
from lovia_store.db.dialect import Capabilities, capabilities
from lovia_store.db.prepared import Prepared
from lovia_store.db.tables import run_leases, session_runs, tool_effects
from lovia_store.sessions import log

GOLDEN = Path(__file__).resolve().parent / "golden_sql"
HINT = "python tests/test_golden_sql.py --update"
PACKAGES = ("lovia_store.sessions", "lovia_store.checkpoints")
MODULES = ("lovia_store.db.dialect", "lovia_store.db.contents")
MARIADB_VERSION = (10, 11, 19)  # the CI server's; only feature checks read it


def _sqlite() -> Dialect:
    return pysqlite.dialect(paramstyle="named")  # the driver lovia-store's SQLite executor uses


def _postgresql() -> Dialect:
    return asyncpg.dialect(paramstyle="named")  # type: ignore[no-untyped-call]  # bind casts


def _mariadb() -> Dialect:
    dialect = asyncmy.dialect(is_mariadb=True, paramstyle="named")
    # What a first connection to the server sets.
    dialect.server_version_info = MARIADB_VERSION
    dialect._initialize_mariadb(None)  # type: ignore[arg-type]
    return dialect


DIALECTS: dict[str, Callable[[], Dialect]] = {
    "sqlite": _sqlite,
    "postgresql": _postgresql,
    "mariadb": _mariadb,
}


def family_of(module: str) -> str:
    """The file (without ``.sql``) a module's statements go to."""
    name = module.removeprefix("lovia_store.")
    if name.startswith("sessions.raw_log"):
        return "raw_log"
    if name == "sessions.entry_rows":  # the multi-entry rows a rewind cuts
        return "sessions_rewind"
    if name == "checkpoints.sql_leases":
        return "leases"
    if name.startswith("checkpoints."):
        return "checkpoints"
    if name == "db.dialect":
        return "dialect"
    return name.replace(".", "_")


Runs = Callable[[Capabilities], bool]


def _always(_: Capabilities) -> bool:
    return True


def _one_statement(caps: Capabilities) -> bool:
    return caps.one_statement_writes


def _portable(caps: Capabilities) -> bool:
    return not caps.one_statement_writes


def _returning(caps: Capabilities) -> bool:
    return caps.returning


def _read_back(caps: Capabilities) -> bool:
    return not caps.returning


def _subquery_limits(caps: Capabilities) -> bool:
    return caps.subquery_limits


def _density_first(caps: Capabilities) -> bool:
    return not caps.subquery_limits


# Statements that run on some backends only, by the capability their caller checks
# (rendered elsewhere as a comment saying so). Each name must exist.
RUNS_WHERE: dict[str, Runs] = {
    "lovia_store.checkpoints.sql:_DELETE_DOCUMENTS_IN_ONE_STATEMENT": _one_statement,
    "lovia_store.checkpoints.sql:_DELETE_EFFECTS": _portable,
    "lovia_store.checkpoints.sql:_DELETE_ENTRIES": _portable,
    "lovia_store.checkpoints.sql:_REFERENCING_EFFECTS": _portable,
    "lovia_store.checkpoints.sql:_REFERENCING_ENTRIES": _portable,
    "lovia_store.checkpoints.sql_steps:_APPEND_IN_ONE_STATEMENT": _one_statement,
    "lovia_store.checkpoints.sql_steps:_APPEND_LINKING_IN_ONE_STATEMENT": _one_statement,
    "lovia_store.checkpoints.sql_steps:_INSERT_ENTRIES": _portable,
    "lovia_store.checkpoints.sql_leases:_EXPIRES": _read_back,
    "lovia_store.checkpoints.sql_leases:_RENEW": _returning,
    "lovia_store.checkpoints.sql_leases:_RENEW_NO_RETURNING": _read_back,
    "lovia_store.db.dialect:_insert_ignore(session_runs)": _portable,
    "lovia_store.sessions.log:_APPEND_IN_ONE_STATEMENT": _one_statement,
    "lovia_store.sessions.log:_APPEND_SHARING_IN_ONE_STATEMENT": _one_statement,
    "lovia_store.sessions.log:_BUMPED": _read_back,
    "lovia_store.sessions.log:_INSERT_MESSAGES": _portable,
    "lovia_store.sessions.raw_log.reads:_DENSITY": _density_first,
    "lovia_store.sessions.raw_log.reads:_OFFSET_PAGE": _subquery_limits,
    "lovia_store.sessions.trim:_TRIM": _portable,
    "lovia_store.sessions.trim:_TRIM_IN_ONE_STATEMENT": _one_statement,
}
_REASON: dict[Runs, str] = {
    _one_statement: "one_statement_writes",
    _portable: "not one_statement_writes",
    _returning: "returning",
    _read_back: "not returning",
    _subquery_limits: "subquery_limits",
    _density_first: "not subquery_limits",
}


@dataclass(frozen=True)
class Builder:
    """A statement built per dialect (by the name the code passes: ``conn.dialect.name``)."""

    module: str
    name: str
    build: Callable[[str], Any]
    prepared: Callable[[str], Prepared] | None = None
    """The builder that wraps the same statement in ``Prepared``, if another does."""


def _effect_columns() -> tuple[str, ...]:
    return tuple(checkpoints_sql._effect_row("tenant", "run", "call", "tool"))


# The insert-if-absent statements, with the columns each caller passes (in its order).
_LEASE_COLUMNS = ("tenant", "run_id", "token", "lease_id", "holder", "expires_ms")
_INSERT_IGNORED = {
    session_runs: log._RUN_COLUMNS,  # log.store_run's run row
    tool_effects: _effect_columns(),  # checkpoints.sql._effect_row
    run_leases: _LEASE_COLUMNS,  # checkpoints.sql_leases.acquire
}


def _insert_ignore_builder(table: Any, columns: tuple[str, ...]) -> Builder:
    return Builder(
        db_dialect.__name__,
        f"_insert_ignore({table.name.removeprefix('lovia_')})",
        lambda name: db_dialect._insert_ignore(name, table, columns),
    )


BUILDERS = (
    Builder(log.__name__, "bump_statement(dialect)", log.bump_statement, log._bump),
    Builder(
        sql_steps.__name__,
        "_upsert(dialect, links_session=False)",
        lambda name: sql_steps._upsert(name, False),
        lambda name: sql_steps._prepared_upsert(name, False),
    ),
    Builder(
        sql_steps.__name__,
        "_upsert(dialect, links_session=True)",
        lambda name: sql_steps._upsert(name, True),
        lambda name: sql_steps._prepared_upsert(name, True),
    ),
    *(_insert_ignore_builder(table, columns) for table, columns in _INSERT_IGNORED.items()),
)
# The prepared statements not rendered here, each with the reason.
UNRENDERED = {
    "lovia_store.db.sqlite_executor": "the SQLite executor's BEGIN, COMMIT and ROLLBACK",
}


def _modules() -> list[ModuleType]:
    found = [importlib.import_module(name) for name in MODULES]
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, package_name + "."):
            found.append(importlib.import_module(info.name))
    return sorted(found, key=lambda module: module.__name__)


def _is_statement(value: object) -> bool:
    if isinstance(value, Prepared):
        return True
    return (
        isinstance(value, Executable)
        and not isinstance(value, FunctionElement)  # an SQL function, not a statement
        and not isinstance(value, type)
    )


@cache
def discovered() -> dict[str, tuple[str, Any]]:
    """Every module-level statement: ``module:NAME`` -> (family, statement).

    A statement one module imports from another is kept under the module that
    built it (a ``Prepared`` knows its ``origin``), else under the name it was
    first found by (modules in name order)."""
    seen: set[int] = set()
    found: dict[str, tuple[str, Any]] = {}
    modules = _modules()
    names = {module.__name__ for module in modules}
    for module in modules:
        for name, value in sorted(_constants(module)):
            elsewhere = (
                isinstance(value, Prepared)
                and value.origin != module.__name__
                and value.origin in names
            )
            if _is_statement(value) and id(value) not in seen and not elsewhere:
                seen.add(id(value))
                found[f"{module.__name__}:{name}"] = (family_of(module.__name__), value)
    return found


def _constants(module: ModuleType) -> list[tuple[str, Any]]:
    """A module's values by name, and the statements a module-level dict holds
    (``_COPY_MESSAGES[True]``: one variant per key)."""
    found = []
    for name, value in vars(module).items():
        found.append((name, value))
        if isinstance(value, dict):
            found += [(f"{name}[{key!r}]", item) for key, item in value.items()]
    return found


def _sql(statement: Any, dialect: Dialect) -> str:
    if isinstance(statement, Prepared):
        statement = statement.statement
    compiled = statement.compile(dialect=dialect)
    text = "\n".join(line.rstrip() for line in str(compiled).strip().splitlines()) + ";"
    # Values the statement itself holds (``== "tool_result"``, ``limit(1)``), so a
    # change to one shows too.
    binds = {name: bind for bind, name in compiled.bind_names.items()}
    fixed = [
        f"{name}={binds[name].effective_value!r}"
        for name in sorted(binds)
        if not binds[name].required
    ]
    return text + (f"\n-- values: {', '.join(fixed)}" if fixed else "")


def render(dialect_key: str) -> dict[str, str]:
    """The golden files of one dialect: file name -> text."""
    dialect = DIALECTS[dialect_key]()
    caps = capabilities(dialect)
    statements: dict[str, tuple[str, Any]] = dict(discovered())
    for builder in BUILDERS:
        statements[f"{builder.module}:{builder.name}"] = (family_of(builder.module), builder)
    families: dict[str, list[str]] = {}
    for name in sorted(statements):
        family, statement = statements[name]
        runs = RUNS_WHERE.get(name, _always)
        if isinstance(statement, Builder):
            prepared = statement.prepared is not None
        else:
            prepared = isinstance(statement, Prepared)
        if not runs(caps):
            body = f"-- not run on {dialect_key} (runs where: {_REASON[runs]})"
        elif isinstance(statement, Builder):
            built = statement.build(dialect.name)
            prepared = prepared or isinstance(built, Prepared)
            body = _sql(built, dialect)
        else:
            body = _sql(statement, dialect)
        label = f"{name} (prepared)" if prepared else name
        families.setdefault(family, []).append(f"-- {label}\n{body}\n")
    header = (
        f"-- Golden SQL, {dialect_key}: rendered by tests/test_golden_sql.py, do not edit.\n"
        f"-- After changing a statement: {HINT}\n"
    )
    return {
        f"{family}.sql": header + "".join(f"\n{entry}" for entry in entries)
        for family, entries in sorted(families.items())
    }


def stored(dialect_key: str) -> dict[str, str]:
    folder = GOLDEN / dialect_key
    return {path.name: path.read_text() for path in sorted(folder.glob("*.sql"))}


def update() -> list[Path]:
    """Rewrite every golden file (stale ones removed); returns the files changed."""
    changed = []
    for dialect_key in DIALECTS:
        folder = GOLDEN / dialect_key
        folder.mkdir(parents=True, exist_ok=True)
        rendered = render(dialect_key)
        for name in stored(dialect_key).keys() - rendered.keys():
            (folder / name).unlink()
            changed.append(folder / name)
        for name, text in rendered.items():
            path = folder / name
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                changed.append(path)
    return changed


def _files() -> list[tuple[str, str]]:
    return sorted(
        (dialect_key, name)
        for dialect_key in DIALECTS
        for name in render(dialect_key).keys() | stored(dialect_key).keys()
    )


@pytest.mark.parametrize(("dialect_key", "name"), _files())
def test_golden_sql_is_current(dialect_key: str, name: str) -> None:
    expected = stored(dialect_key).get(name, "")
    actual = render(dialect_key).get(name, "")
    if actual != expected:
        path = f"tests/golden_sql/{dialect_key}/{name}"
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"{path} (stored)",
                tofile=f"{path} (rendered now)",
            )
        )
        message = f"the SQL of {path} changed; if that is intended, run {HINT}\n{diff}"
        pytest.fail(message, pytrace=False)


def test_every_family_and_dialect_has_statements() -> None:
    expected = {
        *("sessions_log", "sessions_reads", "sessions_trim", "sessions_rewind"),
        *("raw_log", "checkpoints", "leases", "dialect"),
    }
    for dialect_key in DIALECTS:
        rendered = render(dialect_key)
        assert {name.removesuffix(".sql") for name in rendered} >= expected
        for text in rendered.values():
            assert text.count("\n-- lovia_store.") >= 1


def test_the_hot_statements_are_found() -> None:
    names = set(discovered())
    assert {
        "lovia_store.sessions.log:_APPEND_IN_ONE_STATEMENT",
        "lovia_store.sessions.reads:LOAD",
        "lovia_store.sessions.rewind:_DELETE_TAIL",
        "lovia_store.sessions.trim:_TRIM",
        "lovia_store.sessions.raw_log.reads:_PAGE",
        "lovia_store.checkpoints.sql_steps:ENTRY_COUNT",
        "lovia_store.checkpoints.sql_leases:_RENEW",
    } <= names
    # Only statements: no table, SQL function or bound parameter.
    assert not any(name.endswith((":messages", ":SID", ":DOCUMENT")) for name in names)


def test_backend_restrictions_name_existing_statements() -> None:
    builders = {f"{builder.module}:{builder.name}" for builder in BUILDERS}
    assert set(RUNS_WHERE) <= set(discovered()) | builders
    # Each restricted statement runs somewhere, and is skipped somewhere.
    for name, runs in RUNS_WHERE.items():
        ran = {runs(capabilities(DIALECTS[key]())) for key in DIALECTS}
        assert ran == {True, False}, name


def test_the_prepared_builders_run_the_rendered_statements() -> None:
    for name in ("sqlite", "postgresql", "mysql"):
        assert log._bump(name).statement is log.bump_statement(name)
        for links_session in (False, True):
            upsert = sql_steps._prepared_upsert(name, links_session)
            assert upsert.statement is sql_steps._upsert(name, links_session)


def _package_modules() -> list[str]:
    """Every module of lovia_store but the migrations' (Alembic runs them; they build
    no ``Prepared``) and the command line's ``__main__`` (which runs it)."""
    import lovia_store

    return [
        info.name
        for info in pkgutil.walk_packages(lovia_store.__path__, "lovia_store.")
        if not info.name.startswith(
            ("lovia_store.migrations.env", "lovia_store.migrations.versions")
        )
        and not info.name.endswith(".__main__")
    ]


def test_every_prepared_statement_is_rendered() -> None:
    """Every ``Prepared`` the package builds (module constants, on import; per-dialect
    builders, called here for each dialect) passed ``Prepared``'s checks, and is in
    the golden files, marked as prepared, unless ``UNRENDERED`` says why not.

    In a fresh interpreter: other tests build statements at run time (an
    insert-if-absent per set of columns a caller passes), which ``built()`` would list."""
    completed = subprocess.run(
        [sys.executable, "-c", "import test_golden_sql as t; t.check_every_prepared_is_rendered()"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-5000:]


def check_every_prepared_is_rendered() -> None:
    for name in _package_modules():
        importlib.import_module(name)
    made: list[Prepared] = []
    # Connected to MariaDB, the dialect is named "mariadb": the same statements, under that name.
    for name in [*(DIALECTS[key]().name for key in DIALECTS), "mariadb"]:
        for builder in BUILDERS:
            built = builder.prepared(name) if builder.prepared else builder.build(name)
            made.append(built)
            assert isinstance(built, Prepared), builder.name
    from lovia_store.db.prepared import built

    ours = [prepared for prepared in built() if prepared.origin.startswith("lovia_store.")]
    rendered = {
        id(value.statement) for _, value in discovered().values() if isinstance(value, Prepared)
    }
    rendered |= {id(prepared.statement) for prepared in made}
    missing = [
        f"{prepared.origin}: {prepared.statement}"
        for prepared in ours
        if id(prepared.statement) not in rendered and prepared.origin not in UNRENDERED
    ]
    assert not missing, missing
    assert set(UNRENDERED) <= {prepared.origin for prepared in ours}
    assert len(ours) > 30  # the appends', rewinds', trims', reads' and checkpoints'
    labelled = "".join(render("sqlite").values()).count(" (prepared)\n")
    assert labelled == sum(isinstance(value, Prepared) for _, value in discovered().values()) + len(
        BUILDERS
    )


async def test_insert_ignore_is_rendered_with_the_columns_its_callers_pass(tmp_path: Path) -> None:
    """The writes that insert-if-absent, run on SQLite, hit exactly the cached
    statements rendered here (``_insert_ignore`` is cached by its columns), which
    a Database builds when it opens (``prepare_insert_ignore``): the writes build none."""
    session = SQLiteSession(tmp_path / "sessions.db")
    checkpointer = SQLiteCheckpointer(tmp_path / "runs.db")
    try:
        await session.database.ensure_schema()
        await checkpointer.database.ensure_schema()
        opened = db_dialect._insert_ignore.cache_info()
        await session.append("s", [user("hi")], run_id="r")
        await checkpointer.acquire_lease("run")
        await checkpointer.record_intent("run", "call", "tool")
    finally:
        await session.close()
        await checkpointer.close()
    written = db_dialect._insert_ignore.cache_info()
    assert written.misses == opened.misses and written.hits >= opened.hits + 3
    for table, columns in _INSERT_IGNORED.items():
        before = db_dialect._insert_ignore.cache_info()
        db_dialect._insert_ignore("sqlite", table, columns)
        after = db_dialect._insert_ignore.cache_info()
        assert (after.hits, after.misses) == (before.hits + 1, before.misses), table.name


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(f"usage: {HINT}")
    for path in update():
        print(f"rewrote {path.relative_to(GOLDEN.parent.parent)}")
