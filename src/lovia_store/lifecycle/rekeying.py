"""``rekey``: every stored document written again as the Database now says.

Keys rotate by putting a new key first (``encryption_keys=[new, old]``) and
rekeying: every document sealed with another key is opened and sealed again with
the new one, after which the old key can go. The same walk encrypts the rows
written in clear when the Database has keys; compresses the long plain documents
(rows written before revision 0010, or with compression off) when it compresses;
and, on a Database with neither compression nor keys, writes every document back
as plain JSON text, which revision 0010's downgrade needs. ``decryption_keys``
open what the Database's own keys do not (the old keys, when encryption is
turned off).

Every table's documents are walked in key order, ``batch_size`` rows a
transaction: a batch reads its rows (locked, on the servers), decodes them, stores
them again (counting the references the new forms make to shared values), releases
the references of the old forms (a value nothing refers to any more goes in the
same transaction) and writes the rows. Only rows holding a document not yet in the
current form are selected (a test on the stored text's head, in SQL), so a rekey
killed at any point is finished by running it again, which skips what is done.
Last, the shared values (``lovia_contents``) still sealed otherwise than the
current key are sealed again; re-encoding the documents has normally replaced them
already (a value's digest is keyed by the first key: under a new one it changes).

What a rekey replaces is gone from the tables, not always from the files: a SQLite
file keeps freed pages, and copies a page split left behind, until it is rewritten
(``vacuum=True``: ``VACUUM`` afterwards); PostgreSQL keeps dead rows until its own
vacuum, MariaDB until its purge.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, func, not_, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from ..db import progress as progress_
from ..db.contents import (
    codec_of,
    read_documents,
    release_documents,
    store_documents,
    use_codec,
)
from ..db.database import Database
from ..db.documents import MARK, DocumentCodec
from ..db.encryption import KEY_ID_LENGTH, KeySource, key_sets
from ..db.tables import contents
from ..errors import UserError
from ..validation import check_count
from .stored import DOCUMENTS, document_tables, shareable
from .targets import Scope, Target, opened, scope_of

__all__ = ["MAX_BATCH", "RekeyReport", "rekey"]

MAX_BATCH = 5000
_SEP = "\x1f"
_SEALED_FLAGS = ("e", "re", "ze", "rze")
"""The flags of a sealed document (``e`` comes last: ``lovia_store.db.documents``)."""
VALUES = contents.name


@dataclass
class RekeyReport:
    """What a rekey wrote: rows per table (``lovia_contents``: shared values sealed
    again), in how many transactions, of which tenants (None: every tenant), and
    whether a SQLite file was vacuumed."""

    database: str
    tenant: str | None = ""
    rewritten: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    seconds: float = 0.0
    vacuum: str | None = None
    """``"full"`` when a SQLite file was rewritten afterwards."""

    @property
    def rows(self) -> int:
        return sum(self.rewritten.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "tenant": self.tenant,
            "rewritten": {name: self.rewritten[name] for name in _TASKS},
            "rows": self.rows,
            "batches": self.batches,
            "seconds": round(self.seconds, 3),
            "vacuum": self.vacuum,
        }


_TASKS = (*(t.name for t in document_tables()), VALUES)


# -- what is current ---------------------------------------------------------------


class _Form:
    """The form the Database writes now, for one tenant: in Python (``current``) and
    in SQL (``pending``, its negation, the rows a batch selects)."""

    def __init__(self, codec: DocumentCodec, tenant: str) -> None:
        keys = codec.keys(tenant)
        self.key_id = None if keys is None else keys.current.id
        self.compression = codec.compression
        self.threshold = codec.threshold

    def current(self, stored: str) -> bool:
        """Whether ``stored`` is as the Database writes now (a document in no known
        form is not: decoding it names its row)."""
        if not stored.startswith(MARK):
            return self.key_id is None and (not self.compression or len(stored) < self.threshold)
        head = stored[1:].split(_SEP, 2)
        if len(head) < 3:
            return False
        flags, key_id = head[0], head[1]
        if self.key_id is not None:
            if not flags.endswith("e") or key_id != self.key_id:
                return False
            if not self.compression:
                return flags == "e"
            # Sealed whole, as written with compression off: compressed now if long.
            return flags != "e" or len(stored) < self.threshold
        return self.compression and not flags.endswith("e")

    def pending(self, column: ColumnElement[str]) -> ColumnElement[bool]:
        """SQL: ``column`` holds a document not in the current form (at least those:
        a long document stored whole, plain or sealed, that does not compress is
        selected, and left alone)."""
        if self.key_id is not None:
            whole = column.like(f"{MARK}e{_SEP}{self.key_id}{_SEP}%")
            if not self.compression:
                return and_(column.is_not(None), not_(whole))
            sealed = [column.like(f"{MARK}{f}{_SEP}{self.key_id}{_SEP}%") for f in _SEALED_FLAGS]
            sealed_long = and_(whole, func.length(column) >= self.threshold)
            return and_(column.is_not(None), or_(not_(or_(*sealed)), sealed_long))
        if not self.compression:
            return column.like(f"{MARK}%")
        sealed = [column.like(f"{MARK}{f}{_SEP}%") for f in _SEALED_FLAGS]
        plain_long = and_(not_(column.like(f"{MARK}%")), func.length(column) >= self.threshold)
        return or_(*sealed, plain_long)

    def same(self, before: str, after: str) -> bool:
        """Whether ``after`` stores ``before`` as it already was: the same text, or both
        sealed whole with the current key (a new nonce changes nothing else), which the
        row keeps (neither refers to a shared value)."""
        if after == before:
            return True
        if self.key_id is None:
            return False
        whole = f"{MARK}e{_SEP}{self.key_id}{_SEP}"
        return before.startswith(whole) and after.startswith(whole)

    def value_current(self, head: bytes) -> bool:
        """Whether a shared value (its first bytes) is sealed as it would be now."""
        if self.key_id is None:
            return head[:1] != b"e"
        return head[:1] == b"e" and head[1 : 1 + KEY_ID_LENGTH] == self.key_id.encode()


def _reading_codec(codec: DocumentCodec, extra: KeySource | None) -> DocumentCodec:
    """``codec`` with ``extra`` keys beside its own to open what is stored (its first
    key, if any, still first); ``codec`` itself without extra keys."""
    more = key_sets(extra)
    if more is None:
        return codec

    def keys_of(tenant: str) -> list[bytes]:
        secrets: list[bytes] = []
        for found in (codec.keys(tenant), more(tenant)):
            if found is not None:
                secrets += [k.secret for k in found.keys if k.secret not in secrets]
        return secrets

    return DocumentCodec(
        compression=codec.compression, threshold=codec.threshold, encryption_keys=keys_of
    )


# -- one batch ---------------------------------------------------------------------


def _after(columns: list[Any], last: tuple[Any, ...] | None) -> list[ColumnElement[bool]]:
    """Rows past ``last`` in ``columns``' order (keyset paging)."""
    if last is None:
        return []
    return [
        or_(
            *(
                and_(*(columns[j] == last[j] for j in range(i)), columns[i] > last[i])
                for i in range(len(columns))
            )
        )
    ]


class _Walk:
    """One table's documents of one tenant, batch after batch."""

    def __init__(
        self, table: Table, tenant: str, form: _Form, reading: DocumentCodec, size: int
    ) -> None:
        self.table = table
        self.tenant = tenant
        self.form = form
        self.reading = reading
        self.size = size
        self.key = list(table.primary_key.columns)
        self.columns = DOCUMENTS[table.name]
        self.pending = or_(*(form.pending(table.c[name]) for name in self.columns))
        self.last: tuple[Any, ...] | None = None

    def count(self, conn: Connection) -> int:
        query = select(func.count()).select_from(self.table)
        query = query.where(self.table.c.tenant == self.tenant, self.pending)
        return int(conn.execute(query).scalar_one())

    def batch(self, conn: Connection) -> tuple[int, int, tuple[Any, ...] | None]:
        """Rekey the next batch: (rows read, rows written, the last key read)."""
        writing = codec_of(conn)
        table = self.table
        query = (
            select(*self.key, *(table.c[name] for name in self.columns))
            .where(table.c.tenant == self.tenant, self.pending, *_after(self.key, self.last))
            .order_by(*self.key)
            .limit(self.size)
        )
        if conn.dialect.name != "sqlite":
            query = query.with_for_update()
        rows = conn.execute(query).all()
        if not rows:
            return 0, 0, self.last
        width = len(self.key)
        keys = [tuple(row[:width]) for row in rows]
        changed: list[dict[str, str]] = [{} for _ in rows]
        released: list[str] = []
        for offset, name in enumerate(self.columns):
            stored: list[str | None] = [row[width + offset] for row in rows]
            chosen = [
                i
                for i, text in enumerate(stored)
                if text is not None and not self.form.current(text)
            ]
            if not chosen:
                continue
            old = [text for text in (stored[i] for i in chosen) if text is not None]

            def key_of(index: int, at: list[int] = chosen) -> dict[str, object]:
                return {c.name: value for c, value in zip(self.key, keys[at[index]], strict=True)}

            use_codec(conn, self.reading)
            try:
                texts = read_documents(conn, self.tenant, old, (table.name, name, key_of))
            finally:
                use_codec(conn, writing)
            share = shareable(table.name, name)
            new = store_documents(conn, self.tenant, texts, shareable=share)
            if share:
                released += old
            for i, before, after in zip(chosen, old, new, strict=True):
                if not self.form.same(before, after):
                    changed[i][name] = after
        release_documents(conn, self.tenant, released)  # after the new forms counted theirs
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for key, values in zip(keys, changed, strict=True):
            if values:
                bound: dict[str, Any] = {
                    f"k_{c.name}": v for c, v in zip(self.key, key, strict=True)
                }
                bound.update({f"v_{name}": text for name, text in values.items()})
                by_columns.setdefault(tuple(sorted(values)), []).append(bound)
        for names, params in by_columns.items():
            statement = (
                update(table)
                .where(*(c == bindparam(f"k_{c.name}", type_=c.type) for c in self.key))
                .values({name: bindparam(f"v_{name}", type_=table.c[name].type) for name in names})
            )
            conn.execute(statement, params)
        return len(rows), sum(1 for values in changed if values), keys[-1]


class _Values:
    """The shared values of one tenant sealed otherwise than the current key says."""

    def __init__(self, tenant: str, form: _Form, reading: DocumentCodec, size: int) -> None:
        self.tenant = tenant
        self.form = form
        self.reading = reading
        self.size = size
        self.last: str | None = None

    def batch(self, conn: Connection) -> tuple[int, int, str | None]:
        c = contents.c
        query = select(c.digest, func.substr(c.data, 1, 1 + KEY_ID_LENGTH)).where(
            c.tenant == self.tenant
        )
        if self.last is not None:
            query = query.where(c.digest > self.last)
        rows = conn.execute(query.order_by(c.digest).limit(self.size)).all()
        if not rows:
            return 0, 0, self.last
        stale = [digest for digest, head in rows if not self.form.value_current(bytes(head))]
        if stale:
            found = conn.execute(
                select(c.digest, c.data)
                .where(c.tenant == self.tenant, c.digest.in_(stale))
                .with_for_update()
            ).all()
            writing = codec_of(conn)
            params = []
            for digest, data in found:
                where = (VALUES, "data", lambda _i, d=digest: {"tenant": self.tenant, "digest": d})
                value = self.reading.unpack(self.tenant, digest, bytes(data), where)
                packed = writing.pack(self.tenant, digest, value)
                params.append({"k_digest": digest, "v_data": packed})
            if params:
                conn.execute(
                    update(contents)
                    .where(c.tenant == self.tenant, c.digest == bindparam("k_digest"))
                    .values(data=bindparam("v_data", type_=c.data.type)),
                    params,
                )
        return len(rows), len(stale), rows[-1][0]


# -- the walk ----------------------------------------------------------------------


async def _tenants(db: Database, scope: Scope) -> list[str]:
    if scope is not None:
        return [scope]
    tables = [*document_tables(), contents]

    def work(conn: Connection) -> list[str]:
        found: set[str] = set()
        for table in tables:
            found.update(conn.execute(select(table.c.tenant).distinct()).scalars())
        return sorted(found)

    return await db.read(work)


async def rekey(
    target: Target,
    *,
    decryption_keys: KeySource | None = None,
    tenant: str | None = None,
    all_tenants: bool = False,
    batch_size: int = 500,
    progress: progress_.Reporter | None = None,
    vacuum: bool = False,
) -> RekeyReport:
    """Write every stored document of ``target`` again as its Database now stores them
    (``Database(compression=, encryption_keys=)``): sealed with the first key, or in
    clear, compressed or plain JSON text; see the module's docstring.

    ``decryption_keys`` (a list, or a function from a tenant to its list) open what is
    stored beside the Database's own keys, and seal nothing: the old keys when
    encryption is turned off. One tenant is rekeyed: ``tenant``, else the Database's
    (the default tenant ``""`` unless it was opened with one); ``all_tenants=True``
    rekeys every tenant. At most ``batch_size`` rows a transaction. A document that
    does not open is an ``EncryptionKeyError`` naming its row, and the batch it was
    in is left as it was. ``progress(task, done, total)`` hears each table's rows.
    ``vacuum`` rewrites a SQLite file afterwards (``VACUUM``, which holds the whole
    file meanwhile), so none of what was replaced (clear text, when encrypting) is
    left in its free pages. The schema must be current (``SchemaNotCurrentError``:
    run ``upgrade`` first).
    """
    if not isinstance(vacuum, bool):
        raise UserError(f"vacuum is True or False, not {vacuum!r}")
    if check_count(batch_size, "batch_size", minimum=1) > MAX_BATCH:
        raise UserError(f"batch_size is between 1 and {MAX_BATCH}, not {batch_size}")
    report_progress = progress or progress_.current()
    started = time.monotonic()
    async with opened(target, verify_only=True) as db:
        scope = scope_of(tenant, all_tenants, db.tenant)
        reading = _reading_codec(db.codec, decryption_keys)
        await db.ensure_schema()
        report = RekeyReport(database=db.url, tenant=scope)
        walks: list[_Walk | _Values] = []
        for name in await _tenants(db, scope):
            form = _Form(db.codec, name)
            walks += [_Walk(t, name, form, reading, batch_size) for t in document_tables()]
            walks.append(_Values(name, form, reading, batch_size))
        totals = await _totals(db, walks)
        done: Counter[str] = Counter()
        say: Callable[[str], None] = (
            (lambda task: report_progress(task, done[task], max(totals[task], done[task])))
            if report_progress is not None
            else (lambda task: None)
        )
        for task in _TASKS:
            if totals[task]:
                say(task)
        for _ in range(_PASSES):
            wrote = 0
            for walk in walks:
                task = walk.table.name if isinstance(walk, _Walk) else VALUES
                walk.last = None
                while True:
                    read, written, last = await db.write(walk.batch)
                    if not read:
                        break
                    walk.last = last
                    wrote += written
                    report.batches += 1
                    report.rewritten[task] += written
                    done[task] += read if isinstance(walk, _Walk) else written
                    say(task)
                    if read < batch_size:
                        break
            if not wrote:  # nothing was left behind
                break
        if vacuum:
            from .prune_sql import reclaim_space

            report.vacuum = await reclaim_space(db, full=True)
    report.seconds = time.monotonic() - started
    return report


_PASSES = 3
"""Walks at most: a walk that wrote something is followed by another, which finds what a
fork copied meanwhile from rows not yet rewritten to a place already walked (it copies
stored text as it is)."""


async def _totals(db: Database, walks: list[_Walk | _Values]) -> Counter[str]:
    """The rows each table has to rekey, for the progress."""
    counted = [walk for walk in walks if isinstance(walk, _Walk)]

    def work(conn: Connection) -> Counter[str]:
        totals: Counter[str] = Counter()
        for walk in counted:
            totals[walk.table.name] += walk.count(conn)
        return totals

    return await db.read(work)
