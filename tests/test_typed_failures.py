"""Every failure to reach or open a database is a ``LoviaStoreError`` naming it, password masked.

Unreachable servers on every driver (refused, unknown host, timed out, TLS refused),
bad URLs (with the nearest known name), unusable SQLite paths; a fuzz over URL
shapes and every backend shows no raw exception escapes the public API.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.engine import make_url

from backends import fresh_server_database, server_url
from helpers import a_run, examples
from lovia_store import (
    Database,
    LoviaStoreError,
    SQLSession,
    SQLSessionStorage,
    StoreUnavailableError,
    UserError,
    check,
    upgrade,
)

SECRET = "pw-Zq7xK"
DRIVERS = {
    "asyncpg": ("LOVIA_TEST_POSTGRES_URL", "postgresql+asyncpg"),
    "psycopg": ("LOVIA_TEST_POSTGRES_URL", "postgresql+psycopg"),
    "asyncmy": ("LOVIA_TEST_MYSQL_URL", "mysql+asyncmy"),
}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never says a word (a hung server)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for conn in held:
            conn.close()


def url_for(driver: str, **parts: object) -> str:
    variable, drivername = DRIVERS[driver]
    base = make_url(server_url(variable)).set(drivername=drivername, password=SECRET)
    return base.set(**parts).render_as_string(hide_password=False)  # type: ignore[arg-type]


NOT_RETRIED = 30.0
"""Where a test says an error is not retried: it runs with ``busy_timeout`` twice this,
so a retried call takes at least twice as long as the bound, and a loaded machine
cannot push one attempt past it."""


async def first_read_error(target: str, **options: object) -> LoviaStoreError:
    options.setdefault("busy_timeout", 2 * NOT_RETRIED)
    async with Database(target, **options) as db:  # type: ignore[arg-type]
        with pytest.raises(LoviaStoreError) as caught:
            await SQLSession(db).load("s")
    return caught.value


def assert_names_database_masked(error: BaseException, host: str) -> None:
    message = str(error)
    assert host in message and "***" in message
    assert SECRET not in message and SECRET not in repr(error.args)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("where", ["closed port", "unknown host"])
async def test_an_unreachable_server_is_a_retry_safe_typed_error(driver: str, where: str) -> None:
    host, port = ("127.0.0.1", closed_port()) if where == "closed port" else ("no-such.invalid", 1)
    error = await first_read_error(url_for(driver, host=host, port=port))
    assert type(error) is StoreUnavailableError
    assert error.retry_safe is True  # nothing was sent
    assert "cannot connect" in str(error)
    assert_names_database_masked(error, host)


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_a_hung_server_times_out_typed_and_is_not_retried(driver: str) -> None:
    with silent_server() as port:
        target = url_for(driver, host="127.0.0.1", port=port)
        # Each driver's own connect timeout: asyncpg's argument, libpq's parameter.
        if driver == "asyncpg":
            options: dict[str, object] = {"connect_args": {"timeout": 0.3}}
        else:
            options, target = {}, f"{target}?connect_timeout=1"
        started = time.monotonic()
        error = await first_read_error(target, **options)
        elapsed = time.monotonic() - started
    assert type(error) is StoreUnavailableError and error.retry_safe is True
    assert "timeout" in str(error) or "timed out" in str(error)
    assert_names_database_masked(error, "127.0.0.1")
    assert elapsed < NOT_RETRIED  # one wait, not one per retry until busy_timeout


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_tls_refused_by_the_server_is_typed(driver: str) -> None:
    """The test server speaks no TLS: a URL that requires it is refused, typed, at once."""
    query = "ssl=require" if driver == "asyncpg" else "sslmode=require"
    url = f"{url_for(driver)}?{query}"
    started = time.monotonic()
    error = await first_read_error(url)
    assert type(error) is StoreUnavailableError and error.retry_safe is True
    assert "SSL" in str(error)
    assert_names_database_masked(error, make_url(url_for(driver)).host or "")
    assert time.monotonic() - started < NOT_RETRIED  # a refusal is not worth repeating


async def test_a_statement_timeout_mid_transaction_is_typed(pg_url: str) -> None:
    """asyncpg raises the bare ``TimeoutError`` of its ``command_timeout`` (and cancels
    the statement: a sleep far past it, so a stalled event loop cannot see it end first)."""
    async with Database(pg_url, connect_args={"command_timeout": 0.2}) as db:
        with pytest.raises(StoreUnavailableError, match="timed out") as caught:
            await db.read(lambda conn: conn.execute(text("SELECT pg_sleep(60)")).scalar())
        assert caught.value.retry_safe is True  # a read, rolled back
        assert await db.read(lambda conn: conn.execute(text("SELECT 1")).scalar()) == 1


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("postgress://u:pw-Zq7xK@h/db", "did you mean 'postgresql'"),
        ("postgresq://u:pw-Zq7xK@h/db", "did you mean 'postgresql'"),
        ("postgresql://u:pw-Zq7xK@h1:5432,h2:x/db", "port 'x' of 'h2:x' is not a port"),
        ("postgresql://u:pw-Zq7xK@h1:5432,:5433/db", "is not a host or host:port"),
        ("mysq://u:pw-Zq7xK@h/db", "did you mean 'mysql'"),
        ("sqlite3:///x.db", "did you mean 'sqlite'"),
        ("http://u:pw-Zq7xK@h/db", "unknown database 'http'"),
        ("postgresql+asyncpgg://u:pw-Zq7xK@h/db", "did you mean 'asyncpg'"),
        ("mysql+asyncmi://u:pw-Zq7xK@h/db", "did you mean 'asyncmy'"),
        ("postgresql+psycopg2://u:pw-Zq7xK@h/db", "synchronous driver"),
        ("mysql+pymysql://u:pw-Zq7xK@h/db", "synchronous driver"),
        ("postgresql://u:pw-Zq7xK@h:abc/db", "port is not a number"),
        ("postgresql://u:pw-Zq7xK@h:99999/db", "port 99999"),
        ("postgresql://u:pw-Zq7xK@h:0/db", "port 0"),
        ("postgresql://u:pw-Zq7xK@[::1/db", "port is not a number"),
        ("", "empty string"),
        ("a\0b.sqlite3", "not a usable SQLite path"),
        ("~no-such-user-zz/x.sqlite3", "not a usable SQLite path"),
    ],
)
def test_a_bad_url_is_a_user_error_at_construction(target: str, says: str) -> None:
    with pytest.raises(UserError, match=says) as caught:
        Database(target)
    assert SECRET not in str(caught.value)


def test_bad_options_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="busy_timeout"):
        Database(tmp_path / "a.db", busy_timeout="5")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="busy_timeout"):
        Database(tmp_path / "a.db", busy_timeout=-1)
    with pytest.raises(UserError, match="no_such_option"):
        Database(tmp_path / "a.db", no_such_option=1)


@pytest.mark.parametrize(
    ("driver", "query"),
    [("asyncpg", "sslmode=bogus"), ("psycopg", "charset=x"), ("asyncmy", "application_name=x")],
)
async def test_a_driver_refusing_a_url_parameter_is_a_user_error(driver: str, query: str) -> None:
    url = f"{url_for(driver)}?{query}"
    started = time.monotonic()
    with pytest.raises(UserError, match="refused the URL's parameters") as caught:
        async with Database(url, busy_timeout=2 * NOT_RETRIED) as db:
            await SQLSession(db).load("s")
    assert SECRET not in str(caught.value)
    assert time.monotonic() - started < NOT_RETRIED  # not repeated


async def test_a_mistyped_sqlite_folder_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    mistyped = tmp_path / "dta" / "app" / "chat.sqlite3"
    for opens in (Database, check, upgrade):
        with pytest.raises(UserError, match=f"the folder {tmp_path / 'dta'} does not exist"):
            result = opens(mistyped)
            if asyncio.iscoroutine(result):
                await result
    assert os.listdir(tmp_path) == []

    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(UserError, match="is a file, not a folder"):
        Database(tmp_path / "notes.txt" / "chat.sqlite3")
    with pytest.raises(UserError, match="is a folder, not a SQLite file"):
        Database(tmp_path)


async def test_the_files_own_folder_is_created_when_its_parent_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SQLSession(tmp_path / "data" / "chat.sqlite3") as store:
        await store.append("s", a_run("1"), run_id="r1")
    assert (tmp_path / "data" / "chat.sqlite3").is_file()
    # check() creates nothing, not even the one folder.
    with pytest.raises(LoviaStoreError):
        await check(tmp_path / "other" / "chat.sqlite3")
    assert not (tmp_path / "other").exists()
    # The storage's default file, ~/.lovia-store/sessions.sqlite3, is made on first use.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    async with SQLSessionStorage() as storage:
        await storage.create_session(session_id="s")
    assert (tmp_path / "home" / ".lovia-store" / "sessions.sqlite3").is_file()


# -- the fuzz: URL shapes on every backend ------------------------------------

_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=8)
_SCHEMES = st.one_of(
    st.sampled_from(
        [
            "postgresql",
            "postgresql+asyncpg",
            "postgresql+psycopg",
            "mysql",
            "mysql+asyncmy",
            "mariadb+asyncmy",
            "postgres",
            "postgress",
            "mysq",
            "postgresql+psycopg2",
            "mysql+pymysql",
            "postgresql+nodriver",
            "sqlite",
            "sqlite+aiosqlite",
        ]
    ),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz+", min_size=1, max_size=12),
)
QUERY_SHAPES = [
    "",
    f"?password={SECRET}",
    "?sslmode=require",
    "?ssl=require",
    "?timeout=abc",
    "?connect_timeout=1",
    "?charset=latin1",
    "?application_name=fuzz",
    "?no_such_parameter=1",
    f"?sslpassword={SECRET}",
]
_QUERIES = st.sampled_from(QUERY_SHAPES)


@st.composite
def server_urls(draw: st.DrawFn, hosts: dict[str, str]) -> str:
    """A URL that may reach a real server, but never a database that exists (and so
    never writes anywhere), or that may not reach anything at all."""
    scheme = draw(_SCHEMES)
    user = draw(st.sampled_from(["", "postgres@", "root@", f"root:{SECRET}@", f"nobody:{SECRET}@"]))
    reachable = dict(hosts)
    if scheme.startswith(("mysql", "mariadb")):
        # asyncmy bounds only the TCP connect, not the greeting it then waits for,
        # and PostgreSQL waits for the client to speak first: both would wait a minute.
        reachable.pop("LOVIA_TEST_POSTGRES_URL")
    host = draw(
        st.sampled_from([*reachable.values(), "no-such.invalid", "[::1]", "h:abc", "h:70000"])
    )
    database = "lovia_fuzz_missing_" + draw(_NAMES)
    return f"{scheme}://{user}{host}/{database}{draw(_QUERIES)}"


async def _every_public_entry(target: str) -> list[str]:
    """Construct, read, write, upgrade, check: each either works or raises typed."""
    outcomes: list[str] = []

    async def attempt(name: str, call: object) -> None:
        try:
            if asyncio.iscoroutine(call):
                await call
            outcomes.append(f"{name}: ok")
        except LoviaStoreError as exc:
            assert SECRET not in str(exc), exc
            outcomes.append(f"{name}: {type(exc).__name__}")

    try:
        db = Database(target)
    except LoviaStoreError as exc:
        assert SECRET not in str(exc) and SECRET not in repr(exc)
        return ["construct: " + type(exc).__name__]
    assert SECRET not in repr(db) and SECRET not in db.url
    try:
        await attempt("read", SQLSession(db).load("s"))
        await attempt("write", SQLSession(db).append("s", a_run("1"), run_id="r1"))
    finally:
        await db.close()
    await attempt("upgrade", upgrade(target))
    await attempt("check", check(target))
    return outcomes


def _server_hosts() -> dict[str, str]:
    hosts = {}
    for variable in ("LOVIA_TEST_POSTGRES_URL", "LOVIA_TEST_MYSQL_URL"):
        url = make_url(server_url(variable))
        hosts[variable] = f"{url.host}:{url.port or ''}".rstrip(":")
    hosts["closed"] = f"127.0.0.1:{closed_port()}"
    return hosts


_HOSTS: dict[str, str] = {}


@pytest.fixture(scope="module")
def hosts() -> dict[str, str]:
    if not _HOSTS:
        _HOSTS.update(_server_hosts())
    return _HOSTS


@settings(
    max_examples=int(os.environ.get("LOVIA_FUZZ_EXAMPLES", examples(40))),
    deadline=None,
    database=None,  # nothing written into the work tree; each run draws afresh
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_fuzz_server_urls_raise_only_typed_errors(
    hosts: dict[str, str], data: st.DataObject
) -> None:
    target = data.draw(server_urls(hosts))
    asyncio.run(_every_public_entry(target))


@st.composite
def sqlite_targets(draw: st.DrawFn, root: Path) -> str:
    """Paths and URLs into a scratch folder: present, missing one or two folders,
    under a file, a folder itself, odd characters, URI filenames."""
    name = draw(st.text(min_size=1, max_size=12).filter(lambda t: "/" not in t))
    shape = draw(
        st.sampled_from(
            [
                "{root}/{name}.db",
                "{root}/new_{n}/{name}.db",
                "{root}/missing_{n}/deeper/{name}.db",
                "{root}/a_file/{name}.db",
                "{root}",
                "sqlite:///{root}/{name}.db",
                "sqlite+aiosqlite:///{root}/missing_{n}/deeper/x.db",
                "sqlite:///file:{root}/{n}.db?uri=true&mode=rwc",
                "sqlite:///file:{root}/{n}.db?uri=true&mode=ro",
                "sqlite:///file:{root}/{n}.db?uri=true&vfs=no-such-vfs",
                "{name}",
            ]
        )
    )
    n = draw(_NAMES)
    return shape.format(root=root, name=name, n=n)


@settings(
    max_examples=int(os.environ.get("LOVIA_FUZZ_EXAMPLES", examples(40))),
    deadline=None,
    database=None,  # nothing written into the work tree; each run draws afresh
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_fuzz_sqlite_targets_raise_only_typed_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: st.DataObject
) -> None:
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.chdir(tmp_path)  # a bare name lands in the scratch folder
    target = data.draw(sqlite_targets(tmp_path))
    asyncio.run(_every_public_entry(target))
    # A folder that was missing with its parent is never created.
    assert not any(path.name.startswith("missing_") for path in tmp_path.iterdir())


@pytest.mark.parametrize("kind", ["postgres", "postgres_psycopg", "mariadb"])
async def test_fuzz_query_parameters_on_a_real_database(kind: str) -> None:
    """A reachable, fresh database with each parameter shape: works or fails typed."""
    async with fresh_server_database("mariadb" if kind == "mariadb" else "postgres") as url:
        if kind == "postgres_psycopg":
            url = make_url(url).set(drivername="postgresql+psycopg").render_as_string(False)
        for query in QUERY_SHAPES:
            await _every_public_entry(f"{url}{query}")


async def test_a_password_in_the_query_string_is_masked_everywhere() -> None:
    """D13: ``?password=`` never shows in reprs, the URL, the engine's own repr or an
    error message; other secret parameters (libpq's ``sslpassword``) are masked in
    ours (SQLAlchemy's engine repr hides only the password)."""
    port = closed_port()
    for driver in DRIVERS:
        target = (
            make_url(url_for(driver, host="127.0.0.1", port=port))
            .set(password=None)
            .render_as_string(hide_password=False)
            + f"?sslpassword=x{SECRET}&password={SECRET}"
        )
        db = Database(target)
        try:
            assert db.engine.url.password == SECRET  # still given to the driver
            for shown in (db.url, repr(db)):
                assert SECRET not in shown, shown
            assert f"={SECRET}" not in repr(db.engine)
            with pytest.raises(LoviaStoreError) as caught:
                await SQLSession(db).load("s")
            assert SECRET not in str(caught.value) and "***" in str(caught.value)
        finally:
            await db.close()
