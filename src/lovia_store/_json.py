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
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from .errors import StoredValueError, UserError

__all__ = [
    "MAX_DEPTH",
    "all_clean",
    "check_text",
    "check_value",
    "dump_object",
    "explain_refusal",
    "is_clean",
    "load_object",
]

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
    if not is_clean(value, models=models):  # the common case, without building paths
        explain_refusal(value, what, models=models)


def explain_refusal(value: Any, what: str, *, models: bool = False) -> None:
    """``check_value``'s rules, walked with each item's path: raises ``UserError``
    saying where and what is wrong (returns when nothing is)."""
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


def is_clean(value: Any, *, models: bool = False, text: bool = True) -> bool:
    """``check_value``'s rules, with no messages: True when it would pass ``value``.
    False refuses a value of JSON's own types; a subclass (an ``IntEnum``) or
    another type is left to ``explain_refusal``, which judges it.

    ``text=False`` leaves the lone surrogates of strings (not of keys) to a
    caller whose encoder refuses them: pydantic's does, and scanning non-ASCII
    text for them is most of the check's cost. Keys are scanned still (pydantic
    writes a lone surrogate in a model's dict key as U+FFFD).

    It runs on every append's entries and head, so it is written for speed:
    leaves (most of a value) are judged where their container is walked and only
    containers go on the stack; a model class is recognised by a set lookup
    (an ``isinstance`` against pydantic's metaclass costs more than a field's check).
    """
    kind = type(value)
    if kind is str:
        return not text or value.isascii() or _encodes(value)
    if kind is float:
        return math.isfinite(value)
    if value is None or kind is int or kind is bool:
        return True
    return _walk([(value, 0)], models, text)


def all_clean(values: Iterable[Any], *, models: bool = False, text: bool = True) -> bool:
    """``is_clean`` of every one of ``values`` (containers or models), in one walk:
    a run's entries cost one call, not one each."""
    return _walk([(value, 0) for value in values], models, text)


def _walk(stack: list[tuple[Any, int]], models: bool, text: bool) -> bool:
    """``is_clean``'s walk of the containers on ``stack`` (value, depth)."""
    pop, push, finite = stack.pop, stack.append, math.isfinite
    while stack:
        item, depth = pop()
        if depth >= MAX_DEPTH:
            return False
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str or not (key.isascii() or _encodes(key)):
                    return False
            children: Iterable[Any] = item.values()
        elif kind is list or kind is tuple:
            children = item
        elif models and (kind in _MODELS or _is_model(kind)):
            children = item.__dict__.values()
        else:
            return False  # a subclass or another type: the slow walk decides
        depth += 1
        for child in children:
            kind = type(child)
            if kind is str:
                if text and not child.isascii():
                    try:
                        child.encode("utf-8")
                    except UnicodeEncodeError:
                        return False
            elif kind is float:
                if not finite(child):
                    return False
            elif not (child is None or kind is int or kind is bool):
                push((child, depth))
    return True


_MODELS: set[type] = set()
"""Model classes ``is_clean`` has met (a bounded number: the entry and head models)."""


def _is_model(kind: type) -> bool:
    if not issubclass(kind, BaseModel):
        return False
    if len(_MODELS) < 1024:
        _MODELS.add(kind)
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
