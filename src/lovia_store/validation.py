"""The argument checks every store shares, made before any SQL: a driver never sees a bad value."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import UserError

__all__ = [
    "DEFAULT_TENANT",
    "check_call_ids",
    "check_count",
    "check_effect_ids",
    "check_id",
    "check_integer",
    "check_tenant",
]

DEFAULT_TENANT = ""
"""The tenant of a store built without one, and of every row written before tenants
existed: a database with one customer never has to name it."""

_MAX_TENANT = 64


def check_id(value: object, what: str) -> str:
    """Every id's one check (sessions, runs, requests, parents), before any SQL."""
    if not isinstance(value, str) or not value:
        raise UserError(f"{what} must be a non-empty string, got {value!r}")
    return _storable(value, what, 255)


def check_tenant(value: object) -> str:
    """A tenant is any string up to 64 characters; ``""`` is the default tenant."""
    if not isinstance(value, str):
        raise UserError(f"tenant must be a string, got {value!r}")
    return _storable(value, "tenant", _MAX_TENANT)


def _storable(value: str, what: str, limit: int) -> str:
    if len(value) > limit:
        raise UserError(f"{what} is {len(value)} characters long; the limit is {limit}")
    nul = value.find("\x00")
    if nul >= 0:  # PostgreSQL's text cannot hold it: refused on every backend alike
        raise UserError(f"{what} contains a NUL character at position {nul}")
    if not value.isascii():
        # A lone surrogate (what json.loads gives for "\ud800") has no UTF-8 form:
        # no backend can store or look it up, and a driver refusing it mid-call
        # is not a misuse error.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UserError(
                f"{what} is not valid Unicode: a lone surrogate at position {exc.start}"
            ) from None
    return value


def check_call_ids(call_ids: Sequence[object]) -> None:
    """A session row keeps its entry's tool call id in an id column: the id rules
    hold for it (an entry without one, or with an empty one, has nothing to check)."""
    for index, call_id in enumerate(call_ids):
        if call_id is not None and call_id != "":
            check_id(call_id, f"entries[{index}].call_id")


_MAX_INT = 2**63 - 1  # a BIGINT: what every backend can bind


def check_integer(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{what} must be an integer, got {value!r}")
    if value > _MAX_INT:
        raise UserError(f"{what} must be at most 2**63-1, got {value}")
    return value


def check_count(value: object, what: str, *, minimum: int) -> int:
    """An integer ``>= minimum`` (``limit`` 1, ``offset`` 0, sequences 0 or 1)."""
    number = check_integer(value, what)
    if number < minimum:
        rule = "positive" if minimum == 1 else f">= {minimum}"
        raise UserError(f"{what} must be {rule}, got {number}")
    return number


def check_effect_ids(run_id: object, call_id: object, tool_name: object) -> None:
    """The one id rule for an effect's keys: a driver never sees a bad one.

    MariaDB's ``INSERT IGNORE`` would cut an over-long call id to its column,
    so two distinct long ids would be the same effect: refused here instead.
    """
    check_id(run_id, "run_id")
    check_id(call_id, "call_id")
    check_id(tool_name, "tool_name")
