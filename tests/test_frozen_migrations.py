"""Revisions import nothing from live code: a later change to a module never changes
what an old revision does. They may import only the frozen support modules beside
them, which themselves import nothing of ours."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MIGRATIONS = Path(__file__).resolve().parents[1] / "src" / "lovia_store" / "migrations"
SUPPORT = {"lovia_store.migrations.column_types", "lovia_store.migrations.recognition"}


def ours(path: Path) -> set[str]:
    """The lovia_store modules ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.add(f"relative import {'.' * node.level}{node.module or ''}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lovia_store"):
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("lovia_store")}
    return found


REVISIONS = sorted((MIGRATIONS / "versions").glob("*.py"))


@pytest.mark.parametrize("revision", REVISIONS, ids=[p.stem for p in REVISIONS])
def test_a_revision_imports_only_frozen_support(revision: Path) -> None:
    assert ours(revision) <= SUPPORT


@pytest.mark.parametrize("module", sorted(SUPPORT))
def test_the_support_modules_import_nothing_of_ours(module: str) -> None:
    assert ours(MIGRATIONS / f"{module.rsplit('.', 1)[1]}.py") == set()


def test_there_are_revisions() -> None:
    assert len(REVISIONS) >= 6


def test_0009_writes_out_the_keys_tables_py_declares() -> None:
    """0009 names every key, index and foreign key it builds (frozen), and they are the
    ones ``db/tables.py`` declares now: tenant leading, names by the naming convention."""
    from lovia_store.db.schema_state import scripts
    from lovia_store.db.tables import metadata

    module = scripts().get_revision("0009").module
    for table in module.TABLES:
        declared = metadata.tables[table]
        assert tuple(c.name for c in declared.primary_key.columns) == module.AFTER.key(table)
        assert {
            ix.name: (table, tuple(c.name for c in ix.columns), bool(ix.unique))
            for ix in declared.indexes
        } == {name: ix for name, ix in module.NEW_INDEXES.items() if ix[0] == table}
        assert {
            fk.name: (
                table,
                tuple(fk.column_keys),
                fk.referred_table.name,
                tuple(e.column.name for e in fk.elements),
            )
            for fk in declared.foreign_key_constraints
        } == {name: fk for name, fk in module.NEW_FOREIGN_KEYS.items() if fk[0] == table}
        assert "tenant" in declared.columns
    tenanted = {t.name for t in metadata.sorted_tables if "tenant" in t.columns}
    # Tables created later (0010's lovia_contents) have their tenant from the start.
    assert tenanted - CREATED_AFTER_0009 == set(module.TABLES)


CREATED_AFTER_0009 = {"lovia_contents"}


def test_0010_creates_the_table_tables_py_declares() -> None:
    """0010 writes out lovia_contents (frozen), and it is the table ``db/tables.py``
    declares; its downgrade checks every JSON column tables.py has for documents in
    the new form."""
    from sqlalchemy.dialects import mysql, postgresql, sqlite

    from lovia_store.db.schema_state import scripts
    from lovia_store.db.tables import contents, metadata
    from lovia_store.db.types import JsonTextType

    module = scripts().get_revision("0010").module
    assert tuple(c.name for c in contents.columns) == module.COLUMNS
    assert tuple(c.name for c in contents.primary_key.columns) == ("tenant", "digest")
    assert {module._TABLE} == {contents.name} == CREATED_AFTER_0009
    documents = {
        table.name: tuple(c.name for c in table.columns if isinstance(c.type, JsonTextType))
        for table in metadata.sorted_tables
    }
    assert {name: columns for name, columns in documents.items() if columns} == module.DOCUMENTS
    # The bytes column is as large on every backend as the codec's values may be.
    rendered = {
        name: str(contents.c.data.type.compile(dialect=dialect))
        for name, dialect in (
            ("mysql", mysql.dialect()),
            ("postgresql", postgresql.dialect()),
            ("sqlite", sqlite.dialect()),
        )
    }
    assert rendered == {"mysql": "LONGBLOB", "postgresql": "BYTEA", "sqlite": "BLOB"}
