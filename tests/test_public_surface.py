"""``lovia_store``'s public surface: every name resolves, and importing the package is cheap.

``import lovia_store`` imports the errors and ``upgrade``/``check`` only; every other
name is imported on first use (PEP 562). A SQLite session's first append and
``lovia-store check`` load nothing they do not run (SQLAlchemy's ORM and asyncio
extension, the server dialects, Alembic, the checkpoint stores): what start-up costs
(bench/startup.py) is guarded here without timing anything. Each check runs in a fresh
interpreter, so what another test imported cannot hide an eager import.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lovia_store
import lovia_store.runs

INIT = Path(lovia_store.__file__)
ROOT = Path(__file__).resolve().parents[1]

DRIVERS_AND_FRAMEWORKS = ("asyncpg", "asyncmy", "psycopg", "aiosqlite", "lovia", "zett_agent")
"""Never imported by ``lovia_store``'s names: a server driver, or an optional framework."""

HEAVY = ("sqlalchemy", "alembic", "pydantic", "orjson")
"""Imported only when a name that needs them is first used."""


def _fresh(code: str) -> object:
    """What ``code`` prints as JSON, run by a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout)


def _loaded(roots: tuple[str, ...]) -> str:
    return f"sorted({{m.split('.')[0] for m in sys.modules}} & {set(roots)!r})"


def test_import_loads_no_driver_framework_or_engine() -> None:
    expr = _loaded(DRIVERS_AND_FRAMEWORKS + HEAVY)
    loaded = _fresh(f"import sys, json, lovia_store; print(json.dumps({expr}))")
    assert loaded == []


def test_every_public_name_resolves_without_a_driver_or_framework() -> None:
    code = (
        "import sys, json, lovia_store\n"
        "missing = [n for n in lovia_store.__all__ if getattr(lovia_store, n, None) is None]\n"
        "from lovia_store import *  # noqa\n"
        f"print(json.dumps({{'missing': missing, 'loaded': {_loaded(DRIVERS_AND_FRAMEWORKS)}}}))"
    )
    assert _fresh(code) == {"missing": [], "loaded": []}


def test_upgrade_stays_the_function_when_its_module_is_imported() -> None:
    code = (
        "import importlib, json, lovia_store.cli\n"
        "module = importlib.import_module('lovia_store.upgrade')\n"
        "import lovia_store\n"
        "print(json.dumps([lovia_store.upgrade is module.upgrade,"
        " lovia_store.check is module.check,"
        " lovia_store.UpgradeReport is module.UpgradeReport]))"
    )
    assert _fresh(code) == [True, True, True]


def _declared() -> tuple[dict[str, str], set[str], list[str]]:
    """From ``__init__.py``'s source: the ``TYPE_CHECKING`` imports (name: module),
    the eager imports, and ``__all__``."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    eager: set[str] = set()
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom)
                typed.update(
                    {alias.name: "." * item.level + (item.module or "") for alias in item.names}
                )
        elif isinstance(node, ast.ImportFrom) and node.level:
            bound = (alias.asname or alias.name for alias in node.names)
            eager.update(name for name in bound if not name.startswith("_"))
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__":
            exported = ast.literal_eval(node.value)
    return typed, eager, exported


def test_lazy_map_and_type_checking_imports_agree() -> None:
    """What mypy and IDEs see is what ``__getattr__`` imports, from the same module."""
    typed, eager, exported = _declared()
    assert typed == lovia_store._LAZY
    assert sorted(exported) == exported
    assert set(exported) == (eager | set(typed)) - {"__version__"}
    assert not eager & set(typed)
    assert set(exported) <= set(dir(lovia_store))


def test_every_error_class_is_exported() -> None:
    import lovia_store.errors as errors

    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, errors.LoviaStoreError)
        and not name.startswith("_")
    }
    assert classes == set(errors.__all__)
    assert classes <= set(lovia_store.__all__)
    for name in classes:
        assert getattr(lovia_store, name) is getattr(errors, name)
    # docs/databases.md says all derive from the root, and its table has a row for each.
    page = (ROOT / "docs" / "databases.md").read_text(encoding="utf-8")
    assert "derives from `LoviaStoreError`" in page
    rows = set(re.findall(r"^\| `(\w+)`", page, re.M))
    assert classes - {"LoviaStoreError"} <= rows, classes - rows


def test_the_run_loop_names_are_the_same_objects_in_both_homes() -> None:
    assert lovia_store.runs.__all__
    for name in lovia_store.runs.__all__:
        assert getattr(lovia_store, name) is getattr(lovia_store.runs, name), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        getattr(lovia_store, "NoSuchName")  # noqa: B009


NOT_FOR_A_SQLITE_SESSION = (
    "sqlalchemy.orm",  # lovia_store.models maps ORM classes for hosts; no store imports it
    "sqlalchemy.ext.asyncio",  # SQLite files run on a synchronous engine in worker threads
    "sqlalchemy.dialects.postgresql",  # a server's dialect: imported when one is opened
    "sqlalchemy.dialects.mysql",
    "alembic",  # a current or a new file is handled without it
    "lovia_store.models",
    "lovia_store.checkpoints",
    "lovia_store.runs",
)
"""Never imported by a process whose only use is a SQLite session (or ``check``)."""


def _loaded_of(prefixes: tuple[str, ...]) -> str:
    return (
        "sorted({m for m in sys.modules for p in "
        f"{prefixes!r} if m == p or m.startswith(p + '.')}})"
    )


_FIRST_APPEND = """
import asyncio, json, sys
from lovia_store import InputEntry, SQLiteSession

async def main() -> None:
    async with SQLiteSession(sys.argv[1]) as store:
        await store.append("u1", [InputEntry(role="user", content="hello")])
        assert len(await store.load("u1")) >= 1

asyncio.run(main())
print(json.dumps(%s))
"""


def test_a_first_sqlite_append_loads_no_orm_asyncio_extension_server_dialect_or_alembic(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.sqlite3"
    code = _FIRST_APPEND % _loaded_of(NOT_FOR_A_SQLITE_SESSION)
    for _ in ("a new file", "the same file, existing now"):
        assert json.loads(_child(code, path)) == []


def test_lovia_store_check_loads_no_session_store_orm_or_alembic(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    subprocess.run([sys.executable, "-c", _FIRST_APPEND % "[]", str(path)], check=True, timeout=120)
    heavy = (*NOT_FOR_A_SQLITE_SESSION, "lovia_store.sessions", "lovia_store.entries", "pydantic")
    code = (
        "import json, sys\n"
        "from lovia_store.cli import main\n"
        "code = main(['check', sys.argv[1]])\n"
        f"print(json.dumps([code, {_loaded_of(heavy)}]))\n"
    )
    assert json.loads(_child(code, path).splitlines()[-1]) == [0, []]


_APPEND_ONLY = """
import asyncio, json, sys
from lovia_store import InputEntry, SQLiteSession, entry_shapes

async def main() -> None:
    async with SQLiteSession(sys.argv[1]) as store:
        await store.append("u1", [InputEntry(role="user", content="hello")])

asyncio.run(main())
models = (*entry_shapes.ENTRY_CLASSES, entry_shapes.TextPart, entry_shapes.ImagePart,
          entry_shapes.FilePart, entry_shapes.Usage)
adapters = (entry_shapes._ENTRY, entry_shapes.ENTRY_LIST)
print(json.dumps([[m.__name__ for m in models if m.__pydantic_complete__],
                  [a.pydantic_complete for a in adapters]]))
"""


def test_a_first_append_builds_only_the_entry_model_it_stores(tmp_path: Path) -> None:
    """The entry models and adapters are built on first use (defer_build): appending
    one InputEntry, to a new file and to an existing one, builds that model only."""
    path = tmp_path / "store.sqlite3"
    for _ in ("a new file", "the same file, existing now"):
        assert json.loads(_child(_APPEND_ONLY, path)) == [["InputEntry"], [False, False]]


def _child(code: str, path: Path) -> str:
    """What a fresh interpreter running ``code`` on ``path`` printed."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_no_lazy_name_of_lovia_store_lifecycle_is_also_a_module_name() -> None:
    """Importing a submodule binds it on its package, over a lazy name it shares."""
    import pkgutil

    import lovia_store.lifecycle as lifecycle

    modules = {info.name for info in pkgutil.iter_modules(lifecycle.__path__)}
    assert not set(lifecycle._LAZY) & modules
    assert set(lifecycle._LAZY) == set(lifecycle.__all__)
