"""Fuzzed import files: an import succeeds with the data reading back equal, or fails with
a typed error and the database unchanged (issue 31).

Each example starts from a valid export (``lifecycle_support.populate`` exported by
``lovia_store.lifecycle.export``) and mutates a few of its lines: cut short, dropped,
repeated or swapped; a member set to a value of another type, an integer out of range,
removed, repeated (a duplicate key in the JSON text), or an unknown one added; a
counter or position set to another number; bytes
that are not JSON or not UTF-8. The file is imported into a database that is empty or
already holds the original file. Afterwards, read back by exporting the database:

- success: the database holds exactly what it held plus the file's records (a record
  whose key it held must have been equal; a member the file leaves out holds the
  column's default), its counters agree with its rows (``lovia-store check``), and
  every public read works;
- failure: the error is an ``ExportFormatError`` naming a line or a
  ``DestinationConflictError``, and the database holds exactly what it held.

Deterministic (``derandomize``) and small: SQLite with both starting points, and
PostgreSQL with the empty one.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from helpers import examples
from lifecycle_support import populate, public_reads
from lovia_store import Database, upgrade
from lovia_store.lifecycle import (
    DestinationConflictError,
    ExportFormatError,
    counter_mismatches,
    export,
    import_file,
    read_file,
)
from lovia_store.lifecycle.records import KINDS

Key = tuple[str, tuple[Any, ...]]

# -- the mutations ---------------------------------------------------------------

_ints = st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30])
_values = st.one_of(
    st.none(),
    st.booleans(),
    _ints,
    st.integers(-5, 50),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(
        [
            "",
            "x" * 300,
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00+00:00",
            '{"type": "input"}',
            '{"role": "user", "content": "hi", "type": "input"}',
            "{}",
            "[]",
            "not json",
            "\u0000",
            "running",
            "completed",
            "exploded",
        ]
    ),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def mutation(draw: st.DrawFn, count: int) -> tuple[Any, ...]:
    index = draw(st.integers(0, count - 1))
    kind = draw(
        st.sampled_from(
            [
                "set",
                "set",
                "set",
                "counter",
                "counter",
                "drop member",
                "add member",
                "duplicate member",
                "cut",
                "drop line",
                "repeat line",
                "swap lines",
                "bad json",
                "bad utf-8",
            ]
        )
    )
    return (
        kind,
        index,
        draw(st.integers(0, count - 1)),
        draw(st.integers(0, 10_000)),
        draw(_values),
    )


_COUNTERS = (
    "last_sequence",
    "message_count",
    "run_count",
    "snapshot_version",
    "entry_count",
    "sequence",
    "position",
    "version",
)


def apply(lines: list[bytes], change: tuple[Any, ...]) -> list[bytes]:
    kind, index, other, position, value = change
    if not lines:
        return lines
    lines = list(lines)
    index, other = index % len(lines), other % len(lines)
    line = lines[index]
    if kind == "drop line":
        del lines[index]
    elif kind == "repeat line":
        lines.insert(index, line)
    elif kind == "swap lines":
        lines[index], lines[other] = lines[other], lines[index]
    elif kind == "cut":
        lines[index] = line[: position % max(len(line), 1)]
    elif kind == "bad json":
        at = position % max(len(line), 1)
        lines[index] = line[:at] + b"{" + line[at + 1 :]
    elif kind == "bad utf-8":
        at = position % max(len(line), 1)
        lines[index] = line[:at] + b"\xff\xc3" + line[at:]
    else:
        try:
            document = json.loads(line)
        except ValueError:  # an earlier mutation broke the line: it stays broken
            return lines
        if not isinstance(document, dict):
            return lines
        members = sorted(m for m in document if m != "record") or ["record"]
        member = members[position % len(members)]
        if kind == "counter":  # a counter or a position, set to another number
            numbers = [m for m in _COUNTERS if m in document] or [member]
            document[numbers[position % len(numbers)]] = other
        elif kind == "set":
            document[member] = value
        elif kind == "drop member":
            document.pop(member)
        elif kind == "add member":
            document["colour"] = value
        lines[index] = json.dumps(document, ensure_ascii=False).encode()
        if kind == "duplicate member":  # the same key twice: JSON readers keep the last
            repeated = json.dumps({member: value}, ensure_ascii=False)[1:-1]
            lines[index] = line[:-1] + b"," + repeated.encode() + b"}"
    return lines


# -- the databases -----------------------------------------------------------------


async def records(url: str, folder: Path) -> dict[Key, dict[str, Any]]:
    """Every row of the database, by record type and key: its export, read back."""
    path = folder / "dump.jsonl"
    await export(url, path)
    out: dict[Key, dict[str, Any]] = {}
    for record in read_file(path):
        key = tuple(record.row[name] for name in KINDS[record.kind].key)
        out[(record.kind, key)] = record.row
    path.unlink()
    return out


def file_records(path: Path) -> dict[Key, dict[str, Any]]:
    return {(r.kind, tuple(r.row[n] for n in KINDS[r.kind].key)): r.row for r in read_file(path)}


async def check_one(
    url: str, folder: Path, mutated: Path, before: dict[Key, dict[str, Any]], tally: Counter[str]
) -> None:
    try:
        await import_file(url, mutated)
    except (ExportFormatError, DestinationConflictError) as error:
        if isinstance(error, ExportFormatError):
            assert error.line is not None and str(error).startswith(f"line {error.line}: ")
        assert await records(url, folder) == before, f"changed by a refused import: {error}"
        tally[type(error).__name__] += 1
        return
    after = await records(url, folder)
    given = file_records(mutated)
    assert after.keys() == before.keys() | given.keys()
    for key, row in before.items():
        assert after[key] == row, key
    for key, row in given.items():  # a member the file leaves out is the column's default
        assert {name: after[key][name] for name in row} == row, key
    assert await counter_mismatches(url) == []  # what the stores could have written
    await public_reads(url)
    tally["imported"] += 1


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The export of a populated database, and two migrated SQLite files to copy: one
    empty, one holding the export."""
    folder = tmp_path_factory.mktemp("fuzz-import")
    source, path = folder / "source.sqlite3", folder / "all.jsonl"
    empty, holding = folder / "empty.sqlite3", folder / "holding.sqlite3"

    async def make() -> None:
        await populate(str(source))
        await export(str(source), path)
        async with Database(str(empty)) as db:
            await upgrade(db)
        await import_file(str(holding), path)

    asyncio.run(make())
    return path, empty, holding


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def write(lines: list[bytes], path: Path, packed: bool) -> Path:
    data = b"\n".join(lines) + b"\n"
    if packed:
        path = path.with_suffix(".jsonl.gz")
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path


FUZZ = settings(
    max_examples=examples(100),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("start", ["empty", "holding"])
def test_a_mutated_file_imports_exactly_or_changes_nothing_on_sqlite(
    start: str, exported: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    path, empty, holding = exported
    lines = lines_of(path)
    tally: Counter[str] = Counter()
    runner = asyncio.Runner()
    base = (
        {} if start == "empty" else runner.run(records(f"sqlite+aiosqlite:///{holding}", tmp_path))
    )

    @FUZZ
    @given(st.lists(mutation(len(lines)), min_size=1, max_size=3), st.booleans())
    def check(changes: list[tuple[Any, ...]], packed: bool) -> None:
        mutated = lines
        for change in changes:
            mutated = apply(mutated, change)
        with _case(tmp_path) as folder:
            target = folder / "target.sqlite3"
            shutil.copy(empty if start == "empty" else holding, target)
            file = write(mutated, folder / "mutated.jsonl", packed)
            runner.run(check_one(f"sqlite+aiosqlite:///{target}", folder, file, base, tally))

    with runner:
        check()
    # The mutations reach both outcomes and both kinds of refusal.
    assert tally["ExportFormatError"] > 10, tally
    assert tally["imported"] + tally["DestinationConflictError"] > 0, tally


def test_a_mutated_file_imports_exactly_or_changes_nothing_on_postgresql(
    exported: tuple[Path, Path, Path], tmp_path: Path, pg_url: str
) -> None:
    path, _, _ = exported
    lines = lines_of(path)
    tally: Counter[str] = Counter()
    runner = asyncio.Runner()

    @settings(FUZZ, max_examples=examples(20))
    @given(st.lists(mutation(len(lines)), min_size=1, max_size=2), st.booleans())
    def check(changes: list[tuple[Any, ...]], packed: bool) -> None:
        mutated = lines
        for change in changes:
            mutated = apply(mutated, change)
        with _case(tmp_path) as folder:
            file = write(mutated, folder / "mutated.jsonl", packed)
            try:
                runner.run(check_one(pg_url, folder, file, {}, tally))
            finally:
                runner.run(_empty(pg_url))

    with runner:
        runner.run(_migrate(pg_url))
        check()
    assert tally["ExportFormatError"] > 0, tally


# -- helpers -------------------------------------------------------------------------


@contextlib.contextmanager
def _case(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "case"
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


async def _migrate(url: str) -> None:
    async with Database(url) as db:
        await upgrade(db)


async def _empty(url: str) -> None:
    async with Database(url) as db:

        def work(conn: Any) -> None:
            for table in reversed([kind.table.name for kind in KINDS.values()]):
                conn.execute(text(f"DELETE FROM {table}"))

        await db.write(work)
