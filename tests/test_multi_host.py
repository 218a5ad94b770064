"""Several PostgreSQL hosts in one URL, in libpq's form or SQLAlchemy's, on both drivers.

``postgresql://u@h1:5434,h2:5435/db?target_session_attrs=read-write`` (what libpq and
most hosting providers write) is taken everywhere a URL is: the hosts are tried in
order, and ``target_session_attrs`` picks the one that takes writes. Here the first
host is a port where nothing listens and the second the test server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from helpers import a_run
from lovia_store import Database, SQLSession, StoreUnavailableError
from lovia_store.db.urls import display_url, to_url

pytestmark = pytest.mark.postgres


def test_libpq_s_form_becomes_sqlalchemy_s() -> None:
    url = to_url("postgresql://app:pw@h1:5434,h2:5435/db?target_session_attrs=read-write")
    assert url.drivername == "postgresql+asyncpg" and url.host is None
    assert url.query["host"] == ("h1:5434", "h2:5435")
    assert url.query["target_session_attrs"] == "read-write"
    assert url.password == "pw" and "pw" not in display_url(url)
    assert to_url("postgresql+psycopg://app@h1,h2/db").query["host"] == ("h1", "h2")
    # SQLAlchemy's own form, as it is.
    same = to_url("postgresql://app@/db?host=h1:5434&host=h2:5435")
    assert same.query["host"] == ("h1:5434", "h2:5435")


def test_heroku_style_postgres_urls_are_postgresql() -> None:
    assert to_url("postgres://u@h:5432/db").drivername == "postgresql+asyncpg"
    assert to_url("postgres+psycopg://u@h/db").drivername == "postgresql+psycopg"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def multi_host(url: str, driver: str) -> str:
    """``url``'s database behind a dead first host, in libpq's form."""
    parsed = make_url(url)
    user = parsed.username or "postgres"
    hosts = f"127.0.0.1:{free_port()},{parsed.host}:{parsed.port or 5432}"
    return f"postgresql+{driver}://{user}@{hosts}/{parsed.database}?target_session_attrs=read-write"


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_the_next_host_serves_when_the_first_is_down(pg_url: str, driver: str) -> None:
    url = multi_host(pg_url, driver)
    async with SQLSession(url) as sessions:
        await sessions.append("s", a_run("1"), run_id="r1")
        assert await sessions.load("s") == a_run("1")


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_no_host_up_is_a_retry_safe_cannot_connect(driver: str) -> None:
    url = f"postgresql+{driver}://u@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/db"
    async with Database(url) as db:
        with pytest.raises(StoreUnavailableError, match="cannot connect") as caught:
            await db.read(lambda conn: None)
        assert caught.value.retry_safe


def test_the_command_line_takes_the_libpq_form(pg_url: str, tmp_path: Path) -> None:
    url = multi_host(pg_url, "asyncpg")
    env = {k: v for k, v in os.environ.items() if k != "LOVIA_STORE_URL"}
    for args in (["upgrade", url], ["check"]):
        done = subprocess.run(
            [sys.executable, "-m", "lovia_store.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**env, "LOVIA_STORE_URL": url},
        )
        assert done.returncode == 0, done.stderr
