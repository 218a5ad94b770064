"""The export format: one JSON record per line, every column of every row exactly.

A file starts with a header record and ends with an end record that counts
what came between, so a truncated file is told from a complete one. Between
them, session by session: the session row, then its Raw Log messages, its
segments (finished runs) and its snapshots; then the checkpoint side: each
run head followed by its entries, then tool effects, then run leases.

Records are driven by the tables in ``lovia_store.db.tables``: a record holds
one row's columns by name, so a column a migration adds travels with no
change here. Values are JSON: integers as integers, text as strings (the
``*_json`` columns hold the exact text the stores wrote, a JSON document in a
string), timestamps as ISO 8601 in UTC with microseconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any

import orjson
from sqlalchemy import BigInteger, Column, Integer, String, Table

from .._json import is_clean, load_object
from .._version import __version__
from ..checkpoints.contract import RunHead
from ..db import tables
from ..entries import ToolResultEntry
from ..entry_documents import entries_from_json_rows
from ..errors import ConflictError, StoredValueError, UserError
from ..sessions.raw_log.models import CompactedMessage
from ..validation import DEFAULT_TENANT

__all__ = [
    "FORMAT",
    "KINDS",
    "VERSION",
    "DestinationConflictError",
    "ExportFormatError",
    "Kind",
    "Record",
    "decode_line",
    "encode_record",
    "end_line",
    "header_line",
    "kind_of",
]

FORMAT = "lovia-store-export"
VERSION = 1
"""Bumped when a reader of the previous version could misread a file; new columns
do not bump it (a reader refuses a column its schema does not have)."""

_INT_RANGES = {BigInteger: 63, Integer: 31}


class ExportFormatError(UserError):
    """A line of an export file is not a valid record; ``line`` is its number (1-based)."""

    def __init__(self, message: str, *, line: int | None) -> None:
        super().__init__(message if line is None else f"line {line}: {message}")
        self.line = line


class DestinationConflictError(ConflictError):
    """The destination already holds a different row under a record's key; nothing of
    the batch that met it was written. ``line`` is the record's line in the file (None
    for a copy)."""

    def __init__(self, *, kind: str, key: Mapping[str, Any], line: int | None, detail: str) -> None:
        where = "" if line is None else f"line {line}: "
        shown = ", ".join(f"{k}={v!r}" for k, v in key.items())
        super().__init__(
            f"{where}the destination already holds a different {kind} ({shown}): {detail}"
        )
        self.kind = kind
        self.key = dict(key)
        self.line = line


@dataclass(frozen=True)
class Kind:
    """One record type: its table, the key that identifies a row, the order rows are read
    in, and the parent record it follows (None for the top-level ones)."""

    name: str
    table: Table
    order: tuple[str, ...]
    """The order rows are read in within a tenant (and, for a child, within its parent)."""
    parent: str | None = None
    parent_column: str | None = None

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.table.primary_key.columns)


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("session", tables.sessions, ("session_id",)),
        Kind("message", tables.messages, ("sequence",), "session", "session_id"),
        Kind("segment", tables.session_runs, ("position", "run_id"), "session", "session_id"),
        Kind("snapshot", tables.snapshots, ("version",), "session", "session_id"),
        Kind("run", tables.run_heads, ("run_id",)),
        Kind("run_entry", tables.run_entries, ("position",), "run", "run_id"),
        Kind("tool_effect", tables.tool_effects, ("run_id", "call_id")),
        Kind("run_lease", tables.run_leases, ("run_id",)),
    )
}
"""Every record type, in the order a file holds them (and rows are inserted in)."""


def kind_of(name: str) -> Kind:
    return KINDS[name]


@dataclass(slots=True)
class Record:
    """One row: its record type, its columns by name (Python values), its line in a file."""

    kind: str
    row: dict[str, Any]
    line: int | None = field(default=None)


# -- encoding -----------------------------------------------------------------


def encode_record(record: Record) -> bytes:
    """The record as one line (UTF-8 JSON, no newline)."""
    document = {"record": record.kind, **record.row}
    for name in _time_columns(record.kind):
        value = document.get(name)
        if value is not None:
            document[name] = value.astimezone(UTC).isoformat(timespec="microseconds")
    return orjson.dumps(document)


@cache
def _time_columns(kind: str) -> tuple[str, ...]:
    return tuple(name for name, rule in _rules(kind).items() if rule.python_type is datetime)


def header_line(
    schema_revision: str, *, dialect: str, tenant: str | None = DEFAULT_TENANT
) -> bytes:
    """The first line; ``tenant`` the one tenant exported, None for every tenant (each
    record names its own tenant either way)."""
    scope: dict[str, Any] = {"tenants": "all"} if tenant is None else {"tenant": tenant}
    return orjson.dumps(
        {
            "record": "header",
            **scope,
            "format": FORMAT,
            "version": VERSION,
            "lovia_store": __version__,
            "schema_revision": schema_revision,
            "source_dialect": dialect,
            "exported_at": datetime.now(UTC).isoformat(timespec="microseconds"),
        }
    )


def end_line(counts: Mapping[str, int]) -> bytes:
    return orjson.dumps({"record": "end", "counts": dict(counts)})


# -- decoding -----------------------------------------------------------------


@dataclass(frozen=True)
class _ColumnRule:
    name: str
    python_type: type
    nullable: bool
    required: bool
    max_length: int | None
    bits: int | None
    is_json: bool


@cache
def _rules(kind: str) -> dict[str, _ColumnRule]:
    return {c.name: _rule(c) for c in KINDS[kind].table.columns}


def _rule(column: Column[Any]) -> _ColumnRule:
    impl = getattr(column.type, "impl", column.type)  # a TypeDecorator's own type
    python_type = impl.python_type
    bits = next((b for t, b in _INT_RANGES.items() if isinstance(column.type, t)), None)
    return _ColumnRule(
        name=column.name,
        python_type=python_type,
        nullable=bool(column.nullable) and not column.primary_key,
        # A record without a tenant is of the default one (a file from before tenants).
        required=(column.primary_key and column.name != "tenant")
        or not (column.nullable or column.server_default is not None),
        max_length=impl.length if isinstance(impl, String) else None,
        bits=bits,
        is_json=column.name.endswith("_json"),
    )


def decode_line(text: bytes | str, line: int) -> dict[str, Any]:
    """The JSON object on a line, or ``ExportFormatError`` naming it."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ExportFormatError(f"not a JSON document ({exc})", line=line) from None
    if not isinstance(document, dict):
        raise ExportFormatError("a record is a JSON object", line=line)
    return document


def check_header(document: dict[str, Any], known_revisions: frozenset[str]) -> str:
    """The schema revision a valid header names; ``ExportFormatError`` otherwise."""
    if document.get("record") != "header" or document.get("format") != FORMAT:
        raise ExportFormatError(f"not a {FORMAT} file (its first line is no header)", line=1)
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION:
        raise ExportFormatError(
            f"format version {version!r}: this lovia-store ({__version__}) reads "
            f"version {VERSION} and earlier",
            line=1,
        )
    revision = document.get("schema_revision")
    if not isinstance(revision, str) or revision not in known_revisions:
        raise ExportFormatError(
            f"schema revision {revision!r} is unknown to this lovia-store ({__version__}): "
            "a newer version wrote the file",
            line=1,
        )
    return revision


def record_from(document: dict[str, Any], line: int) -> Record:
    """A data record from its JSON object, every value checked against its column."""
    name = document.pop("record", None)
    if not isinstance(name, str) or name not in KINDS:
        raise ExportFormatError(f"unknown record type {name!r}", line=line)
    rules = _rules(name)
    row: dict[str, Any] = {}
    for column, value in document.items():
        rule = rules.get(column)
        if rule is None:
            raise ExportFormatError(f"a {name} has no column {column!r}", line=line)
        row[column] = _decode_value(name, rule, value, line)
    for rule in rules.values():
        if rule.required and rule.name not in row:
            raise ExportFormatError(f"a {name} needs {rule.name!r}", line=line)
    row.setdefault("tenant", DEFAULT_TENANT)
    _check_as_stored(name, row, line)
    return Record(name, row, line)


def _check_as_stored(kind: str, row: dict[str, Any], line: int) -> None:
    """What only the stores could have written: counters and positions in their range,
    and each document one the stores read back (an entry, a head, a JSON object), so
    an imported row never fails a later read (one damaged head would fail every
    ``list_runs``)."""
    for column, least in _LEAST.get(kind, {}).items():
        value = row.get(column)
        if value is not None and value < least:
            raise ExportFormatError(f"{kind}.{column} {value} is below {least}", line=line)
    for column, read in _DOCUMENTS.get(kind, {}).items():
        value = row.get(column)
        if value is None:
            continue
        try:
            read(value, row)
        except (StoredValueError, ValueError) as exc:
            raise ExportFormatError(
                f"{kind}.{column} is not what the stores write: {exc}", line=line
            ) from None


def _entry(text: str, row: dict[str, Any]) -> None:
    entries_from_json_rows([text])


def _object(text: str, row: dict[str, Any]) -> None:
    load_object(text)


def _head(text: str, row: dict[str, Any]) -> None:
    head = RunHead.model_validate_json(text)
    if row["status"] != head.status:
        raise ValueError(f"the run's status {row['status']!r} is not its head's {head.status!r}")


def _tool_result(text: str, row: dict[str, Any]) -> None:
    ToolResultEntry.model_validate_json(text)


def _summary(text: str, row: dict[str, Any]) -> None:
    CompactedMessage.model_validate_json(text)


_DOCUMENTS: dict[str, dict[str, Callable[[str, dict[str, Any]], None]]] = {
    "message": {
        "entry_json": _entry,
        "envelope_json": _object,
        "metadata_json": _object,
        "tags_json": _object,
    },
    "segment": {"meta_json": _object},
    "snapshot": {"summary_json": _summary},
    "run": {"head_json": _head},
    "run_entry": {"entry_json": _entry},
    "tool_effect": {"result_json": _tool_result},
}
_LEAST: dict[str, dict[str, int]] = {
    "session": {
        "last_sequence": 0,
        "message_count": 0,
        "run_count": 0,
        "snapshot_version": 0,
        "forked_at_entry": 0,
    },
    "message": {"sequence": 1, "duration_ns": 0},
    "segment": {"position": 1, "first_sequence": 1, "entry_count": 0},
    "snapshot": {"version": 1, "compacted_through_sequence": 1},
    "run": {"entry_count": 0},
    "run_entry": {"position": 1},
}


def _decode_value(kind: str, rule: _ColumnRule, value: Any, line: int) -> Any:
    where = f"{kind}.{rule.name}"
    if value is None:
        if not rule.nullable:
            raise ExportFormatError(f"{where} cannot be null", line=line)
        return None
    if rule.python_type is datetime:
        return _decode_time(where, value, line)
    if rule.python_type is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ExportFormatError(f"{where} is an integer, not {value!r}", line=line)
        bits = rule.bits or 63
        if not -(2**bits) <= value < 2**bits:
            raise ExportFormatError(f"{where} {value} is out of range", line=line)
        return value
    if not isinstance(value, str):
        raise ExportFormatError(f"{where} is a string, not {type(value).__name__}", line=line)
    if rule.max_length is not None and len(value) > rule.max_length:
        raise ExportFormatError(f"{where} is longer than {rule.max_length} characters", line=line)
    if "\x00" in value:
        raise ExportFormatError(f"{where} holds a NUL character", line=line)
    if rule.is_json:
        try:
            _check_json(_parse_json(value))
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise ExportFormatError(f"{where} is not a JSON document ({exc})", line=line) from None
    return value


def _parse_json(text: str) -> Any:
    """A stored document, parsed to be checked. An integer past a double's range, which
    the stores keep exactly and orjson does not read, is read by the standard library,
    held to the stores' rules (no NaN, infinity or lone surrogate); whatever else orjson
    refuses stays refused, with orjson's message."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        refused = exc
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise refused from None
    if not is_clean(document):
        raise refused
    return document


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_json(value: Any) -> None:
    """orjson reads no NaN or lone surrogate already; a float that overflowed is inf."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a number that is not finite")


def _decode_time(where: str, value: Any, line: int) -> datetime:
    if not isinstance(value, str):
        raise ExportFormatError(f"{where} is an ISO 8601 timestamp, not {value!r}", line=line)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ExportFormatError(
            f"{where} {value!r} is not an ISO 8601 timestamp", line=line
        ) from None
    if moment.tzinfo is None:
        raise ExportFormatError(f"{where} {value!r} has no UTC offset", line=line)
    return moment.astimezone(UTC)
