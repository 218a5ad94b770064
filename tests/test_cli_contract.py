"""What scripts and deploy probes rely on: exit codes, ``--json``, paging, ``--version``,
and docs/cli.md naming every command, option and exit code the command line has.

The exit codes are checked through the installed console script, as a probe runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import click
import pytest

from helpers import a_run, user
from lovia_store import SQLiteSession, __version__
from lovia_store.cli import EXIT_CODES, main
from lovia_store.cli.app import cli as command_group
from lovia_store.db.schema import head_revision

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("lovia-store")
HEAD = head_revision()
Capsys = pytest.CaptureFixture[str]


def lovia_store(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LOVIA_STORE_URL"}
    return subprocess.run(
        [str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def cli(capsys: Capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def newer_file(path: Path) -> Path:
    """A current file that then claims a newer lovia-store wrote it."""
    assert main(["upgrade", str(path)]) == 0
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE lovia_schema SET version=99 WHERE store='session'")
    conn.close()
    return path


def test_exit_codes_tell_a_probe_what_is_wrong(
    tmp_path: Path, legacy_copy: Callable[[str], Path]
) -> None:
    """0 current, 1 needs upgrade, 2 usage, 3 unreachable or not a database, 4 newer."""
    current = tmp_path / "current.sqlite3"
    assert main(["upgrade", str(current)]) == 0
    (tmp_path / "garbage.sqlite3").write_bytes(b"not a database, " * 512)
    cases = {
        "current": (["check", str(current)], 0),
        "lovia 0.9 file": (["check", str(legacy_copy("lovia-0.9.119.sqlite3"))], 1),
        "empty folder's new file": (["check", str(tmp_path / "new.sqlite3")], 1),
        "unknown option": (["check", "--nope", str(current)], 2),
        "negative limit": (["sessions", "--limit", "-1", str(current)], 2),
        "not a database": (["check", str(tmp_path / "garbage.sqlite3")], 3),
        "refused port (asyncpg)": (["check", "postgresql://u@127.0.0.1:1/test"], 3),
        "refused port (MySQL)": (["check", "mysql+asyncmy://root@127.0.0.1:1/test"], 3),
        "refused port (psycopg)": (["check", "postgresql+psycopg://u@127.0.0.1:1/test"], 3),
        "driver not installed": (["check", "mysql+aiomysql://root@127.0.0.1:1/test"], 3),
        "newer schema": (["check", str(newer_file(tmp_path / "newer.sqlite3"))], 4),
        "upgrade of a newer schema": (["upgrade", str(tmp_path / "newer.sqlite3")], 4),
    }
    for name, (args, expected) in cases.items():
        done = lovia_store(*args, cwd=tmp_path)
        assert done.returncode == expected, f"{name}: {done.stderr}"
        if expected:
            assert done.stderr.strip() and "Traceback" not in done.stderr, name


def test_check_json_says_the_status(tmp_path: Path, capsys: Capsys) -> None:
    """``check --json``: one document on stdout in every outcome, its status named."""
    path = tmp_path / "store.sqlite3"
    code, out, err = cli(capsys, "check", "--json", str(path))
    assert code == 1 and "lovia-store upgrade" in err
    document = json.loads(out)
    assert document["status"] == EXIT_CODES[1] == "needs_upgrade"
    assert (document["error"], document["found"], document["expected"]) == (
        "SchemaNotCurrentError",
        None,
        HEAD,
    )
    assert cli(capsys, "upgrade", str(path))[0] == 0
    code, out, _ = cli(capsys, "check", "--json", str(path))
    assert code == 0
    assert json.loads(out) == {
        "status": "current",
        "database": f"sqlite+aiosqlite:///{path}",
        "revision": HEAD,
    }
    code, out, _ = cli(capsys, "check", "--json", str(newer_file(path)))
    assert code == 4
    assert json.loads(out)["status"] == "newer_schema" and json.loads(out)["found"] == 99


def test_upgrade_json_reports_the_conversion(
    legacy_copy: Callable[[str], Path], capsys: Capsys
) -> None:
    path = legacy_copy("lovia-0.9.119.sqlite3")
    code, out, _ = cli(capsys, "upgrade", "--json", str(path))
    assert code == 0
    report = json.loads(out)
    assert (report["status"], report["changed"], report["from_revision"]) == ("ok", True, None)
    assert report["to_revision"] == HEAD
    assert report["converted"] == {
        "lovia 0.9": ["session_runs", "snapshot_heads", "snapshot_turns"]
    }
    assert Path(report["backup"]).is_file() and Path(report["backup"]).parent == path.parent
    code, out, _ = cli(capsys, "upgrade", "--json", str(path))
    assert json.loads(out)["changed"] is False and json.loads(out)["backup"] is None


@pytest.fixture
def six_sessions(tmp_path: Path) -> Path:
    """Sessions s0..s5, each written after the one before (so newest first is s5..s0);
    s0 has five runs."""
    path = tmp_path / "store.sqlite3"

    async def write() -> None:
        async with SQLiteSession(path) as store:
            for n in range(5):
                await store.append("s0", a_run(str(n)), run_id=f"run-{n}")
            for n in range(1, 6):
                await store.append(f"s{n}", [user("hi")], run_id="r")

    asyncio.run(write())
    return path


def test_sessions_pages_with_limit_and_offset(six_sessions: Path, capsys: Capsys) -> None:
    code, out, err = cli(capsys, "sessions", "--limit", "2", "--offset", "1", str(six_sessions))
    assert code == 0
    assert [row.split()[0] for row in out.splitlines()[2:]] == ["s4", "s3"]
    assert err == "sessions 2-3 of 6; the next page: --offset 3 (--limit 0 prints all)\n"
    code, out, _ = cli(capsys, "sessions", "--json", "--offset", "4", str(six_sessions))
    page = json.loads(out)
    assert (page["total"], page["offset"]) == (6, 4)
    assert [(s["session_id"], s["runs"], s["entries"]) for s in page["sessions"]] == [
        ("s1", 1, 1),
        ("s0", 5, 20),
    ]
    code, out, err = cli(capsys, "sessions", "--offset", "9", str(six_sessions))
    assert (code, out, err) == (0, "", "no sessions at offset 9 (there are 6)\n")


def test_sessions_prints_100_unless_told(tmp_path: Path, capsys: Capsys) -> None:
    """5,000 sessions must not print 5,003 lines: a page of 100 and where the rest is."""
    path = tmp_path / "store.sqlite3"

    async def write() -> None:
        async with SQLiteSession(path) as store:
            await asyncio.gather(
                *(store.append(f"s{n:03}", [user("hi")], run_id="r") for n in range(103))
            )

    asyncio.run(write())
    code, out, err = cli(capsys, "sessions", str(path))
    assert code == 0 and len(out.splitlines()) == 2 + 100
    assert err.startswith("sessions 1-100 of 103; the next page: --offset 100")
    code, out, err = cli(capsys, "sessions", "--limit", "0", str(path))
    assert len(out.splitlines()) == 2 + 103 and err == ""


def test_show_pages_runs(six_sessions: Path, capsys: Capsys) -> None:
    code, out, err = cli(capsys, "show", "s0", "--limit", "2", "--offset", "3", str(six_sessions))
    assert code == 0
    headers = [line for line in out.splitlines() if line.startswith("── run ")]
    assert headers == ["── run 4: run-3", "── run 5: run-4"]
    assert err == "runs 4-5 of 5\n"
    code, out, _ = cli(capsys, "show", "--json", "--limit", "1", "s0", str(six_sessions))
    shown = json.loads(out)
    assert (shown["total_runs"], [r["run_id"] for r in shown["runs"]]) == (5, ["run-0"])
    assert [e["type"] for e in shown["runs"][0]["entries"]] == [
        "input",
        "tool_call",
        "tool_result",
        "assistant_text",
    ]
    code, out, _ = cli(capsys, "show", "--json", "nobody", str(six_sessions))
    assert code == 1 and json.loads(out)["runs"] == []


def test_version_is_the_distribution_s(tmp_path: Path) -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == declared
    for flag in ("--version", "-V"):
        done = lovia_store(flag, cwd=tmp_path)
        assert (done.returncode, done.stdout) == (0, f"lovia-store {declared}\n")


# -- the documentation ---------------------------------------------------------------------------


def _commands() -> dict[str, click.Command]:
    """Every command, its module imported (the group imports each on first use)."""
    assert isinstance(command_group, click.Group)
    ctx = click.Context(command_group)
    found = {
        name: command_group.get_command(ctx, name) for name in command_group.list_commands(ctx)
    }
    assert all(found.values()), found
    return {name: command for name, command in found.items() if command is not None}


def test_docs_cli_md_documents_every_command_option_and_exit_code() -> None:
    page = (REPO / "docs" / "cli.md").read_text()
    for name, command in _commands().items():
        assert re.search(rf"^## `lovia-store {name}\b", page, re.MULTILINE), name
        section = page.split(f"## `lovia-store {name}", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            for flag in param.opts if isinstance(param, click.Option) else []:
                if flag.startswith("--") and flag != "--help":
                    assert flag in section, (name, flag)  # its synopsis at least
            if isinstance(param, click.Argument):
                assert param.human_readable_name in section, (name, param.name)
    for code, status in EXIT_CODES.items():
        assert re.search(rf"^\| {code} \| `{status}` \|", page, re.MULTILINE), code
    assert "`--version`" in page and "141" in page


def test_readme_command_line_section_names_every_command() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## The command line", 1)[1].split("\n## ", 1)[0]
    for name in _commands():
        assert f"lovia-store {name}" in section, name
    assert "docs/cli.md" in section
    assert "[docs/cli.md](docs/cli.md)" in readme.split("## Documentation", 1)[1]
