"""The built wheel works on its own: installed in a fresh venv, run away from the repo.

An editable install hides packaging mistakes (a migrations folder left out of the
wheel, a console script pointing nowhere, a module that only imports because
``src/`` is on the path). These tests build the wheel, install it with its
dependencies into a new virtual environment, and use it from a directory that
is not the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
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
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Build the wheel and install it (with dependencies from the index) once per module."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    _check(
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
    )
    (wheel,) = dist.glob("lovia_store-*.whl")
    venv = root / "venv"
    _check(
        subprocess.run(
            [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300
        )
    )
    workdir = root / "elsewhere"
    workdir.mkdir()
    target = Installed(venv, wheel, workdir)
    _check(target.run(target.python, "-m", "pip", "install", "--quiet", wheel, timeout=900))
    return target


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


@pytest.mark.postgres
def test_upgrade_from_code_on_postgres(installed: Installed, pg_url: str) -> None:
    """``lovia_store.upgrade(url)`` on a fresh PostgreSQL database, then ``check`` passes."""
    found = installed.python_json(
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
    _check(installed.run(installed.script, "check", pg_url))
