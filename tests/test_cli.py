"""The ``lovia-store`` command line, and the ``alembic`` command line over our migrations.

Most tests call ``lovia_store.cli.main`` in-process (it is synchronous and runs
its own loop, so these tests are plain sync functions); a few run real
processes where the exit status, the working directory or the environment is
the point.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from backends import LOVIA_MANIFEST
from helpers import a_run
from lovia_store import SQLSession, check, upgrade
from lovia_store.cli import DEFAULT_FILE, main
from lovia_store.db.schema import head_revision

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MANIFEST = LOVIA_MANIFEST

Capsys = pytest.CaptureFixture[str]
HEAD = head_revision()


def cli(capsys: Capsys, *args: str) -> tuple[int, str, str]:
    """Run ``lovia-store ARGS`` in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without LOVIA_STORE_URL (so a stray one cannot leak in), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "LOVIA_STORE_URL"}
    return {**env, **extra}


def run(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=120
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def set_session_version(path: Path, version: int) -> None:
    """Pretend a newer lovia-store wrote this file."""
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE lovia_schema SET version=? WHERE store='session'", (version,))
    conn.close()


def session_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        (version,) = conn.execute(
            "SELECT version FROM lovia_schema WHERE store='session'"
        ).fetchone()
        return int(version)
    finally:
        conn.close()


@pytest.fixture
def legacy(legacy_copy: Callable[[str], Path]) -> Path:
    """A writable copy of the lovia 0.9 file (sessions alice, bob, empty-after-clear)."""
    return legacy_copy("lovia-0.9.119.sqlite3")


@pytest.fixture
def upgraded(legacy: Path) -> Path:
    """The lovia 0.9 file after ``upgrade``: what ``sessions`` and ``show`` read."""
    asyncio.run(upgrade(str(legacy)))
    return legacy


def test_looking_at_an_old_file_does_not_convert_it(
    legacy_copy: Callable[[str], Path], capsys: Capsys
) -> None:
    """``sessions`` and ``show`` are read-only: an old file is reported, not migrated."""
    path = legacy_copy("lovia-0.9.119.sqlite3")
    before = digest(path)
    for command in (["sessions"], ["show", "alice"]):
        code, _, err = cli(capsys, *command, str(path))
        assert code == 1 and "lovia-store upgrade" in err
    assert digest(path) == before


# -- upgrade and check -------------------------------------------------------------------------


def test_upgrade_creates_a_current_database(tmp_path: Path, capsys: Capsys) -> None:
    """``upgrade`` makes the file (and its folder) from nothing; running it again is a no-op."""
    path = tmp_path / "new" / "store.sqlite3"
    code, out, _ = cli(capsys, "upgrade", str(path))
    assert code == 0 and path.is_file()
    url = f"sqlite+aiosqlite:///{path}"
    assert out == f"{url}: upgraded from revision none (no lovia-store schema yet) to {HEAD}\n"
    assert cli(capsys, "check", str(path))[:2] == (0, "schema is current\n")
    code, out, _ = cli(capsys, "upgrade", str(path))
    assert code == 0
    assert out == f"{url}: schema is current (revision {HEAD}), no change\n"
    asyncio.run(check(str(path)))


def test_check_refuses_an_empty_database(tmp_path: Path, capsys: Capsys) -> None:
    """An empty SQLite file is not current, and the message says what to run."""
    path = tmp_path / "empty.sqlite3"
    sqlite3.connect(path).close()
    code, out, err = cli(capsys, "check", str(path))
    assert code == 1 and out == ""
    assert err.startswith("lovia-store: ")
    assert "schema revision is empty" in err and "run `lovia-store upgrade`" in err


def test_check_refuses_a_legacy_file_untouched_then_passes_after_upgrade(
    legacy: Path, capsys: Capsys
) -> None:
    """A lovia 0.9 file needs an upgrade; ``check`` says so without writing a byte."""
    before = digest(legacy)
    code, _, err = cli(capsys, "check", str(legacy))
    assert code == 1
    assert "run `lovia-store upgrade`" in err
    assert digest(legacy) == before
    assert cli(capsys, "upgrade", str(legacy))[0] == 0
    assert cli(capsys, "check", str(legacy))[0] == 0


def test_check_and_upgrade_refuse_a_newer_schema(tmp_path: Path, capsys: Capsys) -> None:
    """A lovia_schema version beyond ours means "upgrade lovia" (exit 4), nothing written."""
    path = tmp_path / "store.sqlite3"
    assert cli(capsys, "upgrade", str(path))[0] == 0
    set_session_version(path, 99)
    before = digest(path)
    for command in ("check", "upgrade"):
        code, _, err = cli(capsys, command, str(path))
        assert code == 4, command
        assert "upgrade lovia" in err and "version 99" in err, err
    assert digest(path) == before
    assert session_version(path) == 99


def test_check_of_a_missing_file_creates_nothing(tmp_path: Path, capsys: Capsys) -> None:
    """``check`` is the read-only probe of deployments: a typo in the path must not leave files."""
    code, _, err = cli(capsys, "check", str(tmp_path / "store.sqlite3"))
    assert code == 1 and "no such file (is the path right?)" in err
    assert "`lovia-store upgrade` creates" in err  # what would create it, named as such
    code, _, err = cli(capsys, "check", str(tmp_path / "no" / "such" / "store.sqlite3"))
    assert code == 2 and "does not exist" in err  # a mistyped folder is a usage error
    assert list(tmp_path.iterdir()) == []


# -- reading -----------------------------------------------------------------------------------


def test_sessions_lists_runs_and_entries(upgraded: Path, capsys: Capsys) -> None:
    """``sessions`` on the lovia file: one row per session that has runs, with both counts."""
    code, out, _ = cli(capsys, "sessions", str(upgraded))
    assert code == 0
    header, rule, *rows = out.splitlines()
    assert header.split() == ["session", "runs", "entries", "last", "activity", "(UTC)"]
    assert set(rule) == {"─"}
    counts = {row.split()[0]: (int(row.split()[1]), int(row.split()[2])) for row in rows}
    assert counts == {"alice": (4, 31), "bob": (1, 2)}


def test_sessions_on_an_empty_store(tmp_path: Path, capsys: Capsys) -> None:
    path = tmp_path / "store.sqlite3"
    assert cli(capsys, "upgrade", str(path))[0] == 0
    code, out, _ = cli(capsys, "sessions", str(path))
    assert code == 0 and out.startswith("no sessions in sqlite+aiosqlite:///")


def test_show_prints_every_entry_readably(upgraded: Path, capsys: Capsys) -> None:
    """``show alice``: a header per run, one line per entry, tool names and user text visible."""
    code, out, _ = cli(capsys, "show", "alice", str(upgraded))
    assert code == 0
    lines = out.splitlines()
    stripped = [line.strip() for line in lines]
    headers = [line for line in lines if line.startswith("── run ")]
    assert [h.split()[3] for h in headers] == [
        run["run_id"] for run in MANIFEST.session("alice")["runs"]
    ]
    assert headers[0].startswith("── run 1: run-alice-0001")
    entries = [e for run in MANIFEST.session("alice")["runs"] for e in run["entries"]]
    assert len(lines) - len(headers) == len(entries) == 31
    for entry in entries:
        if entry["type"] == "tool_call":
            assert any(f"tool> {entry['name']}(" in line for line in lines), entry["name"]
        if (
            entry["type"] == "input"
            and entry["role"] == "user"
            and isinstance(entry["content"], str)
        ):
            assert f"user: {entry['content']}" in stripped
    assert any(line.endswith("(error)  [call_read_404]") for line in lines)


def test_show_unknown_session_exits_1(upgraded: Path, capsys: Capsys) -> None:
    code, out, _ = cli(capsys, "show", "nobody", str(upgraded))
    assert code == 1
    assert out.startswith("no session 'nobody' in ")


def test_cli_reads_postgres(pg_url: str, capsys: Capsys) -> None:
    """The same commands on a server URL: upgrade, check, then list what a store wrote."""
    assert cli(capsys, "upgrade", pg_url)[0] == 0
    assert cli(capsys, "check", pg_url)[0] == 0

    async def write() -> None:
        async with SQLSession(pg_url) as store:
            await store.append("carol", a_run("1"), run_id="r1")
            await store.append("carol", a_run("2"), run_id="r2")

    asyncio.run(write())
    code, out, _ = cli(capsys, "sessions", pg_url)
    assert code == 0
    assert out.splitlines()[2].split()[:3] == ["carol", "2", "8"]
    code, out, _ = cli(capsys, "show", "carol", pg_url)
    assert code == 0
    assert "tool> lookup({})  [c-2]" in [line.strip() for line in out.splitlines()]


# -- defaults, help, and real processes --------------------------------------------------------


def test_without_a_url_the_file_lands_in_the_working_directory(tmp_path: Path) -> None:
    """No URL and no $LOVIA_STORE_URL: ./lovia-store.sqlite3 in the process's cwd."""
    result = run([sys.executable, "-m", "lovia_store.cli", "upgrade"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / DEFAULT_FILE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [DEFAULT_FILE]
    result = run([sys.executable, "-m", "lovia_store.cli", "check"], cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "schema is current\n")


def test_lovia_store_url_is_the_default_when_set(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.sqlite3"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = clean_env(LOVIA_STORE_URL=f"sqlite+aiosqlite:///{target}")
    result = run([str(BIN / "lovia-store"), "upgrade"], cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    assert target.is_file() and not (cwd / DEFAULT_FILE).exists()


def test_help_mentions_the_default_file(capsys: Capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert DEFAULT_FILE == "lovia-store.sqlite3"
    assert f"./{DEFAULT_FILE}" in out and "$LOVIA_STORE_URL" in out


def test_console_script_exit_codes(legacy: Path, tmp_path: Path) -> None:
    """The installed ``lovia-store`` script: 1 with a message on stderr, then 0."""
    script = str(BIN / "lovia-store")
    result = run([script, "check", str(legacy)], cwd=tmp_path)
    assert result.returncode == 1 and "lovia-store upgrade" in result.stderr
    assert run([script, "upgrade", str(legacy)], cwd=tmp_path).returncode == 0
    assert run([script, "check", str(legacy)], cwd=tmp_path).returncode == 0
    result = run([script, "bogus"], cwd=tmp_path)
    assert result.returncode == 2 and "No such command 'bogus'" in result.stderr


_INTERRUPT_WHILE_LOADING = """
import sys
class Interrupt:  # Ctrl-C arriving while SQLAlchemy and the commands load
    def find_spec(self, name, path=None, target=None):
        if name == "lovia_store.cli.app":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
from lovia_store._console import main
raise SystemExit(main())
"""


def test_ctrl_c_while_the_command_line_loads_ends_it_quietly(tmp_path: Path) -> None:
    """The console script's entry loads the command line itself: an interrupt during
    the imports is the interrupted exit (130), one line, no traceback."""
    result = run([sys.executable, "-c", _INTERRUPT_WHILE_LOADING, "check"], cwd=tmp_path)
    assert (result.returncode, result.stderr) == (130, "lovia-store: interrupted\n")
    script = (BIN / "lovia-store").read_text()
    assert "from lovia_store._console import main" in script  # what pyproject installs


# -- the alembic command line ------------------------------------------------------------------


def alembic(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run([str(BIN / "alembic"), "-c", str(REPO / "alembic.ini"), *args], cwd=REPO, env=env)


@pytest.mark.parametrize("start", ["fresh", "legacy"])
def test_alembic_x_url_upgrades_sqlite(
    start: str, tmp_path: Path, legacy: Path, capsys: Capsys
) -> None:
    """``alembic -x url=... upgrade head`` leaves a database ``lovia-store check`` accepts."""
    path = legacy if start == "legacy" else tmp_path / "fresh.sqlite3"
    result = alembic("-x", f"url=sqlite+aiosqlite:///{path}", "upgrade", "head")
    assert result.returncode == 0, result.stderr
    assert cli(capsys, "check", str(path))[0] == 0
    if start == "legacy":  # the lovia sessions were adopted, not dropped
        rows = cli(capsys, "sessions", str(path))[1].splitlines()[2:]
        assert ["alice", "4", "31"] in [row.split()[:3] for row in rows]


def test_alembic_refuses_a_newer_schema(tmp_path: Path, capsys: Capsys) -> None:
    """The alembic path has the same "written by a newer version" gate as first use."""
    path = tmp_path / "store.sqlite3"
    assert cli(capsys, "upgrade", str(path))[0] == 0
    set_session_version(path, 99)
    result = alembic("-x", f"url=sqlite+aiosqlite:///{path}", "upgrade", "head")
    assert result.returncode != 0
    assert "upgrade lovia" in result.stderr
    assert session_version(path) == 99


def test_alembic_reads_lovia_store_url_for_postgres(pg_url: str, capsys: Capsys) -> None:
    """``LOVIA_STORE_URL=<pg> alembic -c alembic.ini upgrade head`` on a fresh database."""
    result = alembic("upgrade", "head", env=clean_env(LOVIA_STORE_URL=pg_url))
    assert result.returncode == 0, result.stderr
    assert cli(capsys, "check", pg_url)[0] == 0


def test_alembic_without_a_url_says_how_to_give_one() -> None:
    result = alembic("upgrade", "head")
    assert result.returncode != 0
    assert "no database URL: pass -x url=... or set LOVIA_STORE_URL" in result.stderr


def test_the_command_alembic_ini_documents_works(tmp_path: Path) -> None:
    """The example in alembic.ini's header, run as written (only the URL swapped)."""
    line = next(
        line
        for line in (REPO / "alembic.ini").read_text().splitlines()
        if "alembic -c alembic.ini" in line and "-x url=" in line
    )
    words = line.lstrip("# ").split()
    assert words[:3] == ["alembic", "-c", "alembic.ini"]
    url = f"url=sqlite+aiosqlite:///{tmp_path / 'doc.sqlite3'}"
    result = alembic(*(url if w.startswith("url=") else w for w in words[3:]))
    assert result.returncode == 0, result.stderr
