"""A session's entry documents as their rows hold them: decoded when read, released when dropped.

``lovia_messages.entry_json`` goes through the Database's codec
(``lovia_store.db.contents``): compressed, sealed, its long strings (tool outputs)
stored once in ``lovia_contents`` with counted references. This module is what the
session family needs on top of that API:

- reads return documents as text or, where it pays, as UTF-8 bytes (``utf8_bytes``):
  the few marked ones become text for the codec, the rest pass untouched (a store
  without compression nor keys pays one scan of first bytes);
- a one-statement read (no transaction) cannot fetch shared values with its rows:
  ``one_statement_documents`` reads them afterwards, and only if one went missing
  meanwhile (a concurrent release) must the rows be read again, with their values,
  in one transaction;
- every edit that drops or rewrites rows takes the session's row first
  (``lock_session``), as appends do: the rows it releases are then the rows it
  deletes, and no two edits release the same reference.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import BigInteger, Connection, String, bindparam, select
from sqlalchemy.sql.elements import ColumnElement

from ..db.contents import (
    decode_unshared,
    has_references,
    read_documents,
    release_documents,
)
from ..db.documents import MARK, SHARED_MARK
from ..db.prepared import Prepared
from ..db.tables import messages, sessions
from ..errors import EncryptionKeyError, StoredValueError

if TYPE_CHECKING:
    from .._json import Where
    from ..db.database import Database

__all__ = [
    "condensed",
    "lock_rows",
    "lock_session",
    "one_statement_documents",
    "referring",
    "referring_rows",
    "release_rows",
    "stored_text",
]

D = TypeVar("D", bound=str | bytes | None)

_BYTES_MARK = MARK.encode()
_MARKS = (MARK, _BYTES_MARK)
_SHARED_MARKS = (SHARED_MARK, SHARED_MARK.encode())
_NO_END = 2**63 - 1
m = messages.c
_TENANT = bindparam("tenant", type_=String())
_SID = bindparam("sid", type_=String())


def stored_text(document: str | bytes) -> str:
    """A stored document as text (bytes where a read took its UTF-8)."""
    return document.decode() if isinstance(document, bytes) else document


def referring(document: str | bytes | None) -> bool:
    """Whether a stored document names shared values (release it before it goes)."""
    return document is not None and document[:2] in _SHARED_MARKS


async def one_statement_documents(
    database: Database, tenant: str, documents: Sequence[Any], where: Where | None
) -> list[Any] | None:
    """Documents a one-statement read returned, as written; None when the caller
    must read its rows again in one transaction, with ``read_documents``.

    The shared values they name are read in a transaction of their own: a value
    is stored under the digest of its text, so whatever is found there is what
    the row named. Only a value released since the rows were read (its last
    reference went: a concurrent clear) is missing, and only then (or for a
    damaged row, which the second read reports) are the rows read again.
    """
    found = decode_unshared(database.codec, tenant, documents, where)
    if found is not None:
        return found
    try:
        return await database.read(
            lambda conn: read_documents(conn, tenant, documents, where), tenant=tenant
        )
    except EncryptionKeyError:
        raise  # another snapshot would not open it either
    except StoredValueError:
        return None


def condensed(column: ColumnElement[str]) -> ColumnElement[bool]:
    """SQL: documents stored shorter than their text (their long strings shared, or
    compressed), which a filter on the stored length must let through. (A sealed
    body alone is longer than its text.) The codec writes its flags in the order
    ``r``, ``z``, ``e``."""
    return column.startswith(SHARED_MARK, autoescape=True) | column.startswith(
        MARK + "z", autoescape=True
    )


_SESSION_LOCKED = (
    select(sessions.c.session_id)
    .where(sessions.c.tenant == _TENANT, sessions.c.session_id == _SID)
    .with_for_update()
)


_ROWS_LOCKED = Prepared(
    select(m.sequence).where(m.tenant == _TENANT, m.session_id == _SID).with_for_update()
)


def lock_rows(conn: Connection, tenant: str, session_id: str) -> None:
    """Take every message row of the session, after its session's row and before
    anything is read, in an edit that releases what it deletes or rewrites (rewind,
    clear, delete). A rekey rewrites rows without the session's lock, releasing their
    former values: this waits for it, so the rows read and released are the rows
    deleted (PostgreSQL's next statements see them; InnoDB's snapshot is taken at the
    first plain read, after this). SQLite's writer holds the whole file already."""
    if conn.dialect.name != "sqlite":
        _ROWS_LOCKED.execute(conn, {"tenant": tenant, "sid": session_id})


def lock_session(conn: Connection, tenant: str, session_id: str, *, rows: bool = False) -> None:
    """Take the session's row, as an append takes it, before changing its rows
    (and with ``rows``, then its message rows: ``lock_rows``).

    Appends, rewinds, trims, clears and forks of one session then run one after
    the other: what an edit selects to release is what it deletes or rewrites
    (PostgreSQL's writes see each statement's own snapshot, InnoDB's deletes the
    newest rows), and no reference is released twice. And each takes the session
    first, then the shared values: one order, no deadlock. SQLite's writer holds
    the whole file already."""
    if conn.dialect.name != "sqlite":
        conn.execute(_SESSION_LOCKED, {"tenant": tenant, "sid": session_id})
        if rows:
            lock_rows(conn, tenant, session_id)


_REFERRING = Prepared(
    select(m.sequence, m.entry_json).where(
        m.tenant == _TENANT,
        m.session_id == _SID,
        m.sequence >= bindparam("low", type_=BigInteger()),
        m.sequence <= bindparam("high", type_=BigInteger()),
        has_references(m.entry_json),
    )
)


def referring_rows(
    conn: Connection, tenant: str, session_id: str, low: int = 0, high: int = _NO_END
) -> list[tuple[int, str]]:
    """(sequence, stored entry) of the session's rows from ``low`` to ``high`` that
    name shared values: the only ones whose going changes ``lovia_contents``."""
    params = {"tenant": tenant, "sid": session_id, "low": low, "high": high}
    return [(int(sequence), text) for sequence, text in _REFERRING.execute(conn, params).all()]


def release_rows(
    conn: Connection,
    tenant: str,
    session_id: str,
    low: int = 0,
    high: int = _NO_END,
    only: Collection[int] | None = None,
) -> int:
    """Release the shared values the session's rows ``low``..``high`` (those of them in
    ``only``) name, before the caller deletes them in this transaction."""
    rows = referring_rows(conn, tenant, session_id, low, high)
    chosen = [text for sequence, text in rows if only is None or sequence in only]
    return release_documents(conn, tenant, chosen)
