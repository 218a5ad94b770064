"""The counted references to shared values, checked: ``lovia_contents.refs`` against the
documents that name each value.

A value stored once (``lovia_store.db.contents``) counts the references the
documents of the three shareable columns make to it (a message's or a run's entry,
a tool effect's outcome); the change that drops the last one deletes it. So every
reference names a stored value, and each value's ``refs`` is the number of
references to it. A value with fewer references than it counts is kept for nothing
(a leak); one with more, or a reference to a value that is not stored, is what a
read fails on (rows deleted or written by other means than the stores).

Only the rows that refer to shared values are read (``has_references``: a prefix
of the stored text), and of each only the head of its text, where the references
are listed (not encrypted); the check runs in the caller's read transaction, one
snapshot of the documents and the values.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table, and_, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from ..db.contents import has_references
from ..db.documents import references
from ..db.tables import contents
from .stored import SHAREABLE, document_tables
from .targets import Scope, tenant_label

if TYPE_CHECKING:
    from .counter_mismatch import CounterMismatch

__all__ = ["reference_mismatches"]

_PAGE = 2000
_HEAD = 4096
"""Characters of a stored document read for its references: the flags, the key id and
the list of references come before the body; a longer list is read whole."""
_SEP = "\x1f"


def _after(columns: list[Any], last: tuple[Any, ...] | None) -> list[ColumnElement[bool]]:
    if last is None:
        return []
    clauses = [
        and_(*(columns[j] == last[j] for j in range(i)), columns[i] > last[i])
        for i in range(len(columns))
    ]
    return [or_(*clauses)]


def _count(conn: Connection, table: Table, column: str, scope: Scope, into: Counter[Any]) -> None:
    """Add the references ``table.column``'s documents make, by (tenant, digest)."""
    stored = table.c[column]
    key = list(table.primary_key.columns)
    head = func.substr(stored, 1, _HEAD)
    where = [has_references(stored)]
    if scope is not None:
        where.append(table.c.tenant == scope)
    last: tuple[Any, ...] | None = None
    while True:
        query = select(*key, head).where(*where, *_after(key, last)).order_by(*key).limit(_PAGE)
        rows = conn.execute(query).all()
        whole: list[tuple[Any, ...]] = []
        for row in rows:
            text = row[-1]
            if text.count(_SEP) < 3 and len(text) >= _HEAD:  # a long list: read it whole
                whole.append(tuple(row[:-1]))
                continue
            for digest in references(text):
                into[(row[0], digest)] += 1
        for values in whole:
            text = conn.execute(
                select(stored).where(*(c == v for c, v in zip(key, values, strict=True)))
            ).scalar_one()
            for digest in references(text):
                into[(values[0], digest)] += 1
        if len(rows) < _PAGE:
            return
        last = tuple(rows[-1][: len(key)])


def _mismatch(tenant: str, digest: str, says: int | None, holds: int) -> CounterMismatch:
    from .counter_mismatch import CounterMismatch  # pydantic: only for a mismatch

    value = f"shared value {digest} of {tenant_label(tenant)}"
    if says is None:
        detail = (
            f"{value} is not stored (lovia_contents has no row), and "
            f"{holds} reference{' names' if holds == 1 else 's name'} it"
        )
    else:
        detail = f"{value}: refs says {says}, the documents hold {holds} reference" + (
            "" if holds == 1 else "s"
        )
        if says == holds == 0:
            detail += " (a value nothing refers to is deleted with its last reference)"
    return CounterMismatch(
        table="lovia_contents",
        id=digest,
        tenant=tenant,
        counter="refs",
        says=0 if says is None else says,
        holds=holds,
        detail=detail,
    )


def reference_mismatches(conn: Connection, scope: Scope, limit: int) -> list[CounterMismatch]:
    """The shared values of ``scope`` (a tenant, None: every tenant) whose ``refs``
    disagree with the references counted over the shareable columns, and the
    references to values that are not stored: at most ``limit``, by tenant and digest."""
    counted: Counter[tuple[str, str]] = Counter()
    for table in document_tables():
        for column in SHAREABLE.get(table.name, ()):
            _count(conn, table, column, scope, counted)
    query = select(contents.c.tenant, contents.c.digest, contents.c.refs)
    if scope is not None:
        query = query.where(contents.c.tenant == scope)
    stored = {(t, d): int(refs) for t, d, refs in conn.execute(query)}
    found = []
    for tenant, digest in sorted(stored.keys() | counted.keys()):
        says = stored.get((tenant, digest))
        holds = counted.get((tenant, digest), 0)
        if says != holds or says == 0:
            found.append(_mismatch(tenant, digest, says, holds))
            if len(found) >= limit:
                break
    return found
