"""The built wheel works on its own: installed in a fresh venv, run away from the repo.

An editable install hides packaging mistakes (a migrations folder left out of the
wheel, a console script pointing nowhere, a module that only imports because
``src/`` is on the path). These tests build the wheel, install it with its
dependencies into a new virtual environment, and use it from a directory that
is not the repository.
"""

from __future__ import annotations

import email.message
import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
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
    """The wheel, built once per module as a release builds it: the working tree's sdist,
    then the wheel from that sdist (beside it in the same folder)."""
    dist = tmp_path_factory.mktemp("dist")
    _check(
        subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)],
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
            [interpreter, "-m", "venv", "--without-pip", str(venv)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    )
    workdir = root / "elsewhere"
    workdir.mkdir()
    target = Installed(venv, wheel, workdir)
    pip_install(target, str(wheel))
    return target


def pip_install(target: Installed, requirement: str) -> None:
    """Our own pip installs into ``target`` (``--python``): no pip is bootstrapped into every
    venv, which keeps this module's runtime down."""
    _check(
        target.run(
            sys.executable,
            "-m",
            "pip",
            "--python",
            target.python,
            "install",
            "--quiet",
            requirement,
            timeout=900,
        )
    )


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
    pip_install(installed, f"{installed.wheel}[postgres]")
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


# -- packaging: license, classifiers, version, the package index's README ---------------------

# Each Python the classifiers claim: the running one, and the others this wheel is installed on.
CLAIMED_PYTHONS = ("3.11", "3.12", "3.13")
RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|#|mailto:)([^)\s]+)\)")


def wheel_metadata(wheel: Path) -> tuple[email.message.Message, dict[str, bytes]]:
    """The wheel's METADATA, and its .dist-info files by name."""
    with zipfile.ZipFile(wheel) as archive:
        info = {
            n.split(".dist-info/", 1)[1]: archive.read(n)
            for n in archive.namelist()
            if ".dist-info/" in n
        }
    return email.parser.Parser().parsestr(info["METADATA"].decode()), info


def test_the_wheel_carries_its_license_classifiers_and_version(wheel: Path) -> None:
    metadata, info = wheel_metadata(wheel)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert metadata["Version"] == project["version"]
    assert metadata["License-Expression"] == "MIT" and metadata["License-File"] == "LICENSE"
    license_text = info["licenses/LICENSE"].decode()
    assert license_text == (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n\nCopyright (c) 2026 the lovia-store authors\n")
    classifiers = metadata.get_all("Classifier") or []
    claimed = {c.rsplit(" :: ", 1)[1] for c in classifiers if re.search(r":: 3\.\d+$", c)}
    assert claimed == set(CLAIMED_PYTHONS)
    assert metadata["Requires-Python"] == f">={min(CLAIMED_PYTHONS)}"
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in CLAIMED_PYTHONS
    with zipfile.ZipFile(wheel) as archive:  # "Typing :: Typed" holds: the marker ships
        assert "Typing :: Typed" in classifiers and "lovia_store/py.typed" in archive.namelist()


def test_the_sdist_holds_the_source_the_docs_and_the_license(wheel: Path) -> None:
    """What the closing note of the index's README promises, and what a wheel needs."""
    (sdist,) = wheel.parent.glob("lovia_store-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    tracked = subprocess.run(
        ["git", "ls-files", "docs", "examples", "src/lovia_store/migrations"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {"LICENSE", "README.md", "pyproject.toml", *tracked} <= names
    assert not {n for n in names if n.startswith(("bench/", ".ci/", "migrations/"))}


def test_the_package_index_readme_has_no_dead_links(wheel: Path) -> None:
    """On the index page a relative link leads nowhere: each shows its path instead."""
    metadata, _ = wheel_metadata(wheel)
    assert metadata["Description-Content-Type"] == "text/markdown"
    description = metadata.get_payload()
    assert isinstance(description, str)
    readme = (REPO / "README.md").read_text()
    links = RELATIVE_LINK.findall(readme)
    assert len(links) >= 10  # the Documentation list, at least
    assert RELATIVE_LINK.findall(description) == []
    for _, target in links:
        assert f"`{target}`" in description, target
    assert "ship in this release's source distribution" in description
    # The rest is the README itself, word for word.
    as_paths = RELATIVE_LINK.sub(
        lambda m: f"`{m[2]}`" if m[1] == m[2] else f"{m[1]} (`{m[2]}`)", readme
    )
    assert description.startswith(as_paths)


def test_the_installed_version(installed: Installed) -> None:
    expected = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    found = installed.python_json(
        "import json, lovia_store; print(json.dumps(lovia_store.__version__))"
    )
    assert found == expected
    done = _check(installed.run(installed.script, "--version"))
    assert done.stdout == f"lovia-store {expected}\n"


def interpreter(version: str) -> str | None:
    """A working ``python<version>``: on the PATH, or one pyenv installed."""
    candidates = [shutil.which(f"python{version}")]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python{version}"))]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


OTHER_PYTHONS = [v for v in CLAIMED_PYTHONS if v != f"{sys.version_info[0]}.{sys.version_info[1]}"]


@pytest.mark.parametrize("version", OTHER_PYTHONS)
def test_the_wheel_runs_on_each_claimed_python(
    version: str, wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A classifier is a claim: the bare wheel (the module's one build) installs on that
    Python and runs the demo. CI (``LOVIA_TEST_REQUIRE_SERVERS=1``) has every claimed
    Python: there a missing one fails, as a missing server does; elsewhere it skips."""
    python = interpreter(version)
    if python is None:
        missing = f"no Python {version} on this machine to test the classifier's claim with"
        if os.environ.get("LOVIA_TEST_REQUIRE_SERVERS") == "1":
            pytest.fail(f"{missing} (LOVIA_TEST_REQUIRE_SERVERS=1: CI tests every claim)")
        pytest.skip(missing)
    target = install(tmp_path_factory.mktemp(f"python{version}"), wheel, interpreter=python)
    found = target.python_json(
        "import json, sys, lovia_store; "
        "print(json.dumps(['%d.%d' % sys.version_info[:2], lovia_store.__version__]))"
    )
    assert isinstance(found, list) and found[0] == version
    done = _check(target.run(target.script, "demo", timeout=180))
    assert "replayed=True, model calls=0, same output: True" in done.stdout


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
