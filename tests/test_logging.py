"""One ``lovia_store`` logger hierarchy: silent by default, never a payload or a password.

Migrations and conversions, retries with their cause, lease takeovers and a
refused WAL are logged; ``alembic upgrade`` with the project's ``alembic.ini``
prints its usual lines.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from backends import HERE
from helpers import lapse_lease
from lovia_store import Database, InputEntry, SQLCheckpointer, SQLSession, StoreUnavailableError

ROOT = HERE.parent
SECRET = "the-users-secret-words-7Hq"
PASSWORD = "pw-Zq7xK"
RefusesWal = "sqlite:///file:{path}?vfs=unix-dotfile&uri=true"  # no shared memory: no WAL


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("lovia_store")]


def assert_nothing_secret(records: list[logging.LogRecord]) -> None:
    for record in records:
        shown = logging.Formatter().format(record)
        assert SECRET not in shown and PASSWORD not in shown, shown


_CHILD = """
import asyncio, logging, sys
if sys.argv[2] == "configured":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
from lovia_store import Database, InputEntry, SQLSession

async def main() -> None:
    async with Database(sys.argv[1], wal=True) as db:  # a migration, WAL refused
        await SQLSession(db).append("s", [InputEntry(role="user", content="hi")], run_id="r1")

asyncio.run(main())
"""


@pytest.mark.parametrize("logging_", ["default", "configured"])
def test_silent_by_default_and_informative_when_configured(tmp_path: Path, logging_: str) -> None:
    target = RefusesWal.format(path=tmp_path / "chat.sqlite3")
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, target, logging_],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    if logging_ == "default":
        assert child.stderr == ""  # even the WARNING: a library waits to be asked
    else:
        lines = child.stderr.splitlines()
        assert any(
            line.startswith("WARNING lovia_store.db.sqlite_executor") and "refused WAL" in line
            for line in lines
        ), lines
        assert any(
            line.startswith("INFO lovia_store.db.schema") and "upgraded" in line for line in lines
        ), lines


async def test_a_refused_wal_is_said_once_per_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lovia_store")
    target = RefusesWal.format(path=tmp_path / "no-wal.sqlite3")
    for _ in range(2):  # two databases, several connections each
        async with Database(target, wal=True) as db:
            store = SQLSession(db)
            await asyncio.gather(*(store.load(f"s{n}") for n in range(6)))
            await store.append("s", [InputEntry(role="user", content=SECRET)], run_id="r1")
    refused = [r for r in ours(caplog) if "refused WAL" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
    assert str(tmp_path / "no-wal.sqlite3") in refused[0].getMessage()
    async with Database(tmp_path / "wal.sqlite3", wal=True) as db:  # WAL granted: nothing said
        await SQLSession(db).load("s")
    assert len([r for r in ours(caplog) if "refused WAL" in r.getMessage()]) == 1


async def test_retries_are_logged_with_their_cause_and_no_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="lovia_store")
    target = f"postgresql://alice:{PASSWORD}@127.0.0.1:{closed_port()}/app"
    async with Database(target) as db:
        with pytest.raises(StoreUnavailableError):
            await SQLSession(db).load("s")
    retries = [r for r in ours(caplog) if r.name == "lovia_store.db.database"]
    assert len(retries) == 5  # six attempts, five retries
    assert all(r.levelno == logging.INFO and "cannot connect" in r.getMessage() for r in retries)
    assert "alice:***@127.0.0.1" in retries[0].getMessage()
    assert_nothing_secret(ours(caplog))


async def test_a_lease_takeover_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lovia_store")
    async with SQLCheckpointer(tmp_path / "runs.sqlite3") as checkpointer:
        released = await checkpointer.acquire_lease("released", ttl=30)
        await checkpointer.release_lease(released)
        await checkpointer.acquire_lease("released", ttl=30)  # after a release: no takeover
        await checkpointer.acquire_lease("stalled", ttl=30)
        await checkpointer.database.write(lapse_lease("stalled"))  # its ttl went by, unrenewed
        await checkpointer.acquire_lease("stalled", ttl=30)
    takeovers = [r for r in ours(caplog) if "taken over" in r.getMessage()]
    assert [r.name for r in takeovers] == ["lovia_store.checkpoints.sql_leases"]
    assert takeovers[0].levelno == logging.WARNING  # its holder (this process) still lives
    assert "'stalled'" in takeovers[0].getMessage()


async def test_migrations_and_conversions_log_without_payloads(
    legacy_copy: object, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Everything lovia-store logs at DEBUG over a conversion, a server migration
    (its URL with a password) and ordinary work holding a secret: neither shows."""
    caplog.set_level(logging.DEBUG, logger="lovia_store")
    path = legacy_copy("lovia-0.9.119.sqlite3")  # type: ignore[operator]
    async with SQLSession(path) as store:
        await store.append("s", [InputEntry(role="user", content=SECRET)], run_id="r1")
    url = make_url(pg_url).set(password=PASSWORD).render_as_string(hide_password=False)
    async with SQLSession(url) as store:  # trust authentication: any password works
        await store.append("s", [InputEntry(role="user", content=SECRET)], run_id="r1")
        await store.append("s", [InputEntry(role="user", content=SECRET)], run_id="r1")
    messages = [r.getMessage() for r in ours(caplog)]
    assert any("original is kept at" in m for m in messages)  # the conversion's backup
    assert sum("upgraded" in m for m in messages) == 2
    assert_nothing_secret(ours(caplog))


def test_alembic_command_line_prints_its_usual_lines(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "alembic",
            "-c",
            "alembic.ini",
            "-x",
            f"url={url}",
            "upgrade",
            "head",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert "INFO  [alembic.runtime.migration] Running upgrade  -> 0001" in child.stderr


async def test_running_alembic_from_code_leaves_the_applications_logging_alone(
    tmp_path: Path,
) -> None:
    root = logging.getLogger()
    before = (root.level, list(root.handlers), logging.getLogger("alembic").level)
    async with SQLSession(tmp_path / "code.sqlite3") as store:
        await store.load("s")
    assert (root.level, list(root.handlers), logging.getLogger("alembic").level) == before
