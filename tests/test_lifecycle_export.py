"""Export and import: the file round-trips exactly on every SQL backend, importing is
idempotent, and a bad line or a conflicting destination is refused, naming the line,
with the database unchanged."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backends import Backend
from lifecycle_support import lovia_entries, populate, public_reads
from lovia_store import SQLSession, StoredValueError, UserError
from lovia_store.cli.app import main
from lovia_store.lifecycle import (
    DestinationConflictError,
    ExportFormatError,
    copy_database,
    counter_mismatches,
    export,
    import_file,
    read_file,
)
from lovia_store.lifecycle.loading import UNIT_ROWS


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A populated SQLite database and its export (plain JSON lines)."""
    folder = tmp_path_factory.mktemp("exported")
    source = str(folder / "source.sqlite3")
    path = folder / "all.jsonl"

    async def make() -> None:
        await populate(source)
        await export(source, path)

    asyncio.run(make())
    return source, path


def data_lines(path: Path) -> list[str]:
    """The file's lines without the header (whose export time differs)."""
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as file:
        return file.read().splitlines()[1:]


async def test_a_file_imported_and_exported_again_is_the_same_on_every_backend(
    sql_backend: Backend, exported: tuple[str, Path], tmp_path: Path
) -> None:
    source, path = exported
    assert sql_backend.target is not None
    report = await import_file(sql_backend.target, path)
    assert report.changed and sum(report.unchanged.values()) == 0
    assert await public_reads(sql_backend.target) == await public_reads(source)
    again = tmp_path / "again.jsonl.gz"
    await export(sql_backend.target, again)
    assert data_lines(again) == data_lines(path)  # every column, every value, exactly
    # Importing twice changes nothing.
    second = await import_file(sql_backend.target, again)
    assert not second.changed and second.unchanged == report.inserted


async def test_the_file_format_is_readable_json_lines(exported: tuple[str, Path]) -> None:
    _, path = exported
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    header, end = lines[0], lines[-1]
    assert header["record"] == "header" and header["format"] == "lovia-store-export"
    assert header["version"] == 1 and header["schema_revision"]
    kinds = [line["record"] for line in lines[1:-1]]
    assert end == {"record": "end", "counts": {k: kinds.count(k) for k in end["counts"]}}
    assert set(kinds) == {
        "session",
        "message",
        "segment",
        "snapshot",
        "run",
        "run_entry",
        "tool_effect",
        "run_lease",
    }
    message = next(line for line in lines if line["record"] == "message")
    assert message["created_at"].endswith("+00:00") and "." in message["created_at"]
    json.loads(message["entry_json"])  # the stored document, exactly, as a string
    records = list(read_file(path))
    assert len(records) == len(lines) - 2 and records[0].line == 2


async def test_one_session_exports_alone(exported: tuple[str, Path], tmp_path: Path) -> None:
    source, _ = exported
    path = tmp_path / "one.jsonl"
    report = await export(source, path, session_ids=["zett-1"])
    assert report.counts == {"session": 1, "message": 4, "snapshot": 1}
    target = str(tmp_path / "one.sqlite3")
    await import_file(target, path)
    reads = await public_reads(target)
    assert [s.session_id for s in reads["list_sessions"]] == ["zett-1"]
    assert reads["zett-1"] == (await public_reads(source))["zett-1"]
    with pytest.raises(UserError, match="no session 'nobody'"):
        await export(source, tmp_path / "none.jsonl", session_ids=["nobody"])


def mutate(lines: list[str], index: int, change: Callable[[dict[str, Any]], Any]) -> list[str]:
    document = json.loads(lines[index])
    result = change(document)
    lines = list(lines)
    lines[index] = result if isinstance(result, str) else json.dumps(document)
    return lines


def first(lines: list[str], record: str) -> int:
    return next(i for i, line in enumerate(lines) if json.loads(line)["record"] == record)


BAD: dict[str, tuple[Callable[[list[str]], list[str]], str]] = {
    "not json": (lambda ls: mutate(ls, 3, lambda d: "{not json"), "not a JSON document"),
    "not an object": (lambda ls: mutate(ls, 3, lambda d: "[1, 2]"), "a JSON object"),
    "unknown record": (
        lambda ls: mutate(ls, 3, lambda d: d.update(record="mystery")),
        "unknown record type 'mystery'",
    ),
    "unknown column": (
        lambda ls: mutate(ls, 3, lambda d: d.update(colour="red")),
        "no column 'colour'",
    ),
    "wrong type": (
        lambda ls: mutate(ls, 3, lambda d: d.update(sequence="1")),
        "message.sequence is an integer",
    ),
    "naive time": (
        lambda ls: mutate(ls, 3, lambda d: d.update(created_at="2026-01-01T00:00:00")),
        "no UTC offset",
    ),
    "missing key": (lambda ls: mutate(ls, 3, lambda d: d.pop("sequence")), "needs 'sequence'"),
    "null required": (
        lambda ls: mutate(ls, 3, lambda d: d.update(request_id=None)),
        "cannot be null",
    ),
    "bad stored json": (
        lambda ls: mutate(ls, 3, lambda d: d.update(entry_json="{broken")),
        "entry_json is not a JSON document",
    ),
    "repeated message": (
        lambda ls: [*ls[: first(ls, "message") + 1], *ls[first(ls, "message") :]],
        r"this message repeats the key of line \d+ \(tenant='', session_id='.*', sequence=1\)",
    ),
    "repeated key, other content": (
        lambda ls: [
            *ls[: first(ls, "message") + 1],
            mutate(ls, first(ls, "message"), lambda d: d.update(request_id="another"))[
                first(ls, "message")
            ],
            *ls[first(ls, "message") + 1 :],
        ],
        "this message repeats the key of line",
    ),
    "repeated idempotency key": (
        lambda ls: mutate(
            mutate(ls, first(ls, "message"), lambda d: d.update(idempotency_key="k")),
            first(ls, "message") + 1,
            lambda d: d.update(idempotency_key="k"),
        ),
        r"repeats the key of line \d+ \(tenant='', session_id='.*', idempotency_key='k'\)",
    ),
    "repeated session": (
        lambda ls: [*ls[:-1], ls[first(ls, "session")], ls[-1]],
        "this session repeats the key of line 2",
    ),
    "not an entry": (
        lambda ls: mutate(ls, 3, lambda d: d.update(entry_json='{"changed": true}')),
        "message.entry_json is not what the stores write",
    ),
    "metadata not an object": (
        lambda ls: mutate(ls, 3, lambda d: d.update(metadata_json="[1]")),
        "message.metadata_json is not what the stores write",
    ),
    "negative sequence counter": (
        lambda ls: mutate(ls, 1, lambda d: d.update(last_sequence=-5)),
        "session.last_sequence -5 is below 0",
    ),
    "status not the head's": (
        lambda ls: mutate(ls, first(ls, "run"), lambda d: d.update(status="exploded")),
        "'exploded' is not its head's",
    ),
    "damaged head": (
        lambda ls: mutate(ls, first(ls, "run"), lambda d: d.update(head_json='{"turns": 1}')),
        "run.head_json is not what the stores write",
    ),
    "too long": (
        lambda ls: mutate(ls, 3, lambda d: d.update(entry_type="x" * 33)),
        "longer than 32",
    ),
    "out of range": (
        lambda ls: mutate(ls, 3, lambda d: d.update(sequence=2**63)),
        "out of range",
    ),
    "orphan child": (
        lambda ls: mutate(ls, 3, lambda d: d.update(session_id="elsewhere")),
        "must follow that session",
    ),
    "message count not the rows": (
        lambda ls: mutate(ls, 1, lambda d: d.update(message_count=999)),
        r"session 'lovia-0': message_count says 999, the file holds 10 rows",
    ),
    "last sequence below a message": (
        lambda ls: mutate(ls, 1, lambda d: d.update(last_sequence=3)),
        r"session 'lovia-0': last_sequence says 3, the file holds sequence 10",
    ),
    "run count below the segments": (
        lambda ls: mutate(ls, 1, lambda d: d.update(run_count=1)),
        r"session 'lovia-0': run_count says 1, the file holds position 2",
    ),
    "snapshot version not the newest": (
        lambda ls: mutate(ls, first(ls, "session"), lambda d: d.update(snapshot_version=7)),
        r"session 'lovia-0': snapshot_version says 7, the file holds no version",
    ),
    "entry count not the entries": (
        lambda ls: mutate(ls, first(ls, "run"), lambda d: d.update(entry_count=40)),
        r"entry_count says 40, the file holds \d+ rows",
    ),
    "newer format": (lambda ls: mutate(ls, 0, lambda d: d.update(version=99)), "format version"),
    "unknown revision": (
        lambda ls: mutate(ls, 0, lambda d: d.update(schema_revision="9999")),
        "unknown to this lovia-store",
    ),
    "no header": (lambda ls: ls[1:], "no header"),
    "truncated": (lambda ls: ls[:-1], "ends before its end record"),
    "wrong count": (
        lambda ls: mutate(ls, len(ls) - 1, lambda d: d["counts"].update(message=1)),
        "the end record counts 1 message",
    ),
}


def bad_line(lines: list[str], changed: list[str]) -> int:
    """The 1-based line the error must name: the first that differs (or the line after)."""
    for i, (a, b) in enumerate(zip(lines, changed, strict=False)):
        if a != b:
            return i + 1
    return len(changed) + 1


@pytest.mark.parametrize("case", list(BAD))
async def test_a_bad_line_is_refused_naming_it_and_nothing_is_written(
    case: str, exported: tuple[str, Path], tmp_path: Path
) -> None:
    _, path = exported
    lines = path.read_text().splitlines()
    damage, message = BAD[case]
    changed = damage(lines)
    expected = 1 if case == "no header" else bad_line(lines, changed)
    if case == "truncated":
        expected = len(changed) + 1
    if case == "repeated idempotency key":  # the first of the two lines given a key is valid
        expected += 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(changed) + "\n")
    target = str(tmp_path / "target.sqlite3")
    async with SQLSession(target) as session:  # the destination holds a session already
        await session.append("mine", lovia_entries(0), run_id="mine-1")
    before = await public_reads(target)
    with pytest.raises(ExportFormatError, match=message) as caught:
        await import_file(target, bad)
    assert caught.value.line == expected, str(caught.value)
    assert str(caught.value).startswith(f"line {expected}: ")
    assert await public_reads(target) == before


async def test_a_damaged_gzip_file_is_refused(exported: tuple[str, Path], tmp_path: Path) -> None:
    _, path = exported
    packed = gzip.compress(path.read_bytes())
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ExportFormatError, match=r"cannot be read|ends before"):
        await import_file(str(tmp_path / "t.sqlite3"), bad)


async def test_a_conflicting_record_is_refused_naming_its_line_before_any_write(
    exported: tuple[str, Path], tmp_path: Path
) -> None:
    _, path = exported
    target = str(tmp_path / "target.sqlite3")
    await import_file(target, path)
    lines = path.read_text().splitlines()
    index = max(i for i, line in enumerate(lines) if json.loads(line)["record"] == "message")
    other = json.loads(lines[first(lines, "message")])["entry_json"]  # a valid entry
    changed = mutate(lines, index, lambda d: d.update(entry_json=other))
    # A new session before it in the file must not be written either.
    extra = [json.loads(lines[1])]
    extra[0].update(session_id="brand-new", last_sequence=0, message_count=0, run_count=0)
    changed.insert(1, json.dumps(extra[0]))
    count = json.loads(changed[-1])
    count["counts"]["session"] += 1
    changed[-1] = json.dumps(count)
    bad = tmp_path / "conflict.jsonl"
    bad.write_text("\n".join(changed) + "\n")
    before = await public_reads(target)
    with pytest.raises(DestinationConflictError, match="entry_json differ") as caught:
        await import_file(target, bad)
    assert caught.value.line == index + 2 and caught.value.kind == "message"
    assert await public_reads(target) == before


async def test_import_reads_a_file_object_and_a_dry_run_writes_nothing(
    exported: tuple[str, Path], tmp_path: Path
) -> None:
    _, path = exported
    target = str(tmp_path / "target.sqlite3")
    data = io.BytesIO(gzip.compress(path.read_bytes()))
    dry = await import_file(target, data, dry_run=True)
    assert dry.inserted["message"] > 0
    assert (await public_reads(target))["list_sessions"] == []
    real = await import_file(target, data)
    assert real.inserted == dry.inserted


async def test_the_cli_exports_and_imports(
    exported: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, _ = exported
    path, target = tmp_path / "cli.jsonl.gz", str(tmp_path / "cli.sqlite3")
    code = await asyncio.to_thread(main, ["export", source, "-o", str(path), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["records"]["session"] == 9
    code = await asyncio.to_thread(main, ["import", str(path), target])
    assert code == 0 and "inserted 9 session" in capsys.readouterr().out
    code = await asyncio.to_thread(main, ["import", str(path), target, "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and sum(document["inserted"].values()) == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    code = await asyncio.to_thread(main, ["import", str(bad), target, "--json"])
    captured = capsys.readouterr()
    assert code == 2 and '"error": "ExportFormatError"' in captured.out
    assert "line 1:" in captured.err


async def test_sessions_too_big_to_group_are_read_alone_with_the_same_lines(
    exported: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions are read in groups; one with more segments and snapshots than a group may
    hold is streamed on its own: either way the file is the same."""
    from lovia_store.lifecycle import reading

    source, path = exported
    monkeypatch.setattr(reading, "_HELD", 1)
    monkeypatch.setattr(reading, "GROUP", 2)
    alone = tmp_path / "alone.jsonl"
    await export(source, alone)
    assert data_lines(alone) == data_lines(path)


IMPORT_CHILD = """
import asyncio, os, signal, sys
from lovia_store.lifecycle import import_file

def report(task, done, total):
    if task == "importing records" and done >= int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(import_file(sys.argv[2], sys.argv[1], progress=report))
"""


async def test_an_import_killed_mid_way_is_finished_by_importing_again(tmp_path: Path) -> None:
    import subprocess
    import sys

    from lovia_store import AssistantTextEntry, Database, InputEntry

    source, path = str(tmp_path / "source.sqlite3"), tmp_path / "big.jsonl.gz"
    async with Database(source, synchronous="normal") as db:
        session = SQLSession(db)
        for s in range(12):
            run = [
                AssistantTextEntry(content=f"{s}.{e}")
                if e % 2
                else InputEntry(role="user", content="q")
                for e in range(500)
            ]
            await session.append(f"s-{s:02d}", run, run_id=f"r-{s}")
    await export(source, path)
    target = str(tmp_path / "target.sqlite3")
    child = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", IMPORT_CHILD, str(path), target, "4500"],
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr.decode()
    async with SQLSession(target) as partial:
        loads = [len(await partial.load(f"s-{s:02d}")) for s in range(12)]
    loaded = sum(loads)
    assert 0 < loaded < 6000  # really mid-way
    assert set(loads) <= {0, 500}  # whole sessions only, their counters true (issue 34)
    assert await counter_mismatches(target) == []
    report = await import_file(target, path)
    assert report.unchanged["message"] == loaded
    assert report.inserted["message"] + loaded == 6000
    assert await public_reads(target) == await public_reads(source)


async def test_a_key_repeated_late_in_the_file_is_refused_before_any_write(
    sql_backend: Backend, exported: tuple[str, Path], tmp_path: Path
) -> None:
    """The database would refuse the repeat mid-write, after the sessions before it were
    written; the checking pass (a dry run too) refuses it first, naming the line."""
    _, path = exported
    lines = path.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if json.loads(line)["record"] == "message")
    bad = tmp_path / "repeated.jsonl"
    bad.write_text("\n".join([*lines[: last + 1], lines[last], *lines[last + 1 :]]) + "\n")
    assert sql_backend.target is not None
    before = await public_reads(sql_backend.target)
    for dry_run in (True, False):
        with pytest.raises(ExportFormatError, match="repeats the key of line") as caught:
            await import_file(sql_backend.target, bad, dry_run=dry_run)
        assert caught.value.line == last + 2
    assert await public_reads(sql_backend.target) == before


async def test_export_files_are_owner_only_and_replace_only_when_whole(
    exported: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, _ = exported
    monkeypatch.setattr(os, "umask", os.umask)  # restored after the test
    os.umask(0o022)
    for name in ("plain.jsonl", "packed.jsonl.gz"):
        await export(source, tmp_path / name)
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["packed.jsonl.gz", "plain.jsonl"]


async def test_a_damaged_row_fails_export_and_copy_typed_leaving_no_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another program left bytes (a BLOB) in a text column of a SQLite file."""
    source = tmp_path / "damaged.sqlite3"
    await populate(str(source))
    with sqlite3.connect(source) as conn:
        conn.execute(
            "UPDATE lovia_messages SET entry_json = X'7bff7d' "
            "WHERE sequence = (SELECT max(sequence) FROM lovia_messages)"
        )
    previous = tmp_path / "out.jsonl"
    previous.write_text("an earlier export\n")
    with pytest.raises(StoredValueError, match="holds bytes, not text, in entry_json") as caught:
        await export(str(source), previous)
    assert caught.value.table == "lovia_messages" and "sequence" in caught.value.row
    assert previous.read_text() == "an earlier export\n"
    assert sorted(os.listdir(tmp_path)) == ["damaged.sqlite3", "out.jsonl"]
    with pytest.raises(StoredValueError, match="holds bytes"):
        await copy_database(str(source), str(tmp_path / "copy.sqlite3"))
    out = str(tmp_path / "cli.jsonl")
    code = await asyncio.to_thread(main, ["export", str(source), "-o", out])
    captured = capsys.readouterr()
    assert code == 5 and "holds bytes, not text" in captured.err
    assert "Traceback" not in captured.err and "cli.jsonl" not in os.listdir(tmp_path)


async def test_a_session_larger_than_a_unit_is_checked_then_written_whole(
    tmp_path: Path,
) -> None:
    """A session with more rows than a unit holds is staged and written in one
    transaction of its own (after a dry run that looks every row up and writes
    nothing); a session that follows it, and a second import, are as usual."""
    from lovia_store import InputEntry

    source, path = str(tmp_path / "source.sqlite3"), tmp_path / "big.jsonl"
    async with SQLSession(source) as session:
        big = [InputEntry(role="user", content=f"q{n}") for n in range(UNIT_ROWS + 300)]
        await session.append("big", big, run_id="r-big")
        await session.append("big", lovia_entries(1), run_id="r-big-2")
        await session.append("small", lovia_entries(2), run_id="r-small")
    await export(source, path)
    target = str(tmp_path / "target.sqlite3")
    dry = await import_file(target, path, dry_run=True)
    assert dry.inserted["message"] == UNIT_ROWS + 310 and dry.inserted["segment"] == 3
    async with SQLSession(target) as nothing:
        assert await nothing.load("big") == []
    report = await import_file(target, path)
    assert report.inserted == dry.inserted
    assert await counter_mismatches(target) == []
    assert await public_reads(target) == await public_reads(source)
    again = await import_file(target, path)
    assert sum(again.inserted.values()) == 0 and again.unchanged == report.inserted


async def test_a_line_longer_than_the_bound_is_refused_before_it_is_read_whole(
    exported: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small gzip file can hold one enormous line: the import refuses a line longer
    than ``MAX_LINE_BYTES`` naming it, having read no more than the bound of it (here a
    64 MiB line of 64 KiB compressed, under a bound made small). A line of exactly the
    bound is read."""
    import tracemalloc

    from lovia_store.lifecycle import importing

    _, path = exported
    lines = path.read_bytes().splitlines()
    longest = max(range(len(lines)), key=lambda i: len(lines[i]))
    target = str(tmp_path / "target.sqlite3")
    monkeypatch.setattr(importing, "MAX_LINE_BYTES", len(lines[longest]))
    await import_file(target, path, dry_run=True)
    monkeypatch.setattr(importing, "MAX_LINE_BYTES", len(lines[longest]) - 1)
    with pytest.raises(ExportFormatError, match="longer than") as caught:
        await import_file(target, path, dry_run=True)
    assert caught.value.line == longest + 1

    monkeypatch.setattr(importing, "MAX_LINE_BYTES", 1 << 16)
    huge = tmp_path / "huge.jsonl.gz"
    with gzip.open(huge, "wb") as packed:
        packed.writelines(line + b"\n" for line in lines[:2])
        packed.write(b'{"record": "message", "entry_json": "')
        chunk = b" " * (1 << 20)
        for _ in range(64):
            packed.write(chunk)
        packed.write(b'"}\n')
        packed.writelines(line + b"\n" for line in lines[2:])
    assert huge.stat().st_size < 1 << 20
    before = await public_reads(target)
    tracemalloc.start()
    try:
        with pytest.raises(ExportFormatError, match=r"longer than 65,536 bytes") as caught:
            await import_file(target, huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.line == 3 and str(caught.value).startswith("line 3: ")
    assert peak < 16 << 20, f"{peak:,} bytes"
    assert await public_reads(target) == before
