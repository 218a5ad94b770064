"""The documents of the rows the lifecycle moves: read as their text, written as the
destination stores them.

A record (``records``) always holds a document's text, whatever form its database
keeps it in (compressed, shared, encrypted: ``lovia_store.db.documents``). The
reader decodes each page in the transaction that reads it (the same snapshot as
the shared values it names); the loader encodes each row with the destination's
codec in the transaction that inserts it, counting the references of the three
shareable columns there. So an export is plain JSON whatever the source, and a copy
or an import stores what it moves as the destination Database says. Deleting rows
releases their references in the deleting transaction (``referencing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Table, or_, select
from sqlalchemy.sql.elements import ColumnElement

from ..db import tables
from ..db.contents import (
    codec_of,
    has_references,
    read_documents,
    store_documents,
)
from ..db.documents import MARK

__all__ = [
    "DOCUMENTS",
    "SHAREABLE",
    "decode_rows",
    "document_tables",
    "encode_rows",
    "referencing",
]

DOCUMENTS: dict[str, tuple[str, ...]] = {
    table.name: names
    for table in tables.metadata.sorted_tables
    if (names := tuple(c.name for c in table.columns if c.name.endswith("_json")))
}
"""Every column that holds a JSON document, by table (revision 0010 lists the same)."""

SHAREABLE: dict[str, tuple[str, ...]] = {
    tables.messages.name: ("entry_json",),
    tables.run_entries.name: ("entry_json",),
    tables.tool_effects.name: ("result_json",),
}
"""The columns whose documents hold tool outputs: their long strings are stored once,
and their references counted in ``lovia_contents``."""


def document_tables() -> list[Table]:
    """The tables that hold documents, parents first."""
    return [t for t in tables.metadata.sorted_tables if t.name in DOCUMENTS]


def shareable(table: str, column: str) -> bool:
    return column in SHAREABLE.get(table, ())


def _by_tenant(rows: Sequence[dict[str, Any]], column: str) -> dict[str, list[int]]:
    """The indexes of the rows holding ``column``, by tenant."""
    found: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if column in row:
            found.setdefault(row["tenant"], []).append(index)
    return found


def decode_rows(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Replace each stored document of ``rows`` (read in ``conn``'s transaction) by its
    text; a document that does not read is a ``StoredValueError`` naming its row."""
    columns = DOCUMENTS.get(table.name)
    if not columns or not rows:
        return
    key = [c.name for c in table.primary_key.columns]
    for column in columns:
        for tenant, indexes in _by_tenant(rows, column).items():
            stored = [rows[i][column] for i in indexes]
            if not any(isinstance(text, str) and text.startswith(MARK) for text in stored):
                continue

            def key_of(i: int, at: list[int] = indexes) -> dict[str, object]:
                return {name: rows[at[i]].get(name) for name in key}

            texts = read_documents(conn, tenant, stored, (table.name, column, key_of))
            for index, text in zip(indexes, texts, strict=True):
                rows[index][column] = text


def encode_rows(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with their documents as ``conn``'s codec stores them (copies; the rows
    given are left as they are), their references counted in ``conn``'s transaction."""
    columns = DOCUMENTS.get(table.name)
    if not columns or not rows:
        return rows
    codec = codec_of(conn)
    if not codec.encrypts and (
        not codec.compression
        or all(
            not isinstance(row.get(column), str) or len(row[column]) < codec.threshold
            for row in rows
            for column in columns
        )
    ):
        return rows  # stored as they are: plain JSON text
    out = [dict(row) for row in rows]
    for column in columns:
        share = shareable(table.name, column)
        for tenant, indexes in _by_tenant(out, column).items():
            texts = [out[i][column] for i in indexes]
            stored = store_documents(conn, tenant, texts, shareable=share)
            for index, text in zip(indexes, stored, strict=True):
                out[index][column] = text
    return out


def referencing(
    conn: Connection, table: Table, tenant: str, where: Sequence[ColumnElement[bool]]
) -> list[str]:
    """The stored documents of ``table``'s rows of ``tenant`` that ``where`` selects
    and that name shared values (only those rows are read): what ``release_documents``
    takes, in the transaction that deletes the rows (after deleting them: the shared
    values are the last rows a transaction locks).

    Every selected row is locked first, then the documents are read with a locking
    read: they are the rows the delete will delete. A plain read would see the
    transaction's snapshot (InnoDB's repeatable read takes it at the first plain read,
    which may come before the caller's locks were granted), where rows a writer
    changed meanwhile (a trim, a rekey) still hold their former documents; and the
    filter alone would skip, without waiting, a row a rekey is rewriting into a form
    that names shared values (PostgreSQL tests it on the version its snapshot holds)."""
    columns = [table.c[name] for name in SHAREABLE.get(table.name, ())]
    if not columns:
        return []
    query = select(*columns).where(
        table.c.tenant == tenant, *where, or_(*(has_references(c) for c in columns))
    )
    if conn.dialect.name != "sqlite":  # SQLite's writer holds the whole file already
        key = list(table.primary_key.columns)
        conn.execute(select(*key).where(table.c.tenant == tenant, *where).with_for_update())
        query = query.with_for_update()
    return [text for row in conn.execute(query).all() for text in row if text is not None]
