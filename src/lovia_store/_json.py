"""Strict JSON for caller-supplied documents (meta, metadata, tags).

Python's ``json`` quietly turns ``{1: 2}`` into ``{"1": 2}`` and writes
``NaN``; both would change what the caller stored, so they are refused.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import UserError

__all__ = ["dump_object", "load_object"]


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UserError(f"{path} is {value!r}, which JSON cannot represent")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise UserError(f"{path} has a non-string key {key!r}")
            _check(item, f"{path}[{key!r}]")
        return
    raise UserError(f"{path} holds a {type(value).__name__}, which is not JSON")


def dump_object(value: Any, what: str) -> str:
    """Encode a JSON object exactly, or raise ``UserError`` saying what is wrong."""
    if not isinstance(value, dict):
        raise UserError(f"{what} must be a JSON object (dict), not {type(value).__name__}")
    _check(value, what)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def load_object(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)
