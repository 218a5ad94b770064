"""Strict JSON for caller-supplied documents (meta, metadata, tags, entries' values).

Python's ``json`` quietly turns ``{1: 2}`` into ``{"1": 2}`` and writes
``NaN``; pydantic writes ``NaN`` as ``null`` and a lone surrogate in a key as
three U+FFFD; a driver refuses a lone surrogate mid-call with a raw
``UnicodeEncodeError``. Each would change what the caller stored, or fail
after the call began, so every such value is refused here with ``UserError``,
before any SQL, and the same way by every store (the in-memory ones too):
what a store accepts it reads back exactly.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel

from .errors import StoredValueError, UserError

__all__ = ["MAX_DEPTH", "check_text", "check_value", "dump_object", "load_object"]

MAX_DEPTH = 200
"""Arrays and objects nested at most this deep in a caller's JSON value (its own
object counts as one). Deeper ones are refused: pydantic cannot serialize an
entry holding 254 levels, orjson reads at most 1,024, and the standard library
recurses on each level."""


def check_text(value: str, what: str) -> None:
    """Refuse a string no backend can store: one holding a lone surrogate (no UTF-8 form)."""
    if value.isascii():  # O(1) in CPython: the common case costs nothing
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserError(
            f"{what} is not valid Unicode: a lone surrogate "
            f"(U+{ord(value[exc.start]):04X}) at position {exc.start}"
        ) from None


def check_value(value: Any, what: str, *, models: bool = False) -> None:
    """Refuse what JSON cannot carry exactly: non-finite floats, lone surrogates
    (in strings and keys), non-string keys, non-JSON types, nesting past
    ``MAX_DEPTH``. With ``models``, a pydantic model's fields are checked as an
    object's (the entries and heads a store encodes). Iterative, so a value
    nested 10,000 deep is a ``UserError``, never a ``RecursionError``.
    """
    if _clean(value, models):  # the common case, without building paths
        return
    stack: list[tuple[Any, str, int]] = [(value, what, 0)]
    while stack:
        item, path, depth = stack.pop()
        if item is None or isinstance(item, bool | int):
            continue
        if isinstance(item, str):
            check_text(item, path)
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise UserError(f"{path} is {item!r}, which JSON cannot represent")
            continue
        if depth >= MAX_DEPTH:
            raise UserError(f"{what} is nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, list | tuple):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for key, v in item.items():
                if not isinstance(key, str):
                    raise UserError(f"{path} has a non-string key {key!r}")
                check_text(key, f"{path} key {key!r}")
                stack.append((v, f"{path}[{key!r}]", depth + 1))
            continue
        if models and isinstance(item, BaseModel):
            # A model's own depth counts as an object's (it serializes as one).
            stack.extend((v, f"{path}.{k}", depth + 1) for k, v in item.__dict__.items())
            continue
        raise UserError(f"{path} holds a {type(item).__name__}, which is not JSON")


_ATOMS = (type(None), bool, int)


def _clean(value: Any, models: bool) -> bool:
    """Whether ``check_value`` would pass ``value``: the same rules, no messages."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is str:
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return False
            continue
        if kind in _ATOMS:
            continue
        if kind is float:
            if not math.isfinite(item):
                return False
            continue
        if depth >= MAX_DEPTH:
            return False
        depth += 1
        if kind is dict:
            for key, v in item.items():
                if type(key) is not str or not (key.isascii() or _encodes(key)):
                    return False
                push((v, depth))
        elif kind is list or kind is tuple:
            for v in item:
                push((v, depth))
        elif models and isinstance(item, BaseModel):
            for v in item.__dict__.values():
                push((v, depth))
        else:
            return False  # a subclass or another type: the slow walk decides
    return True


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def dump_object(value: Any, what: str) -> str:
    """Encode a JSON object exactly, or raise ``UserError`` saying what is wrong."""
    if not isinstance(value, dict):
        raise UserError(f"{what} must be a JSON object (dict), not {type(value).__name__}")
    check_value(value, what)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def load_object(
    text: str | bytes | None, where: tuple[str, str, dict[str, object]] | None = None
) -> dict[str, Any] | None:
    """A stored object (None for SQL NULL). One that does not read as a JSON object
    (damaged, or written by another program) is a ``StoredValueError`` naming the
    row ``where`` says (table, column, key), never a raw decode error."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        problem: str | None = f"is not JSON ({type(exc).__name__}: {exc})"
    else:
        problem = None if isinstance(value, dict) else "is not a JSON object"
    if problem is not None:
        table, column, row = where or ("?", "?", {})
        raise StoredValueError(f"a stored document {problem}", table=table, column=column, row=row)
    return value  # type: ignore[no-any-return]
