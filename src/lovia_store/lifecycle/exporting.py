"""``export``: a database (or some of its sessions) to a file, one record per line."""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO, cast

from ..db import progress as progress_
from ..db.database import Database
from ..db.schema import head_revision
from ..errors import UserError
from .reading import count_rows, read_records
from .records import KINDS, encode_record, end_line, header_line
from .targets import Scope, Target, opened, scope_of, tenant_label

__all__ = ["ExportReport", "export"]


@dataclass
class ExportReport:
    """What an export wrote: records per type, and the source's display URL."""

    source: str
    counts: Counter[str] = field(default_factory=Counter)
    tenant: str | None = ""
    """The tenant exported; None: every tenant."""

    @property
    def records(self) -> int:
        return sum(self.counts.values())


async def export(
    source: Target,
    destination: str | os.PathLike[str] | IO[bytes],
    *,
    session_ids: Iterable[str] | None = None,
    compress: bool | None = None,
    progress: progress_.Reporter | None = None,
    tenant: str | None = None,
    all_tenants: bool = False,
) -> ExportReport:
    """Write every record of ``source`` (or of the sessions named, with the runs that
    append to them) to ``destination``: a path (gzip-compressed when it ends in
    ``.gz``, or when ``compress`` says so) or a binary file the caller owns.

    One tenant is exported: ``tenant``, else the Database's (the default tenant
    ``""`` unless it was opened with one); ``all_tenants=True`` exports every tenant.
    Every record names its tenant and the header says which were exported, so an
    import puts each row back into its own tenant (or, for one tenant, into another).

    The source is never migrated: one that needs ``lovia-store upgrade`` is refused
    (``SchemaNotCurrentError``). A session named that does not exist is a ``UserError``.
    """
    report_progress = progress or progress_.current()
    chosen = None if session_ids is None else sorted(set(_checked_ids(session_ids)))
    async with opened(source, verify_only=True) as db:
        scope = scope_of(tenant, all_tenants, db.tenant)
        if chosen is not None and scope is None:
            raise UserError("session ids name sessions of one tenant: give tenant=, not all")
        await db.ensure_schema()
        report = ExportReport(source=db.url, tenant=scope)
        if chosen is not None:
            await _check_exist(db, scope, chosen)
        total = (
            len(chosen)
            if chosen is not None
            else (await count_rows(db, ["session"], scope))["session"]
        )
        with ExitStack() as stack:
            out = _open_output(stack, destination, compress)
            out.write(header_line(head_revision(), dialect=db.dialect, tenant=scope) + b"\n")
            async for record in read_records(db, scope, session_ids=chosen):
                out.write(encode_record(record) + b"\n")
                report.counts[record.kind] += 1
                if record.kind == "session" and report_progress is not None:
                    report_progress("sessions", report.counts["session"], total)
            out.write(end_line({k: report.counts[k] for k in KINDS}) + b"\n")
    return report


def _checked_ids(session_ids: Iterable[str]) -> list[str]:
    if isinstance(session_ids, str):
        raise UserError("session_ids is a collection of session ids, not one string")
    ids = list(session_ids)
    for session_id in ids:
        if not isinstance(session_id, str) or not session_id:
            raise UserError(f"a session id is a non-empty string, not {session_id!r}")
    return ids


async def _check_exist(db: Database, tenant: Scope, session_ids: list[str]) -> None:
    from .reading import read_sessions

    found = {row["session_id"] async for row in read_sessions(db, tenant, session_ids)}
    missing = [s for s in session_ids if s not in found]
    if missing:
        assert tenant is not None
        named = ", ".join(repr(s) for s in missing[:5])
        where = f" in {tenant_label(tenant)}" if tenant else ""
        raise UserError(f"{db.url}: no session {named}{where}")


@contextlib.contextmanager
def _whole_or_nothing(path: str) -> Iterator[IO[bytes]]:
    """A new owner-only file (as every file lovia-store creates: conversations are
    personal data) that takes ``path``'s place once whole: a failed export leaves no
    partial file, and a file already at ``path`` as it was."""
    folder, name = os.path.split(os.path.abspath(path))
    descriptor, partial = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".partial")
    try:
        with os.fdopen(descriptor, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise


def _open_output(
    stack: ExitStack, destination: str | os.PathLike[str] | IO[bytes], compress: bool | None
) -> IO[bytes]:
    if isinstance(destination, str | os.PathLike):
        path = os.fspath(destination)
        if compress is None:
            compress = path.endswith(".gz")
        raw: IO[bytes] = stack.enter_context(_whole_or_nothing(path))
    else:
        raw = destination
    if compress:
        zipped = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)
        stack.callback(zipped.close)
        return cast(IO[bytes], zipped)
    return raw
