"""Arguments and options several commands share, and where a database is by default."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

__all__ = [
    "DEFAULT_FILE",
    "MAX_COUNT",
    "URL_HELP",
    "copy_key_options",
    "copy_schema_options",
    "default_url",
    "json_option",
    "key_options",
    "paging_options",
    "schema_option",
    "selected_tenants",
    "shown",
    "stored",
    "tenant_options",
    "url_argument",
]

DEFAULT_FILE = "lovia-store.sqlite3"
URL_HELP = (
    "URL is a SQLAlchemy URL (sqlite+aiosqlite:///file, postgresql+asyncpg://..., "
    "mysql+asyncmy://...) or a SQLite path. Without one, $LOVIA_STORE_URL is used, "
    f"else the SQLite file ./{DEFAULT_FILE} in the working directory."
)
# Every backend binds LIMIT/OFFSET as an integer; past this no listing is real anyway.
MAX_COUNT = 2**31 - 1

Command = TypeVar("Command", bound=Callable[..., Any])


def default_url() -> str:
    return (
        os.environ.get("LOVIA_STORE_URL") or f"sqlite+aiosqlite:///{os.path.abspath(DEFAULT_FILE)}"
    )


def shown(target: str) -> str:
    """``target`` as it may be printed: a URL without its password."""
    if "://" not in target:
        return target
    try:
        return make_url(target).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # unparsable: the command itself says so, typed
        return "the database"


def url_argument(command: Command) -> Command:
    return click.argument("url", required=False)(command)


def schema_option(command: Command) -> Command:
    return click.option(
        "--schema",
        envvar="LOVIA_STORE_SCHEMA",
        show_envvar=True,
        default=None,
        help="PostgreSQL schema that holds lovia-store's tables (default: the "
        "connection's default schema).",
    )(command)


def copy_schema_options(command: Command) -> Command:
    """``--source-schema`` and ``--destination-schema``: ``--schema`` for each side of a
    copy. ``$LOVIA_STORE_SCHEMA`` is not read: it could mean either side (as the URLs
    are not taken from ``$LOVIA_STORE_URL``)."""
    for side in ("destination", "source"):
        command = click.option(
            f"--{side}-schema",
            f"{side}_schema",
            metavar="NAME",
            default=None,
            help=f"PostgreSQL schema that holds lovia-store's tables in the {side} "
            "database (default: the connection's default schema; $LOVIA_STORE_SCHEMA "
            "is not read).",
        )(command)
    return command


def json_option(command: Command) -> Command:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON document on stdout instead of text (errors too).",
    )(command)


def paging_options(what: str, default_limit: int) -> Callable[[Command], Command]:
    """``--limit`` and ``--offset`` over ``what``, in the listing's order."""

    def decorate(command: Command) -> Command:
        command = click.option(
            "--offset",
            type=click.IntRange(0, MAX_COUNT),
            default=0,
            show_default=True,
            help=f"Skip this many {what} first.",
        )(command)
        return click.option(
            "--limit",
            type=click.IntRange(0, MAX_COUNT),
            default=default_limit,
            help=f"Print at most this many {what}; 0 prints them all "
            f"(default: {default_limit or 'all'}).",
        )(command)

    return decorate


def tenant_options(
    what: str, *, all_tenants: bool = True, envvar: bool = True, default: str = "the default tenant"
) -> Callable[[Command], Command]:
    """``--tenant NAME`` (from ``$LOVIA_STORE_TENANT`` when ``envvar``) and, when
    ``all_tenants``, ``--all-tenants``: the tenants a command ``what``. The command
    receives ``tenant`` (None: not given) and ``all_tenants``; ``selected_tenants``
    checks them."""

    def decorate(command: Command) -> Command:
        if all_tenants:
            command = click.option(
                "--all-tenants",
                "all_tenants",
                is_flag=True,
                help=f"Every tenant {what} (each kept apart); overrides $LOVIA_STORE_TENANT.",
            )(command)
        return click.option(
            "--tenant",
            envvar="LOVIA_STORE_TENANT" if envvar else None,
            show_envvar=envvar,
            metavar="NAME",
            default=None,
            help=f"The tenant {what} (default: {default}; '' names the default tenant).",
        )(command)

    return decorate


def selected_tenants(tenant: str | None, all_tenants: bool) -> tuple[str | None, bool]:
    """``(tenant, all_tenants)`` for a lifecycle call: ``--all-tenants`` wins over a
    tenant from ``$LOVIA_STORE_TENANT``, but not over ``--tenant`` on the command line
    (both said: a usage error)."""
    if not all_tenants:
        return tenant, False
    ctx = click.get_current_context()
    if tenant is not None and ctx.get_parameter_source("tenant") == ParameterSource.COMMANDLINE:
        raise click.UsageError("--tenant and --all-tenants exclude each other")
    return None, True


# -- how documents are stored: encryption keys, compression --------------------------


class KeyText(click.ParamType[str]):
    """An encryption key as ``generate_encryption_key()`` writes it (URL-safe base64 of
    32 bytes; checked when the Database is opened). From an environment variable, a
    comma-separated list."""

    name = "KEY"
    envvar_list_splitter = ","

    def split_envvar_value(self, rv: str) -> list[str]:
        return [part.strip() for part in (rv or "").split(",") if part.strip()]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return str(value).strip()


def _key_option(flag: str, envvar: str | None, help: str) -> Callable[[Command], Command]:
    return click.option(
        flag,
        type=KeyText(),
        multiple=True,
        envvar=envvar,
        show_envvar=envvar is not None,
        help=help + (" Repeatable; or a comma-separated list in the variable." if envvar else ""),
    )


def key_options(
    *, compression: bool = False, decryption: bool = False
) -> Callable[[Command], Command]:
    """``--encryption-key`` (repeatable, or ``$LOVIA_STORE_ENCRYPTION_KEYS``: the first
    encrypts, every one decrypts), with ``compression`` ``--no-compression`` (for a
    command that writes documents) and with ``decryption`` ``--decryption-key`` (keys
    that only open: ``rekey``). The command receives ``encryption_key`` (a tuple),
    ``no_compression`` and ``decryption_key``; ``stored`` turns them into the
    Database's options."""

    def decorate(command: Command) -> Command:
        if decryption:
            command = _key_option(
                "--decryption-key",
                "LOVIA_STORE_DECRYPTION_KEYS",
                "A key that only opens stored documents (an old key, when encryption is "
                "turned off); it encrypts nothing.",
            )(command)
        if compression:
            command = click.option(
                "--no-compression",
                is_flag=True,
                help="Write documents as plain JSON text, not compressed (nor shared).",
            )(command)
        return _key_option(
            "--encryption-key",
            "LOVIA_STORE_ENCRYPTION_KEYS",
            "A key that opens stored documents; the first one given also encrypts what is "
            "written (the encryption extra).",
        )(command)

    return decorate


def copy_key_options(command: Command) -> Command:
    """``--source-encryption-key``, ``--destination-encryption-key`` and
    ``--no-compression`` (the destination's): ``key_options`` for each side of a copy.
    ``$LOVIA_STORE_ENCRYPTION_KEYS`` is not read: it could mean either side."""
    command = click.option(
        "--no-compression",
        is_flag=True,
        help="Store what is copied as plain JSON text in the destination, not compressed.",
    )(command)
    for side in ("destination", "source"):
        command = _key_option(
            f"--{side}-encryption-key",
            f"LOVIA_STORE_{side.upper()}_ENCRYPTION_KEYS",
            f"A key that opens the {side}'s stored documents"
            + ("; the first one given encrypts what is copied." if side == "destination" else "."),
        )(command)
    return command


def stored(keys: tuple[str, ...], no_compression: bool = False) -> dict[str, Any]:
    """The Database's options for ``--encryption-key`` and ``--no-compression``."""
    return {"encryption_keys": list(keys) or None, "compression": not no_compression}
