"""What a ``Database`` target names: parsed and checked before anything opens, shown
without its secrets.

A mistake in a URL or a path is a ``UserError`` raised here, at construction,
naming the target with its password masked: an unknown dialect or driver (with
the nearest known name), a synchronous driver, a bad port, a SQLite path whose
folders do not exist.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from urllib.parse import unquote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from ..errors import StoreUnavailableError, UserError
from .private_files import create_private_folder

__all__ = [
    "POOLERS",
    "POOLER_PARAMETER",
    "display_url",
    "mask_secrets",
    "prepare_sqlite_folder",
    "sqlite_file",
    "take_pooler",
    "to_url",
]

BACKENDS = ("sqlite", "postgresql", "mysql", "mariadb")
DEFAULT_DRIVERS = {
    "sqlite": "aiosqlite",
    "postgresql": "asyncpg",
    "mysql": "asyncmy",
    "mariadb": "asyncmy",
}
# The async drivers SQLAlchemy has for each backend: what "did you mean" picks from.
_ASYNC_DRIVERS = {
    "sqlite": ("aiosqlite", "pysqlite"),
    "postgresql": ("asyncpg", "psycopg"),
    "mysql": ("asyncmy", "aiomysql"),
    "mariadb": ("asyncmy", "aiomysql"),
}
# Names people type for a backend that SQLAlchemy does not know by that name.
_ALIASES = {"postgres": "postgresql", "pg": "postgresql", "psql": "postgresql", "sqlite3": "sqlite"}
# A URL's password, and the query parameters that carry a secret (libpq's
# sslpassword, a driver's passwd).
_SECRET_IN_TEXT = (
    (re.compile(r"(://[^:/?#@\s]*:)[^@/\s]*@"), r"\1***@"),
    (re.compile(r"([?&][^=&\s]*(?:pass|pwd|secret|token)[^=&\s]*=)[^&\s]*", re.I), r"\1***"),
)


def mask_secrets(text: str) -> str:
    """``text`` (a URL that may not even parse) with passwords replaced by ``***``."""
    for pattern, replacement in _SECRET_IN_TEXT:
        text = pattern.sub(replacement, text)
    return text


def display_url(url: URL) -> str:
    """The URL as messages and reprs show it: password and secret parameters masked."""
    return mask_secrets(url.render_as_string(hide_password=True))


def _nearest(name: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def _path_url(text: str) -> URL:
    if not text.strip():
        raise UserError("a Database target is a URL or a SQLite path, not an empty string")
    try:
        path = Path(text).expanduser().resolve()
    except (RuntimeError, OSError, ValueError) as exc:  # ~nobody, a NUL byte, a loop
        raise UserError(f"not a usable SQLite path: {text!r} ({exc})") from exc
    # URL.create, not a formatted string: a path may hold '?', '#' or '%'.
    return URL.create("sqlite+aiosqlite", database=str(path))


_LIBPQ_HOSTS = re.compile(
    r"^(?P<scheme>postgres(?:ql)?(?:\+\w+)?://)(?P<user>[^/?#]*@)?"
    r"(?P<hosts>[^/?#@]*,[^/?#@]*)(?P<rest>[/?#].*)?$",
    re.IGNORECASE,
)
_HOST_PORT = re.compile(r"^(?P<host>\[[^\]]+\]|[^:\[\]]*)(?::(?P<port>[^:]*))?$")


def _multi_host(text: str) -> str:
    """libpq's multi-host form (``postgresql://u@h1:5434,h2:5435/db``) written the way
    SQLAlchemy's PostgreSQL drivers take it (``postgresql://u@/db?host=h1:5434&host=h2:5435``);
    any other text as it is."""
    match = _LIBPQ_HOSTS.match(text)
    if match is None:
        return text
    hosts = []
    for part in match["hosts"].split(","):
        found = _HOST_PORT.match(part)
        if found is None or not found["host"]:
            raise UserError(f"{mask_secrets(text)}: {part!r} is not a host or host:port")
        port = found["port"]
        if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
            raise UserError(f"{mask_secrets(text)}: port {port!r} of {part!r} is not a port")
        hosts.append(f"host={part}")
    rest = match["rest"] or "/"
    path, _, query = rest.partition("?")
    joined = "&".join(hosts + ([query] if query else []))
    return f"{match['scheme']}{match['user'] or ''}{path}?{joined}"


def _parse(text: str) -> URL:
    shown = mask_secrets(text)
    text = _multi_host(text)
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise UserError(f"not a database URL: {shown!r}") from exc
    except ValueError as exc:  # SQLAlchemy's int() of the port
        raise UserError(f"{shown}: the port is not a number ({exc})") from exc
    port = url.port
    if port is not None and not 0 < port < 65536:
        raise UserError(f"{shown}: port {port} is not a port (1 to 65535)")
    return url


def _check_dialect(url: URL) -> None:
    """Refuse an unknown dialect or driver, and a synchronous driver, naming what would work."""
    backend = url.get_backend_name()
    shown = display_url(url)
    if backend == "sqlite" and (url.host or url.port or url.username or url.password):
        raise UserError(
            f"{shown}: a SQLite URL names a file, not a server: sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    if backend not in BACKENDS:
        alias = _ALIASES.get(backend.lower())
        hint = f"; did you mean {alias!r}?" if alias else _nearest(backend, BACKENDS)
        raise UserError(
            f"{shown}: unknown database {backend!r}{hint} "
            f"(lovia-store works with {', '.join(BACKENDS)})"
        )
    try:
        dialect = url.get_dialect(_is_async=True)
    except NoSuchModuleError as exc:
        drivers = _ASYNC_DRIVERS[backend]
        raise UserError(
            f"{shown}: unknown driver {url.get_driver_name()!r} for {backend}"
            f"{_nearest(url.get_driver_name(), drivers)} (async drivers: {', '.join(drivers)})"
        ) from exc
    if backend != "sqlite" and not dialect.is_async:
        choices = " or ".join(f"{backend}+{name}://" for name in _ASYNC_DRIVERS[backend])
        raise UserError(
            f"{shown}: {url.get_driver_name()!r} is a synchronous driver; "
            f"lovia-store needs an async one: {choices}"
        )


def to_url(target: str | os.PathLike[str]) -> URL:
    """The URL a ``Database`` opens for ``target`` (a URL, a SQLite path or ``:memory:``)."""
    text = os.fspath(target)
    if text == ":memory:":
        return make_url("sqlite+aiosqlite:///:memory:")
    if "://" not in text:
        return _path_url(text)
    url = _parse(text)
    if url.get_backend_name() == "postgres":  # Heroku's and many hosts' DATABASE_URL
        driver = url.drivername.partition("+")[2]
        url = url.set(drivername="postgresql" + (f"+{driver}" if driver else ""))
    backend = url.get_backend_name()
    if "+" not in url.drivername and backend in DEFAULT_DRIVERS:
        # A plain ``postgresql://`` URL means "the async driver we ship with".
        url = url.set(drivername=f"{backend}+{DEFAULT_DRIVERS[backend]}")
    _check_dialect(url)
    if "password" in url.query:
        # Where SQLAlchemy hides it (reprs, logs, its own errors); every driver we
        # support takes the URL's password and a ``password`` parameter alike.
        password = url.query["password"]
        url = url.difference_update_query(["password"]).set(
            password=password[-1] if isinstance(password, tuple) else password
        )
    if backend in ("mysql", "mariadb") and "charset" not in url.query:
        url = url.update_query_dict({"charset": "utf8mb4"})  # every emoji round-trips
    return url


POOLER_PARAMETER = "lovia_pooler"
"""The URL's query parameter that names the pooler in front of PostgreSQL (ours: the
driver never sees it)."""
POOLERS = ("transaction",)
"""Poolers lovia-store works behind: ``transaction``, a pooler that hands a server
connection out per transaction (PgBouncer's pool_mode=transaction, Supavisor's
transaction mode, RDS Proxy, Neon's pooled endpoint)."""


def take_pooler(url: URL, pooler: str | None) -> tuple[URL, str | None]:
    """``url`` without our ``lovia_pooler`` parameter, and the pooler it or ``pooler`` names."""
    shown = display_url(url)
    named = url.query.get(POOLER_PARAMETER)
    if isinstance(named, tuple):
        if len(set(named)) > 1:
            raise UserError(f"{shown}: {POOLER_PARAMETER} is given twice, differently")
        named = named[0]
    if named is not None:
        url = url.difference_update_query([POOLER_PARAMETER])
        if pooler is not None and pooler != named:
            raise UserError(
                f"{shown}: the URL says {POOLER_PARAMETER}={named} but pooler={pooler!r} was given"
            )
        pooler = named
    if pooler is None:
        return url, None
    if pooler not in POOLERS:
        raise UserError(
            f"{shown}: unknown pooler {pooler!r}; lovia-store works behind "
            f"{', '.join(repr(p) for p in POOLERS)} poolers ({POOLER_PARAMETER}=transaction)"
        )
    if url.get_backend_name() != "postgresql":
        raise UserError(f"{shown}: {POOLER_PARAMETER} applies to PostgreSQL URLs only")
    return url, pooler


def sqlite_file(url: URL) -> Path | None:
    """The file a SQLite URL names (a ``file:`` URI's too); None for an in-memory database."""
    database = url.database
    if database in (None, "", ":memory:"):
        return None
    assert database is not None
    if database.startswith("file:") and str(url.query.get("uri", "")).lower() in ("true", "1"):
        rest = unquote(database[len("file:") :].split("?", 1)[0])
        if rest.startswith("//"):  # file://host/path: only the local host is allowed
            rest = "/" + rest[2:].split("/", 1)[-1]
        if rest in ("", ":memory:") or "mode=memory" in database:
            return None
        return Path(rest)
    return Path(database)


def prepare_sqlite_folder(path: Path, *, create: bool) -> None:
    """Check that ``path`` can be a SQLite file; create its folder if it alone is missing.

    Only the file's own folder is created, owner-only (0700), and only when that
    folder's parent exists (so ``~/.lovia-store/`` appears on first use, while a
    mistyped ``/srv/dta/app/db.sqlite3`` is refused instead of growing a new tree).
    ``create=False`` (a verify-only check) creates nothing.
    """
    if "\0" in str(path):
        raise UserError(f"{str(path)!r} is not a usable SQLite path: it holds a NUL character")
    try:
        _prepare_folder(path, create=create)
    except OSError as exc:  # a name too long, a folder we may not look into
        raise UserError(f"{path} is not a usable SQLite path: {exc}") from exc


def _prepare_folder(path: Path, *, create: bool) -> None:
    folder = path.parent
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a SQLite file")
    if folder.is_dir():
        return
    existing = next(parent for parent in path.parents if parent.exists())
    if not existing.is_dir():
        raise UserError(f"{path}: {existing} is a file, not a folder")
    if existing == folder:  # another process made it since the check above
        return
    if existing != folder.parent:
        missing = next(parent for parent in path.parents if parent.parent == existing)
        raise UserError(
            f"{path}: the folder {missing} does not exist (lovia-store creates only the "
            "file's own folder, and only inside a folder that exists)"
        )
    if create:
        try:
            create_private_folder(folder)  # owner-only; one another process made is kept
        except OSError as exc:  # permissions, a read-only file system
            raise StoreUnavailableError(f"{path}: cannot create its folder: {exc}") from exc
