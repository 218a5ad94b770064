"""Documents in and out of their columns, and the long values they share (``lovia_contents``).

Every store writes its JSON documents through ``store_documents`` and reads them
back through ``read_documents``, in the transaction that writes or reads the rows:

- ``store_documents`` encodes each document as the Database says (compressed,
  encrypted: ``lovia_store.db.documents``) and, for the columns that hold tool
  outputs (``shareable``), counts a reference to each long value it names, storing
  the value the first time. A reference is never written without its value.
- ``release_documents`` is called with the stored text of documents about to be
  deleted or replaced (clear, rewind, trim, prune, deleting a session or a run):
  their references are uncounted, and a value nothing refers to any more is
  deleted by the same transaction.
- ``read_documents`` returns the exact text that was written, fetching the
  shared values of a whole batch in one query.

The codec is the Database's (``Database(compression=, encryption_keys=)``), which
it puts on each connection it runs work on (``use_codec``); a connection no
Database ran gets the default one.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.sql.elements import ColumnElement

from ..errors import EncryptionKeyError, StoredValueError
from .dialect import capabilities, upsert
from .documents import (
    MARK,
    SEALED_BYTES,
    SHARED_MARK,
    DocumentCodec,
    references,
    utf8_text,
)
from .prepared import Prepared, per_dialect
from .tables import contents

if TYPE_CHECKING:
    from .._json import Where

__all__ = [
    "Encoding",
    "codec_of",
    "decode_unshared",
    "encode_documents",
    "has_references",
    "read_document",
    "read_documents",
    "release_documents",
    "retain_references",
    "retain_shared",
    "shared_rows",
    "store_document",
    "store_documents",
    "use_codec",
]

CODEC = "lovia_store.codec"
"""The key of the codec in a connection's ``info``."""

_DEFAULT = DocumentCodec()
_FETCH_BATCH = 500

S = TypeVar("S", bound=str | None)


def use_codec(conn: Connection, codec: DocumentCodec) -> None:
    conn.info[CODEC] = codec


def codec_of(conn: Connection) -> DocumentCodec:
    codec = conn.info.get(CODEC)
    return _DEFAULT if codec is None else codec


def has_references(column: ColumnElement[str]) -> ColumnElement[bool]:
    """SQL: the documents of ``column`` that refer to shared values (the ones
    ``release_documents`` needs to see before their rows go)."""
    return column.startswith(SHARED_MARK, autoescape=True)


# -- writing ---------------------------------------------------------------------


class Encoding(NamedTuple):
    """Documents as their columns will hold them, and the long values they share:
    digest -> [references, value]."""

    stored: list[Any]
    shared: dict[str, list[Any]]


def encode_documents(
    codec: DocumentCodec, tenant: str, texts: Sequence[str | None], *, shareable: bool = False
) -> Encoding:
    """``texts`` encoded (None stays None), touching no database: ``retain_shared``
    must count ``shared`` in the transaction that writes ``stored``."""
    if not codec.encrypts and (not codec.compression or _all_short(texts, codec.threshold)):
        return Encoding(list(texts), {})
    out: list[str | None] = []
    wanted: dict[str, list[Any]] = {}
    for text in texts:
        if text is None:
            out.append(None)
            continue
        encoded = codec.encode(tenant, text, shareable=shareable)
        out.append(encoded.text)
        for digest, value in encoded.shared:
            seen = wanted.get(digest)
            if seen is None:
                wanted[digest] = [1, value]
            else:
                seen[0] += 1
    return Encoding(out, wanted)


def store_documents(
    conn: Connection, tenant: str, texts: Sequence[S], *, shareable: bool = False
) -> list[S]:
    """``texts`` as their columns hold them (None stays None); the long values they
    share are counted (and stored the first time) in ``conn``'s transaction."""
    encoding = encode_documents(codec_of(conn), tenant, texts, shareable=shareable)
    retain_shared(conn, tenant, encoding)
    return encoding.stored


@overload
def store_document(conn: Connection, tenant: str, text: str, *, shareable: bool = ...) -> str: ...
@overload
def store_document(conn: Connection, tenant: str, text: None, *, shareable: bool = ...) -> None: ...
def store_document(
    conn: Connection, tenant: str, text: str | None, *, shareable: bool = False
) -> str | None:
    return store_documents(conn, tenant, [text], shareable=shareable)[0]


def _all_short(texts: Sequence[str | None], threshold: int) -> bool:
    return all(text is None or len(text) < threshold for text in texts)


@per_dialect
@cache
def _retain_statement(dialect: str) -> Prepared:
    values = {
        "tenant": bindparam("tenant"),
        "digest": bindparam("digest"),
        "refs": bindparam("refs"),
        "size": bindparam("size"),
        "data": bindparam("data", type_=contents.c.data.type),
    }
    if not capabilities(dialect).returning:
        # MySQL: the increment is the inserted row's (a bound parameter after VALUES
        # breaks the driver's multi-row executemany).
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        insert = mysql_insert(contents).values(values)
        return Prepared(insert.on_duplicate_key_update(refs=contents.c.refs + insert.inserted.refs))
    changes = {"refs": contents.c.refs + bindparam("refs")}
    return Prepared(upsert(dialect, contents, values, changes, (contents.c.refs,)))


def retain_shared(conn: Connection, tenant: str, encoding: Encoding) -> None:
    """Count the references ``encoding`` makes, storing each value the first time."""
    if encoding.shared:
        rows = shared_rows(codec_of(conn), tenant, encoding)
        _retain_statement(conn.dialect.name).execute(conn, {"tenant": tenant}, rows)


def shared_rows(codec: DocumentCodec, tenant: str, encoding: Encoding) -> list[dict[str, Any]]:
    """The ``lovia_contents`` rows that count ``encoding``'s references (``digest``,
    ``refs``, ``size``, ``data``), sorted: two writers counting the same values lock
    them in one order."""
    codec.remember(tenant, {digest: value for digest, (_, value) in encoding.shared.items()})
    return [
        {
            "digest": digest,
            "refs": count,
            "size": len(value),
            "data": codec.pack(tenant, digest, value),
        }
        for digest, (count, value) in sorted(encoding.shared.items())
    ]


# -- releasing -------------------------------------------------------------------

_COUNT = Prepared(
    contents.update()
    .where(contents.c.tenant == bindparam("tenant"), contents.c.digest == bindparam("digest"))
    .values(refs=contents.c.refs + bindparam("count"))
)
_DROP_UNREFERENCED = Prepared(
    contents.delete().where(
        contents.c.tenant == bindparam("tenant"),
        contents.c.digest == bindparam("digest"),
        contents.c.refs <= 0,
    )
)


def release_documents(conn: Connection, tenant: str, stored: Iterable[str | None]) -> int:
    """Uncount the references of documents about to be deleted or replaced, in
    ``conn``'s transaction, deleting the values nothing refers to any more.
    Returns how many references were released."""
    counts = _references(stored)
    if not counts:
        return 0
    rows = [{"digest": digest, "count": -count} for digest, count in sorted(counts.items())]
    _COUNT.execute(conn, {"tenant": tenant}, rows)
    _DROP_UNREFERENCED.execute(conn, {"tenant": tenant}, [{"digest": d} for d in sorted(counts)])
    return counts.total()


def retain_references(conn: Connection, tenant: str, stored: Iterable[str | None]) -> int:
    """Count once more the references of documents copied as they are (a fork copies
    its origin's rows), whose values are stored already: the caller holds the
    origin's rows (their session's lock), so no release can delete them meanwhile."""
    counts = _references(stored)
    if counts:
        rows = [{"digest": digest, "count": count} for digest, count in sorted(counts.items())]
        _COUNT.execute(conn, {"tenant": tenant}, rows)
    return counts.total()


def _references(stored: Iterable[str | None]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for text in stored:
        if text is not None and text.startswith(SHARED_MARK):
            counts.update(references(text))
    return counts


# -- reading ---------------------------------------------------------------------


def read_documents(
    conn: Connection, tenant: str, stored: Sequence[S], where: Where | None = None
) -> list[S]:
    """The texts that were written, for documents read in ``conn``'s transaction. A
    document that does not read (damaged, a missing or wrong key, a shared value that
    does not) is a ``StoredValueError`` naming its row (``where``). Bytes (SQLite's
    text read as UTF-8 bytes) in the stored form are decoded; other bytes pass, for
    the JSON reader to judge."""
    if _none_marked(stored):
        return list(stored)
    out, marked = _marked(stored, where)
    codec = codec_of(conn)
    digests = {digest for index in marked for digest in references(out[index])}
    try:
        shared = _fetch(conn, tenant, codec, digests, where) if digests else {}
    except StoredValueError as exc:
        raise _named_by_document(exc, out, where) from exc
    codec.decode_at(tenant, out, marked, shared, where)
    return out


def _marked(stored: Sequence[Any], where: Where | None) -> tuple[list[Any], list[int]]:
    """``stored`` as a list, and the indexes of the documents in the codec's form (as
    text: SQLite's UTF-8 bytes decoded, but for sealed ones without references, which
    ``decode_at`` opens as they are)."""
    out = list(stored)
    marked = [i for i, text in enumerate(out) if text is not None and text[:1] in _MARKS]
    for index in marked:
        text = out[index]
        if isinstance(text, bytes) and not text.startswith(SEALED_BYTES):
            out[index] = utf8_text(text, where, index)
    return out, marked


def _none_marked(stored: Sequence[Any]) -> bool:
    """Whether no document is in the codec's form (most reads: every row written
    before 0010, every short one without keys).

    The form starts with ``\x01``, below the first character of any JSON text: the
    least document (a C loop of comparisons, a fifth of a loop over the rows) tells.
    NULLs, or text beside bytes, take the loop."""
    least: Any = None
    with contextlib.suppress(TypeError, ValueError):  # a NULL or both kinds; no rows
        least = min(stored)
    if least is not None:
        return bool(least[:1] > (_MARKS[1] if isinstance(least, bytes) else MARK))
    return not any(isinstance(text, str | bytes) and text[:1] in _MARKS for text in stored)


_MARKS = (MARK, MARK.encode())


def _named_by_document(
    exc: StoredValueError, texts: Sequence[Any], where: Where | None
) -> StoredValueError:
    """``exc`` about a shared value (a ``lovia_contents`` row), named by the first
    document that refers to it: the row a caller can look up (``exc`` is its cause)."""
    digest = exc.row.get("digest") if exc.table == contents.name else None
    index = next(
        (i for i, text in enumerate(texts) if isinstance(text, str) and digest in references(text)),
        None,
    )
    if digest is None or index is None or where is None:
        return exc
    table, column, key_of = where
    message = f"a shared value it names ({digest}) does not read: {exc.args[0]}"
    if isinstance(exc, EncryptionKeyError):
        return EncryptionKeyError(
            message, key_id=exc.key_id, table=table, column=column, row=key_of(index)
        )
    return StoredValueError(message, table=table, column=column, row=key_of(index))


def decode_unshared(
    codec: DocumentCodec, tenant: str, stored: Sequence[S], where: Where | None = None
) -> list[S] | None:
    """``read_documents`` outside a transaction (a one-statement read), from the shared
    values this Database read or wrote lately. None when a document names a value it
    does not hold: then read again inside a transaction (``read_documents``), or a
    concurrent release may have deleted the value meanwhile."""
    if _none_marked(stored):
        return list(stored)
    out, marked = _marked(stored, where)
    digests = {digest for index in marked for digest in references(out[index])}
    shared = codec.recall(tenant, digests) if digests else {}
    if len(shared) < len(digests):
        return None
    codec.decode_at(tenant, out, marked, shared, where)
    return out


def read_document(
    conn: Connection, tenant: str, stored: S, where: Where | None = None, index: int = 0
) -> S:
    if stored is None or not stored.startswith(MARK):
        return stored
    return read_documents(conn, tenant, [stored], _at(where, index))[0]


def _at(where: Where | None, index: int) -> Where | None:
    if where is None or index == 0:
        return where
    table, column, key_of = where
    return table, column, lambda i: key_of(i + index)


def _value_at(tenant: str, digest: str) -> Where:
    return "lovia_contents", "data", lambda _index: {"tenant": tenant, "digest": digest}


def _fetch(
    conn: Connection, tenant: str, codec: DocumentCodec, digests: set[str], where: Where | None
) -> dict[str, str]:
    found = codec.recall(tenant, digests)
    ordered = sorted(digests - found.keys())
    read: dict[str, str] = {}
    for start in range(0, len(ordered), _FETCH_BATCH):
        batch = ordered[start : start + _FETCH_BATCH]
        rows = conn.execute(
            select(contents.c.digest, contents.c.data).where(
                contents.c.tenant == tenant, contents.c.digest.in_(batch)
            )
        )
        for digest, data in rows:
            read[digest] = codec.unpack(tenant, digest, bytes(data), _value_at(tenant, digest))
    codec.remember(tenant, read)
    found.update(read)
    return found
