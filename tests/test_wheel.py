"""The built wheel works on its own: installed in a fresh venv, run away from the repo.

An editable install hides packaging mistakes (a migrations folder left out of the
wheel, a console script pointing nowhere, a module that only imports because
``src/`` is on the path). These tests build the wheel, install it with its
dependencies into a new virtual environment, and use it from a directory that
is not the repository.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from lovia_store.db.schema import head_revision

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Installed:
    """A venv with the wheel installed, and a working directory outside the repo."""

    venv: Path
    wheel: Path
    workdir: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def script(self) -> Path:
        return self.venv / "bin" / "lovia-store"

    def run(self, *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a command of the venv from the outside directory, with no repo paths leaking in."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LOVIA_STORE_URL", "PYTHONHOME")
        }
        return subprocess.run(
            [str(a) for a in args],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python_json(self, code: str, *args: str) -> object:
        """Run ``code`` with the venv's python; it prints one JSON document as its last line."""
        result = self.run(self.python, "-c", textwrap.dedent(code), *args)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.splitlines()[-1])


def _check(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once per module from the working tree."""
    dist = tmp_path_factory.mktemp("dist")
    _check(
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
    )
    (built,) = dist.glob("lovia_store-*.whl")
    return built


def install(root: Path, wheel: Path, *, interpreter: str = sys.executable) -> Installed:
    """A fresh venv of ``interpreter`` with ``wheel`` (and its dependencies) from the index."""
    venv = root / "venv"
    _check(
        subprocess.run(
            [interpreter, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300
        )
    )
    workdir = root / "elsewhere"
    workdir.mkdir()
    target = Installed(venv, wheel, workdir)
    _check(target.run(target.python, "-m", "pip", "install", "--quiet", wheel, timeout=900))
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Installed:
    """The wheel installed bare, as ``pip install lovia-store`` does: no extras."""
    return install(tmp_path_factory.mktemp("bare"), wheel)


@pytest.fixture(scope="module")
def bare_distributions(installed: Installed) -> set[str]:
    """What the bare install holds, read before any test adds an extra to it."""
    return distributions(installed)


@pytest.fixture(scope="module")
def with_postgres(installed: Installed, bare_distributions: set[str]) -> Installed:
    """The same venv after ``pip install 'lovia-store[postgres]'``, as a PostgreSQL service
    installs it (one venv per module keeps this file's runtime down; the tests of the bare
    install come first in the file and fail loudly if a driver is already there)."""
    requirement = f"{installed.wheel}[postgres]"
    _check(installed.run(installed.python, "-m", "pip", "install", "--quiet", requirement))
    return installed


def distributions(target: Installed) -> set[str]:
    """The distributions installed in ``target``'s venv, by normalized name."""
    listed = target.python_json(
        """
        import json
        from importlib.metadata import distributions
        print(json.dumps(sorted({d.metadata["Name"] for d in distributions()})))
        """
    )
    assert isinstance(listed, list)
    return {re.sub(r"[-_.]+", "-", str(name)).lower() for name in listed}


def test_imports_from_site_packages_with_migrations(installed: Installed) -> None:
    """The package and its Alembic scripts come from the venv's site-packages, not the repo."""
    found = installed.python_json(
        """
        import json, sysconfig
        from importlib.resources import files
        import lovia_store
        from lovia_store.db.schema import head_revision
        migrations = files("lovia_store") / "migrations"
        print(json.dumps({
            "package": lovia_store.__file__,
            "migrations": str(migrations),
            "versions": sorted(p.name for p in (migrations / "versions").iterdir()
                               if p.name.endswith(".py")),
            "template": (migrations / "script.py.mako").is_file(),
            "env": (migrations / "env.py").is_file(),
            "site": sysconfig.get_paths()["purelib"],
            "head": head_revision(),
        }))
        """
    )
    assert isinstance(found, dict)
    site = Path(found["site"]).resolve()
    assert site.is_relative_to(installed.venv.resolve())
    assert Path(found["package"]).resolve().is_relative_to(site / "lovia_store")
    assert Path(found["migrations"]).resolve() == site / "lovia_store" / "migrations"
    assert found["versions"] == sorted(
        p.name for p in (REPO / "src/lovia_store/migrations/versions").glob("*.py")
    )
    assert found["template"] and found["env"]
    assert found["head"] == head_revision()
    assert not Path(found["package"]).resolve().is_relative_to(REPO)


def test_console_script_upgrade_then_check(installed: Installed) -> None:
    """``lovia-store upgrade FILE`` then ``lovia-store check FILE`` from the installed script."""
    path = installed.workdir / "cli.sqlite3"
    upgraded = _check(installed.run(installed.script, "upgrade", path))
    assert "upgraded from revision none (no lovia-store schema yet)" in upgraded.stdout
    assert path.is_file()
    checked = _check(installed.run(installed.script, "check", path))
    assert checked.stdout == "schema is current\n"


def test_console_script_adopts_a_legacy_file(
    installed: Installed, legacy_copy: Callable[[str], Path]
) -> None:
    """The shipped migration adopts lovia 0.9 files too (its data copy is in the wheel)."""
    path = legacy_copy("lovia-0.9.119.sqlite3")
    _check(installed.run(installed.script, "upgrade", path))
    listed = _check(installed.run(installed.script, "sessions", path)).stdout.splitlines()
    rows = {line.split()[0]: line.split()[1:3] for line in listed[2:]}
    assert rows == {"alice": ["4", "31"], "bob": ["1", "2"]}


def test_append_and_read_back_from_code(installed: Installed) -> None:
    """The library API from the installed package: a SQLiteSession round trip."""
    path = installed.workdir / "code.sqlite3"
    found = installed.python_json(
        """
        import asyncio, json, sys
        from lovia_store import SQLiteSession, InputEntry, AssistantTextEntry, entry_to_dict

        async def main():
            async with SQLiteSession(sys.argv[1], wal=True) as store:
                await store.append("s", [InputEntry(role="user", content="hi"),
                                         AssistantTextEntry(content="hello")],
                                   run_id="r1", meta={"k": 1})
            async with SQLiteSession(sys.argv[1]) as store:
                segments = await store.segments("s")
                return [[s.run_id, [entry_to_dict(e) for e in s.entries], s.meta]
                        for s in segments]

        print(json.dumps(asyncio.run(main())))
        """,
        str(path),
    )
    assert isinstance(found, list)
    assert len(found) == 1
    run_id, entries, meta = found[0]
    assert (run_id, meta) == ("r1", {"k": 1})
    assert [(e["type"], e["content"]) for e in entries] == [
        ("input", "hi"),
        ("assistant_text", "hello"),
    ]


# -- the core install and the drivers' extras ---------------------------------------------------

CORE = {"sqlalchemy", "greenlet", "alembic", "pydantic", "aiosqlite", "orjson", "click", "rich"}
DRIVERS = {"asyncpg", "psycopg", "psycopg-binary", "asyncmy"}


def test_the_bare_install_carries_no_server_driver(
    installed: Installed, bare_distributions: set[str], wheel: Path
) -> None:
    """``pip install lovia-store``: what SQLite needs and no server driver; each driver is
    an extra."""
    assert CORE | {"lovia-store"} <= bare_distributions
    assert not bare_distributions & DRIVERS, bare_distributions & DRIVERS
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    requires = metadata.get_all("Requires-Dist") or []
    for driver, extra in (
        ("asyncpg", "postgres"),
        ("psycopg[binary]", "psycopg"),
        ("asyncmy", "mysql"),
    ):
        assert any(
            r.startswith(driver) and f"extra == '{extra}'" in r.replace('"', "'") for r in requires
        ), (driver, requires)
        assert not any(r.startswith(driver) and "extra ==" not in r for r in requires), driver
    assert set(metadata.get_all("Provides-Extra") or []) >= {"postgres", "psycopg", "mysql"}


def test_the_bare_install_runs_the_demo(installed: Installed) -> None:
    """The README's first command, on the core install alone."""
    done = _check(installed.run(installed.script, "demo", timeout=180))
    assert "replayed=True, model calls=0, same output: True" in done.stdout


def test_a_server_url_without_its_driver_names_the_extra(installed: Installed) -> None:
    """The bare install refuses a server URL with ``MissingDriverError`` naming our extra."""
    urls = {
        "postgresql://u@127.0.0.1:1/db": "postgres",
        "postgresql+asyncpg://u@127.0.0.1:1/db": "postgres",
        "postgresql+psycopg://u@127.0.0.1:1/db": "psycopg",
        "mysql://u@127.0.0.1:1/db": "mysql",
    }
    found = installed.python_json(
        """
        import asyncio, json, sys
        from lovia_store import Database, MissingDriverError, SQLSession

        async def attempt(url):
            try:
                async with SQLSession(url) as store:
                    await store.load("s")
            except MissingDriverError as exc:
                return [type(exc).__name__, isinstance(exc, ImportError), str(exc)]
            return ["no error"]

        print(json.dumps([asyncio.run(attempt(url)) for url in sys.argv[1:]]))
        """,
        *urls,
    )
    assert isinstance(found, list)
    for (url, extra), (kind, is_import_error, message) in zip(urls.items(), found, strict=True):
        assert (kind, is_import_error) == ("MissingDriverError", True), url
        assert f"pip install 'lovia-store[{extra}]'" in message, (url, message)
    refused = installed.run(installed.script, "check", "postgresql://u@127.0.0.1:1/db")
    assert refused.returncode == 3
    assert "pip install 'lovia-store[postgres]'" in refused.stderr


# -- last: these add the [postgres] extra to the module's venv ----------------------------------


@pytest.mark.postgres
def test_upgrade_from_code_on_postgres(
    with_postgres: Installed, bare_distributions: set[str], pg_url: str
) -> None:
    """With ``[postgres]``, which adds asyncpg and nothing else: ``lovia_store.upgrade(url)``
    on a fresh PostgreSQL database, then ``check`` passes."""
    assert distributions(with_postgres) - bare_distributions == {"asyncpg"}
    found = with_postgres.python_json(
        """
        import asyncio, json, sys
        import lovia_store
        from lovia_store import SchemaNotCurrentError

        async def main():
            try:
                await lovia_store.check(sys.argv[1])
            except SchemaNotCurrentError:
                before = "not current"
            else:
                before = "current"
            await lovia_store.upgrade(sys.argv[1])
            await lovia_store.check(sys.argv[1])
            return before

        print(json.dumps(asyncio.run(main())))
        """,
        pg_url,
    )
    assert found == "not current"
    _check(with_postgres.run(with_postgres.script, "check", pg_url))
