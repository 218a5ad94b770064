"""``import_file``: an export file into a database, idempotently, every record checked.

Two passes over the file. The first parses and checks every line (its JSON,
its record type, each value against its column, that children follow their
parent, that no key is given twice, the end record's counts) and looks each
record up in the destination in read transactions, refusing one that conflicts
with a stored row: a bad file or a conflicting destination is refused before
anything is written. The second pass writes, in units
(``lovia_store.lifecycle.loading``), checking again, so a writer racing the
import is still never overwritten.

Every record names its tenant. An import of every tenant puts each row into its
own; an import into one tenant takes a file of one tenant (whichever) and puts
its rows into that tenant, so a tenant's export can be loaded under another name.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO, Any, cast

from ..db import progress as progress_
from ..db.schema import _known_revisions, head_revision
from ..errors import UserError
from ..upgrade import upgrade
from . import counters
from .loading import Loader
from .records import (
    KINDS,
    ExportFormatError,
    Kind,
    Record,
    check_header,
    decode_line,
    record_from,
)
from .targets import Target, opened, scope_of, tenant_label

__all__ = ["MAX_LINE_BYTES", "ImportReport", "import_file", "read_file"]

Source = str | os.PathLike[str] | IO[bytes]

MAX_LINE_BYTES = 2**31
"""The longest line an import reads (2 GiB, its newline aside); a longer one is an
``ExportFormatError`` naming it, refused before it is read whole. No store holds a
document above about 1 GB (SQLite's ``SQLITE_MAX_LENGTH`` bounds a whole row at
1,000,000,000 bytes, PostgreSQL a value at 1 GB, MariaDB a statement at
``max_allowed_packet``, at most 1 GiB), and a line holds it as a JSON string, its
quotes escaped: twice the largest document leaves room for that."""


@dataclass
class ImportReport:
    """What an import did: rows inserted and rows already there, per record type."""

    destination: str
    inserted: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)
    dry_run: bool = False
    tenant: str | None = ""
    """The tenant the rows went into; None: each into the tenant its record names."""

    @property
    def changed(self) -> bool:
        return sum(self.inserted.values()) > 0


async def import_file(
    destination: Target,
    source: Source,
    *,
    dry_run: bool = False,
    progress: progress_.Reporter | None = None,
    tenant: str | None = None,
    all_tenants: bool = False,
) -> ImportReport:
    """Load the export file ``source`` (a path, or a seekable binary file; gzip is
    recognised by its content) into ``destination``, brought to the current schema first.

    ``all_tenants=True`` puts each row into the tenant its record names. Otherwise the
    file must hold one tenant's rows, which go into ``tenant`` when given (under
    another name than the file's, if so), else into the Database's tenant (the
    default tenant ``""`` unless it was opened with one), which must then be the
    file's: moving rows to another tenant is always said (``UserError`` otherwise).

    Idempotent: rows already there and equal are left alone. A malformed line is an
    ``ExportFormatError`` and a record that conflicts with a stored row a
    ``DestinationConflictError``, both naming the line, both before anything is
    written. ``dry_run`` does the first pass only.
    """
    report_progress = progress or progress_.current()
    async with opened(destination, verify_only=False) as db:
        scope = scope_of(tenant, all_tenants, db.tenant)
        if not dry_run:
            await upgrade(db)
        report = ImportReport(destination=db.url, dry_run=dry_run, tenant=scope)
        passes = (True,) if dry_run else (True, False)
        for check_only in passes:
            loader = Loader(db, dry_run=check_only)
            task = "checking records" if check_only else "importing records"
            records = read_file(source)
            if scope is not None:
                records = _into_tenant(records, scope, renames=tenant is not None)
            for done, record in enumerate(records, start=1):
                await loader.add(record)
                if report_progress is not None and done % 1000 == 0:
                    report_progress(task, done, None)
            await loader.flush()
            report.inserted, report.unchanged = loader.counts.inserted, loader.counts.unchanged
    return report


def _into_tenant(records: Iterator[Record], tenant: str, *, renames: bool) -> Iterator[Record]:
    """The records of a one-tenant file, each put into ``tenant``. Unless ``renames``
    (a tenant was named), the file's tenant must be ``tenant`` already."""
    found: str | None = None
    for record in records:
        mine = record.row["tenant"]
        if found is None:
            found = mine
            if not renames and mine != tenant:
                raise UserError(
                    f"the file holds {tenant_label(mine)}, not {tenant_label(tenant)}: "
                    "name the tenant to import it into (tenant=, --tenant), or import "
                    "every tenant as the file has them (all_tenants=True, --all-tenants)"
                )
        elif mine != found:
            raise ExportFormatError(
                f"the file holds {tenant_label(found)} and {tenant_label(mine)}: import "
                "it with all_tenants=True (--all-tenants), each row into its own tenant",
                line=record.line,
            )
        record.row["tenant"] = tenant
        yield record


def read_file(source: Source) -> Iterator[Record]:
    """Every data record of an export file, checked; ``ExportFormatError`` names the line
    of the first that is not valid (a truncated file: the line after the last)."""
    with ExitStack() as stack:
        stream = _open_input(stack, source)
        yield from _records(stream)


def _records(stream: IO[bytes]) -> Iterator[Record]:
    known = _known_revisions()
    counts: Counter[str] = Counter()
    parents: dict[str, Any] = {"session": None, "run": None}
    keys = _Keys()
    tally = _Tally()
    line_number = 0
    ended = False
    for line_number, text in _lines(stream):
        if ended:
            raise ExportFormatError("a record after the end record", line=line_number)
        document = decode_line(text, line_number)
        if line_number == 1:
            revision = check_header(document, known)
            if revision != head_revision():
                raise ExportFormatError(
                    f"the file is of schema revision {revision}, this lovia-store's is "
                    f"{head_revision()}: import it with the version that wrote it, then "
                    "upgrade that database and copy it",
                    line=1,
                )
            continue
        if document.get("record") == "end":
            tally.close()
            _check_end(document, counts, line_number)
            ended = True
            continue
        record = record_from(document, line_number)
        kind = KINDS[record.kind]
        keys.check(kind, record.row, line_number)
        if kind.name in parents:  # (tenant, id): the same id in two tenants is two
            parents[kind.name] = (record.row["tenant"], record.row[kind.key[1]])
        elif (
            kind.parent is not None
            and kind.parent_column is not None
            and (record.row["tenant"], record.row[kind.parent_column]) != parents[kind.parent]
        ):
            raise ExportFormatError(
                f"a {kind.name} of {kind.parent} {record.row[kind.parent_column]!r} "
                f"must follow that {kind.parent}'s record",
                line=line_number,
            )
        tally.add(kind, record.row, line_number)
        counts[record.kind] += 1
        yield record
    if line_number == 0:
        raise ExportFormatError("the file is empty", line=1)
    if not ended:
        raise ExportFormatError(
            "the file ends before its end record (truncated?)", line=line_number + 1
        )


class _Keys:
    """The keys the file has given so far, so that one given twice is refused in the
    checking pass, naming both lines, rather than by the database mid-write.

    Children follow their parent's record and their keys hold the parent's, so a
    child's keys are kept only until the next parent record: memory follows the
    number of sessions and runs, not of messages.
    """

    def __init__(self) -> None:
        self._unique = {name: _unique_columns(kind) for name, kind in KINDS.items()}
        self._seen: dict[str, dict[tuple[Any, ...], int]] = {name: {} for name in KINDS}

    def check(self, kind: Kind, row: dict[str, Any], line: int) -> None:
        for child in KINDS.values():
            if child.parent == kind.name:
                self._seen[child.name].clear()
        seen = self._seen[kind.name]
        for columns in self._unique[kind.name]:
            values = tuple(row.get(column) for column in columns)
            if None in values:  # NULL is never a duplicate (an append without a key)
                continue
            first = seen.setdefault((columns, *values), line)
            if first != line:
                named = ", ".join(f"{c}={v!r}" for c, v in zip(columns, values, strict=True))
                raise ExportFormatError(
                    f"this {kind.name} repeats the key of line {first} ({named}); "
                    "an export holds each row once",
                    line=line,
                )


class _Tally:
    """What the file holds under the open session and run, so that their counters are
    checked against it, by the rules ``lovia-store check`` applies to the tables
    (``lovia_store.lifecycle.counters``), when the next parent record (or the end)
    closes them: the error names the session's (or run's) line. Memory follows the
    number of runs a session names, not its messages."""

    def __init__(self) -> None:
        self._session: tuple[dict[str, Any], int] | None = None
        self._run: tuple[dict[str, Any], int] | None = None
        self._messages = 0
        self._top_sequence: int | None = None
        self._by_run: Counter[str] = Counter()  # messages naming each run
        self._segments: set[str] = set()
        self._top_position: int | None = None
        self._top_version = 0
        self._entries = 0
        self._top_entry = 0

    def add(self, kind: Kind, row: dict[str, Any], line: int) -> None:
        if kind.parent != "session":  # a session's records end at the next other one
            self._close_session()
        if kind.parent != "run":
            self._close_run()
        if kind.name == "session":
            self._session = (row, line)
            self._messages, self._top_sequence, self._top_position = 0, None, None
            self._by_run, self._segments, self._top_version = Counter(), set(), 0
        elif kind.name == "message":
            self._messages += 1
            self._top_sequence = max(self._top_sequence or 0, row["sequence"])
            if row.get("run_id") is not None:
                self._by_run[row["run_id"]] += 1
        elif kind.name == "segment":
            self._segments.add(row["run_id"])
            self._top_position = max(self._top_position or 0, row["position"])
        elif kind.name == "snapshot":
            self._top_version = max(self._top_version, row["version"])
        elif kind.name == "run":
            self._run = (row, line)
            self._entries, self._top_entry = 0, 0
        elif kind.name == "run_entry":
            self._entries += 1
            self._top_entry = max(self._top_entry, row["position"])

    def close(self) -> None:
        self._close_session()
        self._close_run()

    def _close_session(self) -> None:
        if self._session is None:
            return
        (row, line), self._session = self._session, None
        sid = row["session_id"]
        lacking = sum(n for run, n in self._by_run.items() if run not in self._segments)
        found = [
            *counters.message_counters(
                sid,
                row.get("message_count", 0),
                row.get("last_sequence", 0),
                self._messages,
                self._top_sequence,
                where="the file",
                tenant=row["tenant"],
            ),
            counters.run_counter(
                sid,
                row.get("run_count", 0),
                len(self._segments),
                self._top_position,
                lacking,
                where="the file",
                tenant=row["tenant"],
            ),
            counters.snapshot_counter(
                sid,
                row.get("snapshot_version", 0),
                self._top_version,
                where="the file",
                tenant=row["tenant"],
            ),
        ]
        _refuse(found, line)

    def _close_run(self) -> None:
        if self._run is None:
            return
        (row, line), self._run = self._run, None
        mismatch = counters.entry_counter(
            row["run_id"],
            row.get("entry_count", 0),
            self._entries,
            self._top_entry,
            where="the file",
            tenant=row["tenant"],
        )
        _refuse([mismatch], line)


def _refuse(found: list[counters.CounterMismatch | None], line: int) -> None:
    for mismatch in found:
        if mismatch is not None:
            raise ExportFormatError(
                f"{mismatch.detail}: an import takes only counters that agree with their "
                "rows, as the stores write them (and lovia-store check checks them)",
                line=line,
            )


def _unique_columns(kind: Kind) -> list[tuple[str, ...]]:
    """The column sets the database holds unique for ``kind``: its key and unique indexes."""
    unique = [kind.key]
    for index in kind.table.indexes:
        if index.unique:
            unique.append(tuple(column.name for column in index.columns))
    return unique


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Numbered lines, each read with a bounded ``readline``: a line longer than
    ``MAX_LINE_BYTES`` is refused having read only the bound of it (a small gzip file
    can hold a line of gigabytes). A damaged gzip stream is an ``ExportFormatError``
    at its line."""
    number = 0
    bound = MAX_LINE_BYTES
    while True:
        try:
            text = stream.readline(bound + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise ExportFormatError(f"the file cannot be read ({exc})", line=number + 1) from None
        if not text:
            return
        number += 1
        if len(text) > bound and not (len(text) == bound + 1 and text.endswith(b"\n")):
            raise ExportFormatError(
                f"the line is longer than {bound:,} bytes (MAX_LINE_BYTES): longer than "
                "any row the stores write",
                line=number,
            )
        yield number, text


def _check_end(document: dict[str, Any], counts: Counter[str], line: int) -> None:
    stated = document.get("counts")
    if not isinstance(stated, dict):
        raise ExportFormatError("the end record has no counts", line=line)
    for name in KINDS:
        if stated.get(name, 0) != counts[name]:
            raise ExportFormatError(
                f"the end record counts {stated.get(name, 0)!r} {name} records, "
                f"the file holds {counts[name]}",
                line=line,
            )


def _open_input(stack: ExitStack, source: Source) -> IO[bytes]:
    if isinstance(source, str | os.PathLike):
        raw: IO[bytes] = stack.enter_context(open(source, "rb"))  # noqa: SIM115
    else:
        raw = source
        if not raw.seekable():
            raise ExportFormatError(
                "an import reads its file twice: give a seekable file", line=None
            )
        raw.seek(0)
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        zipped = gzip.GzipFile(fileobj=raw, mode="rb")
        stack.callback(zipped.close)
        return cast(IO[bytes], zipped)
    return raw
