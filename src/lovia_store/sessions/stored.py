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

import contextlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import BigInteger, Connection, String, bindparam, select
from sqlalchemy.sql.elements import ColumnElement

from ..db.contents import (
    Encoding,
    codec_of,
    decode_unshared,
    encode_documents,
    has_references,
    read_documents,
    release_documents,
    retain_shared,
)
from ..db.dialect import MYSQL
from ..db.documents import MARK, SHARED_MARK
from ..db.prepared import Prepared
from ..db.tables import messages, sessions
from ..errors import EncryptionKeyError, StoredValueError

if TYPE_CHECKING:
    from .._json import Where
    from ..db.database import Database
    from ..db.documents import DocumentCodec

__all__ = [
    "condensed",
    "decoded",
    "lock_session",
    "one_statement_documents",
    "referring",
    "referring_rows",
    "release_rows",
    "retain",
    "store_entries",
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


def _marked(documents: Sequence[str | bytes | None]) -> list[int]:
    """The indexes of the documents the codec wrote in its own form (none, mostly).

    Its form starts with ``\x01``, below the first character of any JSON text: the
    least document (a C loop of comparisons, a fifth of the time a loop over the
    rows takes) tells when none is. NULLs, or text beside bytes, take the loop."""
    least: Any = None
    with contextlib.suppress(TypeError, ValueError):  # a NULL or both kinds; no rows
        least = min(documents)  # type: ignore[type-var]
    if least and least[:1] > (_BYTES_MARK if isinstance(least, bytes) else MARK):
        return []
    return [i for i, document in enumerate(documents) if document and document[:1] in _MARKS]


def stored_text(document: str | bytes) -> str:
    """A stored document as text (bytes where a read took its UTF-8)."""
    return document.decode() if isinstance(document, bytes) else document


def referring(document: str | bytes | None) -> bool:
    """Whether a stored document names shared values (release it before it goes)."""
    return document is not None and document[:2] in _SHARED_MARKS


def _at(where: Where | None, indexes: list[int]) -> Where | None:
    """``where`` for the marked documents alone: each still named as its row."""
    if where is None:
        return None
    table, column, key_of = where
    return table, column, lambda i: key_of(indexes[i])


def _spliced(documents: Sequence[D], indexes: list[int], texts: list[str]) -> list[D | str]:
    out: list[D | str] = list(documents)
    for index, text in zip(indexes, texts, strict=True):
        out[index] = text
    return out


def decoded(
    conn: Connection, tenant: str, documents: Sequence[D], where: Where | None = None
) -> list[D | str]:
    """``documents`` as written, read in ``conn``'s transaction (the one that read them).

    A document that does not read is a ``StoredValueError`` naming its row
    (``where``, by the document's index), a missing or wrong key an
    ``EncryptionKeyError``."""
    indexes = _marked(documents)
    if not indexes:
        return list(documents)
    texts = [stored_text(documents[i]) for i in indexes]  # type: ignore[arg-type]
    return _spliced(documents, indexes, read_documents(conn, tenant, texts, _at(where, indexes)))


def _unshared(
    codec: DocumentCodec, tenant: str, documents: Sequence[D], where: Where | None
) -> list[D | str] | None:
    """``decoded`` without a transaction: None when a document names shared values."""
    indexes = _marked(documents)
    if not indexes:
        return list(documents)
    texts = [stored_text(documents[i]) for i in indexes]  # type: ignore[arg-type]
    found = decode_unshared(codec, tenant, texts, _at(where, indexes))
    return None if found is None else _spliced(documents, indexes, found)


async def one_statement_documents(
    database: Database, tenant: str, documents: Sequence[D], where: Where | None
) -> list[D | str] | None:
    """Documents a one-statement read returned, as written; None when the caller
    must read its rows again in one transaction, with ``decoded``.

    The shared values they name are read in a transaction of their own: a value
    is stored under the digest of its text, so whatever is found there is what
    the row named. Only a value released since the rows were read (its last
    reference went: a concurrent clear) is missing, and only then (or for a
    damaged row, which the second read reports) are the rows read again.
    """
    found = _unshared(database.codec, tenant, documents, where)
    if found is not None:
        return found
    try:
        return await database.read(
            lambda conn: decoded(conn, tenant, documents, where), tenant=tenant
        )
    except EncryptionKeyError:
        raise  # another snapshot would not open it either
    except StoredValueError:
        return None


def retain(conn: Connection, tenant: str, encoding: Encoding) -> None:
    """``retain_shared``, one value at a time on MySQL and MariaDB: there asyncmy's
    executemany fails on the upsert of several values (its ``ON DUPLICATE KEY
    UPDATE`` holds a parameter, which its multi-row rewrite leaves unfilled)."""
    if len(encoding.shared) > 1 and conn.dialect.name in MYSQL:
        for digest, counted in sorted(encoding.shared.items()):
            retain_shared(conn, tenant, Encoding([], {digest: counted}))
    else:
        retain_shared(conn, tenant, encoding)


def store_entries(conn: Connection, tenant: str, texts: Sequence[str]) -> list[str]:
    """Entry documents as ``entry_json`` holds them (``store_documents``, shareable),
    their shared values counted in ``conn``'s transaction."""
    encoding = encode_documents(codec_of(conn), tenant, texts, shareable=True)
    retain(conn, tenant, encoding)
    return encoding.stored


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


def lock_session(conn: Connection, tenant: str, session_id: str) -> None:
    """Take the session's row, as an append takes it, before changing its rows.

    Appends, rewinds, trims, clears and forks of one session then run one after
    the other: what an edit selects to release is what it deletes or rewrites
    (PostgreSQL's writes see each statement's own snapshot, InnoDB's deletes the
    newest rows), and no reference is released twice. And each takes the session
    first, then the shared values: one order, no deadlock. SQLite's writer holds
    the whole file already."""
    if conn.dialect.name != "sqlite":
        conn.execute(_SESSION_LOCKED, {"tenant": tenant, "sid": session_id})


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
