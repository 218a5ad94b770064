"""The one JSON codec: caller-supplied values in, stored documents out.

Encoding (``dump_document``, ``dump_object``): Python's ``json`` quietly turns
``{1: 2}`` into ``{"1": 2}`` and writes ``NaN``; pydantic writes ``NaN`` as ``null``
and a lone surrogate in a key as three U+FFFD; a driver refuses a lone surrogate
mid-call with a raw ``UnicodeEncodeError``; a recursive encoder raises
``RecursionError`` on a value nested 10,000 deep. Each would change what the caller
stored, or fail after the call began, so every such value is refused here with
``UserError``, before any SQL, and the same way by every store and integration (the
in-memory ones too): what a store accepts it reads back exactly.

Decoding (``load_documents``, ``load_document``, ``load_object``): a stored document
that does not read (broken JSON, bytes that are not UTF-8, nesting no decoder
reads, edited by another program) is a ``StoredValueError`` naming its row
(``Where``), never a raw decode error; integers of any size read back exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic_core import from_json

from .errors import StoredValueError, UserError

__all__ = [
    "MAX_DEPTH",
    "Where",
    "all_clean",
    "check_text",
    "check_value",
    "damaged",
    "dump_document",
    "dump_object",
    "dump_trusted",
    "explain_refusal",
    "is_clean",
    "load_document",
    "load_documents",
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


def check_value(
    value: Any, what: str, *, models: bool = False, opaque: tuple[type, ...] = ()
) -> None:
    """Refuse what JSON cannot carry exactly: non-finite floats, lone surrogates
    (in strings and keys), non-string keys, non-JSON types, nesting past
    ``MAX_DEPTH``. With ``models``, a pydantic model's fields are checked as an
    object's (the entries and heads a store encodes). Iterative, so a value
    nested 10,000 deep is a ``UserError``, never a ``RecursionError``.
    """
    if not is_clean(value, models=models):  # the common case, without building paths
        explain_refusal(value, what, models=models, opaque=opaque)


def explain_refusal(
    value: Any, what: str, *, models: bool = False, opaque: tuple[type, ...] = ()
) -> None:
    """``check_value``'s rules, walked with each item's path: raises ``UserError``
    saying where and what is wrong (returns when nothing is). ``opaque``: types the
    caller's encoder writes itself (zett's image bytes), passed as leaves."""
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
        if opaque and isinstance(item, opaque):
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


# -- encoding ------------------------------------------------------------------


def dump_document(
    value: Any,
    what: str,
    *,
    separators: tuple[str, str] = (",", ":"),
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
    opaque: tuple[type, ...] = (),
) -> str:
    """``value`` as JSON text exactly, or ``UserError`` saying what is wrong, never a
    raw ``TypeError``, ``ValueError`` or ``RecursionError``.

    ``check_value``'s rules first (iterative: a value nested 10,000 deep is refused
    like one nested 201 deep), then the standard library's encoder, with the
    separators and key order a peer's format needs (zett-agent writes ``", "`` and
    ``": "``), and ``default`` for the ``opaque`` types it encodes itself.
    """
    check_value(value, what, opaque=opaque)
    try:
        return json.dumps(
            value,
            ensure_ascii=False,
            allow_nan=False,
            separators=separators,
            sort_keys=sort_keys,
            default=default,
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise UserError(f"{what} cannot be stored as JSON exactly: {exc}") from None


def dump_object(value: Any, what: str) -> str:
    """Encode a JSON object exactly, or raise ``UserError`` saying what is wrong."""
    if not isinstance(value, dict):
        raise UserError(f"{what} must be a JSON object (dict), not {type(value).__name__}")
    return dump_document(value, what)


def dump_trusted(value: Any) -> str:
    """A value this package built or already checked (a projection, a document read
    back) as compact JSON: orjson's speed, and the standard library for an integer
    wider than 64 bits, which orjson refuses and JSON allows."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- decoding ------------------------------------------------------------------


Where = tuple[str, str, Callable[[int], dict[str, object]]]
"""Where stored documents come from, for the error naming a damaged one: the
table, the column, and the key of the row at an index of the documents read."""


def damaged(message: str, where: Where | None, index: int = 0) -> StoredValueError:
    """The error for the stored document at ``index`` of the rows ``where`` names."""
    if where is None:
        return StoredValueError(message, table="?", column="?", row={"index": index})
    table, column, key_of = where
    return StoredValueError(message, table=table, column=column, row=key_of(index))


def load_documents(
    rows: Sequence[str | bytes], where: Where | None = None, *, start: int = 0
) -> list[Any]:
    """Parse stored JSON documents, every integer exact.

    pydantic-core's parser keeps an integer wider than 64 bits an integer,
    which orjson turns into a float (older versions refused it), at about
    orjson's speed on a whole session's load. What it refuses and JSON allows
    (a lone surrogate escape, nesting past its limit of about 200) is read by
    the standard library. A document neither reads (broken JSON, invalid UTF-8,
    nesting past the recursion limit) is a ``StoredValueError`` naming its row
    (``where``, at position ``start`` + its index), never a raw decode error.
    """
    try:
        return [from_json(row) for row in rows]
    except ValueError:
        pass
    out: list[Any] = []
    for index, row in enumerate(rows):
        try:
            out.append(from_json(row))
            continue
        except ValueError:
            pass
        try:
            out.append(json.loads(row))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            message = f"a stored document is not JSON ({type(exc).__name__}: {exc})"
            raise damaged(message, where, start + index) from None
    return out


def load_document(text: str | bytes, where: Where | None = None, index: int = 0) -> Any:
    """One stored JSON document, as ``load_documents`` reads it."""
    return load_documents([text], where, start=index)[0]


def load_object(text: str | bytes | None, where: Where | None = None) -> dict[str, Any] | None:
    """A stored object (None for SQL NULL). One that does not read as a JSON object
    (damaged, or written by another program) is a ``StoredValueError`` naming the
    row ``where`` says, never a raw decode error."""
    if text is None:
        return None
    value = load_document(text, where)
    if not isinstance(value, dict):
        raise damaged("a stored document is not a JSON object", where)
    return value
